"""The graph engine: one walker from objects to a typed definition plus leaves, one builder
back.

:func:`flatten` walks Python objects (graph nodes, Variables, arrays, and pytree containers
holding them) depth first, attributes sorted, and returns a :class:`FlatGraph`: the typed
definitions of :mod:`flaxen.nnx._graphdef`, the shared objects by index (``refs``) and the
State leaves in walk order (Variables, or bare arrays) with their paths.

:func:`unflatten` is the only builder: it turns definitions plus leaf values back into
objects. Given ``idxmap`` (definition index -> existing object) it reuses those objects,
updating them in place (Variables get new values and metadata, nodes get their attributes
rewritten) instead of building new ones: that one mode serves ``nnx.update`` of structure,
``UpdateContext`` and every transform's write-back.

Speed: walking Python objects is the expensive part, so :func:`flatten_cached` remembers the
last walk per tuple of root objects and reuses it while the global structure epoch (bumped
by every graph-node attribute write) is unchanged and mutable containers still hold the same
children. The generated straight-line split/merge code (:mod:`flaxen.nnx._codegen`) sits on
top of these walks.
"""

from __future__ import annotations

import operator
import typing as tp

import jax
import numpy as np

from flaxen.errors import GraphUpdateStaticError
from flaxen.nnx import _node_protocol as _proto
from flaxen.nnx import _trace
from flaxen.nnx._graph_node import GraphNode, new_node
from flaxen.nnx._graphdef import (
    ArrayLeaf,
    NodeDef,
    NodeRef,
    PytreeType,
    Static,
    VariableDef,
    freeze,
    thaw,
)
from flaxen.nnx._snapshots import SNAPSHOT_TYPES
from flaxen.nnx.statelib import State, _sort_keys
from flaxen.nnx.variablelib import Variable, is_array_ref

_current_trace = _trace.current_trace
_EPOCH = _trace._EPOCH
_SCALARS = frozenset({int, float, bool, str, complex, type(None), type, bytes})
_ARRAYS = (jax.Array, np.ndarray)
_tree_flatten = jax.tree_util.tree_flatten
_DATA_NUMBERS = frozenset({int, float, bool, complex})
_SNAPSHOT = frozenset({dict, list, State})  # mutable containers re-checked by identity
_tree_leaves = jax.tree_util.tree_leaves
_is = operator.is_
_get_raw = operator.attrgetter("raw_value")
MISSING = object()  # a leaf with no new value (unflatten keeps the existing one)
# types registered with nnx.register_graph_node_type / register_pytree_node_type (not JAX
# pytrees): the walk and the builder go through their node implementation
_USER_TYPES = _proto.USER_TYPES


def _freeze_meta(meta: dict) -> tuple:
    if not meta:
        return ()
    return tuple((k, freeze(v)) for k, v in sorted(meta.items()))


def _meta_order(meta: dict) -> tuple | None:
    """The metadata's key order when it is not sorted (see ``VariableDef.order``)."""
    keys = tuple(meta)
    return None if list(keys) == sorted(keys) else keys


def variable_def(x: tp.Any, index: int) -> VariableDef:
    """The definition of Variable ``x`` at position ``index``."""
    meta = x._var_metadata
    return VariableDef(type(x), index, _freeze_meta(meta), _meta_order(meta) if meta else None)


def _key_part(k: tp.Any) -> tp.Any:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return str(k)


def path_str(path: tuple) -> str:
    return "/" + "/".join(map(str, path))


def flatten_pytree(x: tp.Any) -> tuple[list[tuple[tp.Any, tp.Any]], tp.Any]:
    """One level of a pytree container: ``([(key, child), ...], treedef)``."""
    with_path, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    return [(_key_part(kp[0]), leaf) for kp, leaf in with_path], treedef


def unflatten_pytree(items: tp.Sequence[tuple[tp.Any, tp.Any]], treedef: tp.Any) -> tp.Any:
    return treedef.unflatten([v for _, v in items])


def is_pytree_node(x: tp.Any) -> bool:
    """True for a pytree container (not a leaf, not a Variable or graph node)."""
    if type(x) in _SCALARS or isinstance(x, (Variable, GraphNode, *_ARRAYS)):
        return False
    return not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(x))


def _has_graph_leaves(x: tp.Any) -> bool:
    for leaf in _tree_leaves(x, is_leaf=_is_graph_leaf):
        if isinstance(leaf, (Variable, GraphNode, *_ARRAYS)) or type(leaf) in _USER_TYPES:
            return True
    return False


def _is_graph_leaf(x: tp.Any) -> bool:
    return isinstance(x, (Variable, GraphNode)) or type(x) in _USER_TYPES


class FlatGraph:
    """Result of one walk: the definitions, the shared objects and the State leaves."""

    __slots__ = ("defs", "refs", "leaves", "paths", "containers", "has_arrays", "epoch",
                 "graphdef", "tree", "lookup", "sorted_attrs")

    def __init__(self, defs: tuple, refs: list, leaves: list, paths: list,
                 containers: list, has_arrays: bool) -> None:
        self.defs = defs
        self.refs = refs
        self.leaves = leaves
        self.paths = paths
        self.containers = containers
        self.has_arrays = has_arrays
        self.epoch = _EPOCH[0]
        self.graphdef: tp.Any = None  # set by the caller's intern function
        # tree mode's view of the same walk (see _graph_walk.tree_flatten_cached), checked
        # once against a real tree-mode flatten; False when the two disagree
        self.tree: tp.Any = None
        self.lookup: tp.Any = None  # update's generated state lookup (see _graph_ops)
        # a transform has put the walked nodes' attributes in name order (see
        # _lift.Lift.finish): while this walk stays valid, they still are
        self.sorted_attrs = False

    @property
    def variables(self) -> list:
        return self.leaves

    def values(self) -> list:
        """The current value of every leaf (a Variable's raw value, or the bare array)."""
        if not self.has_arrays:
            return list(map(_get_raw, self.leaves))
        return [x.raw_value if isinstance(x, Variable) else x for x in self.leaves]

    def refmap(self) -> dict[int, int]:
        """``id(object) -> index`` of every shared object of the walk."""
        return {id(obj): i for i, obj in enumerate(self.refs)}

    def still_valid(self) -> bool:
        for obj, treedef, leaves in self.containers:
            if treedef is None:  # a dict / list / State: its direct children, by identity
                snap = _snapshot(obj)
                # map/all run in C: this check is on every nnx.jit call of a training loop
                if len(snap) != len(leaves) or not all(map(_is, snap, leaves)):
                    return False
                continue
            new_leaves, new_def = _tree_flatten(obj, is_leaf=_is_graph_leaf)
            if new_def != treedef or len(new_leaves) != len(leaves):
                return False
            for a, b in zip(new_leaves, leaves):
                if a is not b:
                    return False
        return True


def _snapshot(x: tp.Any) -> tuple:
    """The keys and children of a dict / list / State (what a cached walk must re-check)."""
    t = type(x)
    if t is list:
        return tuple(x)
    if t in _USER_TYPES:  # a registered node: its keys and children, by identity
        items = _USER_TYPES[t].flatten(x)[0]
        return (*[k for k, _ in items], *[v for _, v in items])
    m = x._mapping if t is State else x
    return (*m, *m.values())


def flatten(roots: tp.Sequence[tp.Any], root_paths: tp.Sequence[tuple] | None = None
            ) -> FlatGraph:
    """Walks ``roots`` (graph nodes, Variables or containers of them) into a FlatGraph."""
    ids: dict[int, int] = {}
    refs: list = []
    leaves: list = []
    paths: list = []
    containers: list = []
    arrays = [False]

    def leaf(path: tuple, x: tp.Any) -> VariableDef:
        arrays[0] = True
        leaves.append(x)
        paths.append(path)
        return VariableDef(ArrayLeaf, -1, ())

    def visit(x: tp.Any, path: tuple) -> tp.Any:
        tx = type(x)
        if tx in _SCALARS:
            return Static(x)
        if isinstance(x, Variable):
            i = ids.get(id(x))
            if i is not None:
                return NodeRef(tx, i)
            i = len(refs)
            ids[id(x)] = i
            refs.append(x)
            leaves.append(x)
            paths.append(path)
            return variable_def(x, i)
        if isinstance(x, GraphNode):
            i = ids.get(id(x))
            if i is not None:
                return NodeRef(tx, i)
            i = len(refs)
            ids[id(x)] = i
            refs.append(x)
            d: dict[tp.Any, tp.Any] = x.__dict__
            status = getattr(x, "_pytree__status", None)
            attrs: tuple
            if tx._graph_int_keys:
                # items are '0', '1', ...; other attributes (``lst.tag = ...``) keep their names
                attrs = tuple((ik, visit(d[k], (*path, ik))) for k in sorted(
                    d, key=lambda s: (0, int(s)) if s.isdigit() else (1, s))
                    for ik in (int(k) if k.isdigit() else k,))
            elif status and any(type(v) in _DATA_NUMBERS and status.get(k)
                                for k, v in d.items()):
                # numbers marked ``nnx.data(...)`` are State leaves, like arrays
                attrs = tuple((k, leaf((*path, k), d[k])
                               if type(d[k]) in _DATA_NUMBERS and status.get(k)
                               else visit(d[k], (*path, k))) for k in _sort_keys(d))
            else:
                attrs = tuple((k, visit(d[k], (*path, k))) for k in _sort_keys(d))
            # a Pytree's data/static status travels with its definition
            return NodeDef(tx, i, attrs, status)
        if is_array_ref(x):  # a raw jax.Ref: a State leaf, shared by identity like a Variable
            i = ids.get(id(x))
            if i is not None:
                return NodeRef(tx, i)
            i = ids[id(x)] = len(refs)
            refs.append(x)
            arrays[0] = True
            leaves.append(x)
            paths.append(path)
            return VariableDef(ArrayLeaf, i, ())
        if isinstance(x, _ARRAYS):
            arrays[0] = True
            leaves.append(x)
            paths.append(path)
            return VariableDef(ArrayLeaf, -1, ())
        if tx in _USER_TYPES:
            return registered(x, tx, path)
        full_def: tp.Any  # jax's PyTreeDef (unresolved by mypy)
        full, full_def = _tree_flatten(x, is_leaf=_is_graph_leaf)
        if full_def.num_nodes == 1 and full_def.num_leaves == 1:  # x itself is a leaf
            return Static(freeze(x))
        if not any(isinstance(leaf, (Variable, GraphNode, *_ARRAYS)) for leaf in full):
            try:
                hash(x)
                return Static(x)
            except TypeError:
                pass  # an unhashable constant container: a pytree node, copied on merge
        children, treedef = flatten_pytree(x)
        if type(x) in _SNAPSHOT:  # nested containers are checked on their own
            containers.append((x, None, _snapshot(x)))
        elif not isinstance(x, tuple):
            containers.append((x, full_def, full))
        attrs = tuple((k, visit(c, (*path, k))) for k, c in children)
        return NodeDef(PytreeType, -1, attrs, treedef)

    def registered(x: tp.Any, tx: type, path: tuple) -> tp.Any:
        impl = _USER_TYPES[tx]
        graph = type(impl) is _proto.GraphNodeImpl
        i = -1
        if graph:  # shared by identity, like a Module
            j = ids.get(id(x))
            if j is not None:
                return NodeRef(tx, j)
            i = ids[id(x)] = len(refs)
            refs.append(x)
        items, aux = impl.flatten(x)
        # a mutation through the type's own methods bumps no epoch: re-checked like a list
        containers.append((x, None, _snapshot(x)))
        attrs: list[tuple[tp.Any, tp.Any]] = []
        for k, v in items:
            if type(v) is _proto.StaticElem:
                attrs.append((k, Static(freeze(v.value))))
            elif type(v) is _proto.DataElem:
                v = v.value
                attrs.append((k, leaf((*path, k), v) if type(v) in _DATA_NUMBERS
                              else visit(v, (*path, k))))
            else:
                attrs.append((k, visit(v, (*path, k))))
        return NodeDef(tx, i, tuple(attrs), freeze(aux))

    if root_paths is None:
        defs = tuple(visit(r, ()) for r in roots)
    else:
        defs = tuple(visit(r, p) for r, p in zip(roots, root_paths))
    return FlatGraph(defs, refs, leaves, paths, containers, arrays[0])


# -- cached flatten ------------------------------------------------------------------------

_CACHE_SIZE = 64
_cache: dict[tuple, FlatGraph] = {}
_cache_roots: dict[tuple, tuple] = {}


def flatten_cached(roots: tuple, intern: tp.Callable[[FlatGraph, FlatGraph | None], None]
                   ) -> FlatGraph:
    """:func:`flatten` with reuse: the Python walk runs only when the structure changed.

    ``intern`` is called on each fresh walk with the previous walk of the same roots (or
    None), so the caller can reuse the previous GraphDef object when it is equal. Walks are
    cached per ``intern`` function: each kind of GraphDef keeps its own entries.
    """
    key, held = _cache_key(intern, roots)
    fg = _cache.get(key)
    if fg is not None:
        for a, b in zip(_cache_roots[key], held):
            if a is not b:  # an id was reused by a new object
                fg = None
                break
        else:
            if (fg.epoch == _EPOCH[0] and not fg.has_arrays
                    and (not fg.containers or fg.still_valid())):
                return fg
    new = flatten(roots)
    intern(new, fg)
    if len(_cache) >= _CACHE_SIZE and key not in _cache:
        oldest = next(iter(_cache))
        del _cache[oldest]
        del _cache_roots[oldest]
    _cache[key] = new
    _cache_roots[key] = held
    return new


def _cache_key(intern: tp.Any, roots: tuple) -> tuple[tuple, tuple]:
    # A lone tuple, list or dict root (``nnx.split((model, optimizer))``) is usually built
    # afresh for each call: key it by what it holds, so the walk of the same objects is
    # reused. (A list or dict root's own later mutation shows in ``still_valid``.)
    if len(roots) == 1:
        root = roots[0]
        t = type(root)
        if t is tuple or t is list:
            return (intern, t, *map(id, root)), tuple(root)
        if t is dict:
            held = tuple(root.values())
            return (intern, dict, tuple(root), *map(id, held)), held
    return (intern, *map(id, roots)), tuple(roots)


def clear_cache() -> None:
    _cache.clear()
    _cache_roots.clear()


# -- the builder ---------------------------------------------------------------------------

def new_variable(typ: type, value: tp.Any, meta: dict) -> Variable:
    var: tp.Any = object.__new__(typ)
    object.__setattr__(var, "_var_metadata", meta)
    object.__setattr__(var, "_trace_state", _current_trace())
    object.__setattr__(var, "raw_value", value)
    return var


_MISSING_ATTR = object()


def unflatten(defs: tuple, leaves: tp.Sequence[tp.Any],
              idxmap: tp.Mapping[int, tp.Any] | None = None, recreate: bool = True,
              fresh: bool = False) -> tuple[list, dict[int, tp.Any]]:
    """Objects for ``defs``; ``leaves[i]`` is the value of the i-th leaf definition.

    A leaf that is a snapshot (:mod:`flaxen.nnx._snapshots`) also supplies its Variable's
    metadata. A Variable leaf is used as it is, unless ``fresh``: then a new Variable takes
    its value and metadata. A leaf that is :data:`MISSING` keeps the reused Variable's
    value. Objects whose definition index is in ``idxmap`` are reused and updated in place;
    all others are built fresh.
    With ``recreate=False`` (Flax's ``recreate_variables=False``) a leaf that is not a
    Variable is put in place as it is, not wrapped in a new Variable (reused Variables are
    still updated). Returns the roots and ``{index: object}`` for every shared object.
    """
    built: dict[int, tp.Any] = {}
    pos = [0]
    reuse = idxmap or {}

    def build(d: tp.Any) -> tp.Any:
        t = type(d)
        if t is Static:
            return d.get()
        if t is NodeRef:
            return built[d.index]
        if t is VariableDef:
            i = pos[0]
            pos[0] = i + 1
            leaf = leaves[i]
            if d.type is ArrayLeaf:
                value = leaf.value if type(leaf) in SNAPSHOT_TYPES else leaf
                if d.index >= 0:  # a raw jax.Ref: later references to it resolve to it
                    built[d.index] = value
                return value
            if type(leaf) in SNAPSHOT_TYPES:
                value, meta = leaf.value, leaf._var_metadata
            elif fresh and isinstance(leaf, Variable):  # copying ops: new Variables
                value, meta = leaf.raw_value, leaf._var_metadata
            elif isinstance(leaf, Variable):  # today's states hold the Variables: use them
                var = reuse.get(d.index) if reuse else None
                if var is None or var is leaf or type(var) is not type(leaf):
                    built[d.index] = leaf
                    return leaf
                value, meta = leaf.raw_value, leaf._var_metadata
            else:
                value, meta = leaf, None
            var = reuse.get(d.index) if reuse else None
            if var is None and not recreate:
                built[d.index] = leaf
                return leaf
            if var is not None and type(var) is d.type:
                if value is not MISSING:
                    object.__setattr__(var, "raw_value", value)
                if meta is None:
                    meta = d.thawed_metadata()
                if meta != var._var_metadata:
                    object.__setattr__(var, "_var_metadata", dict(meta))
            else:
                var = new_variable(d.type, value,
                                   dict(meta) if meta is not None else d.thawed_metadata())
            built[d.index] = var
            return var
        if d.type is PytreeType:
            return d.metadata.unflatten([build(s) for _, s in d.attributes])
        if d.type in _USER_TYPES:
            return build_registered(d)
        str_keys = d.type._graph_int_keys
        obj = reuse.get(d.index) if reuse else None
        if obj is not None and type(obj) is d.type:
            built[d.index] = obj
            if d.metadata is not None:
                object.__setattr__(obj, "_pytree__status", d.metadata)
            new_attrs = {str(k) if str_keys else k: build(s) for k, s in d.attributes}
            od = obj.__dict__
            for k in [k for k in od if k not in new_attrs]:
                del od[k]
            for k, v in new_attrs.items():
                if od.get(k, _MISSING_ATTR) is not v:
                    od[k] = v
            return obj
        obj = new_node(d.type)
        if d.metadata is not None:
            object.__setattr__(obj, "_pytree__status", d.metadata)
        built[d.index] = obj
        od = obj.__dict__
        for k, s in d.attributes:
            od[str(k) if str_keys else k] = build(s)
        return obj

    def build_registered(d: NodeDef) -> tp.Any:
        impl = _USER_TYPES[d.type]
        aux = thaw(d.metadata)
        if type(impl) is not _proto.GraphNodeImpl:
            return impl.unflatten([(k, build(s)) for k, s in d.attributes], aux)
        obj = reuse.get(d.index) if reuse else None
        if obj is not None and type(obj) is d.type:
            impl.clear(obj)
        else:
            obj = impl.create_empty(aux)
        built[d.index] = obj  # before the children: a node may hold itself
        impl.init(obj, [(k, build(s)) for k, s in d.attributes])
        return obj

    roots = [build(d) for d in defs]
    if reuse:
        _EPOCH[0] += 1
    return roots, built


# -- static update -------------------------------------------------------------------------

def _attrs(x: tp.Any) -> list[tuple[tp.Any, tp.Any]]:
    return _proto.children(x) or []


def _set_attr(x: tp.Any, key: tp.Any, value: tp.Any, path: tuple) -> None:
    if not _proto.set_child(x, key, value):
        raise GraphUpdateStaticError(
            path_str(path), f"a {type(x).__name__} is immutable, its attribute {key!r} "
            "cannot be set in place")


def graph_update_static(node: tp.Any, updates: tp.Any) -> None:
    """Copies the static structure of ``updates`` into ``node`` in place: static attribute
    values, and new sub-nodes and Variables that ``node`` lacks. Variable values are left
    to :func:`flaxen.nnx.update`."""
    seen: set[int] = set()

    def walk(n: tp.Any, u: tp.Any, path: tuple) -> None:
        if type(n) is not type(u):
            raise GraphUpdateStaticError(
                path_str(path), f"Trying to update a node with a different type: the node is "
                f"a {type(n).__name__}, the update a {type(u).__name__}")
        if id(u) in seen:
            return
        seen.add(id(u))
        current = dict(_attrs(n))
        for key, value in _attrs(u):
            sub = (*path, key)
            if _proto.is_graph_object(value) and not isinstance(value, Variable) \
                    or is_pytree_node(value) or type(value) in _USER_TYPES:
                if key in current:
                    walk(current[key], value, sub)
                elif id(value) in seen:
                    raise GraphUpdateStaticError(
                        path_str(sub), "Trying to add a new node at path "
                        f"{path_str(sub)} that is already reachable elsewhere in the update; "
                        "shared new nodes cannot be added this way")
                else:
                    seen.add(id(value))
                    _set_attr(n, key, value, sub)
            elif isinstance(value, Variable):
                if key not in current:
                    _set_attr(n, key, value, sub)
            else:
                _set_attr(n, key, value, sub)

    walk(node, updates, ())
    _EPOCH[0] += 1
