"""Copying graph operations: split a graph into a definition and a State of copies.

Today's ``nnx.split`` puts the Variables themselves into its State; the operations here put
*copies* instead (new Variables detached from the object graph, or, given ``snapshot=cls``,
snapshots of a class registered in :mod:`flaxen.nnx._snapshots`), so the State can be changed,
traced or stored without touching the objects. ``merge`` builds new objects; ``update``
writes Variables, snapshots or raw values back in place. Code inside ``flaxen.nnx`` that needs
an independent copy (recurrent cells inside ``lax.scan``, abstract models, the Linen bridge,
tabulate, EMA) uses these; ``flaxen.experimental.nnx.graph`` (the Flax 0.8.3 face) publishes
them under its names with its ``VariableState`` as the snapshot class. The face-neutral
helpers both faces share (``RefMap``, ``is_node``, State nesting, looking up leaves along
graph paths, writing leaves back) live here too.

>>> from flaxen import nnx
>>> from flaxen.nnx import _graph_ops as ops
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> graphdef, state = ops.split(model)
>>> copy = ops.merge(graphdef, state)
>>> copy is model, bool((copy.kernel.value == model.kernel.value).all())
(False, True)
>>> state['kernel'] is model.kernel, type(state['kernel']).__name__
(False, 'Param')
>>> [path for path, _ in ops.split(model, nnx.Param, ...)[1].flat_state()]
[('bias',), ('kernel',)]
"""

from __future__ import annotations

import collections
import itertools
import operator
import typing as tp
import weakref
from collections.abc import MutableMapping

import jax

from flaxen import traceback_util
from flaxen.errors import GraphStateMismatchError, NNXFilterError, NotAGraphNodeError
from flaxen.nnx import _codegen, _graphdef, _trace, filterlib
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _node_protocol as _proto
from flaxen.nnx import reprlib as _reprlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graphdef import NodeDef, PytreeType, Static, VariableDef
from flaxen.nnx._snapshots import SNAPSHOT_TYPES
from flaxen.nnx.statelib import State
from flaxen.nnx.variablelib import EMPTY, Variable

__all__ = [
    "GraphDef", "GraphNode", "PytreeType", "RefMap", "clone", "compose_mapping",
    "compose_mapping_reversed", "flatten", "graph_update_static", "graphdef", "is_node",
    "iter_graph", "merge", "pop", "split", "state", "unflatten", "update",
]

_COMPILE_AT = 3
Node = tp.TypeVar("Node")
_flatten_pytree = eng.flatten_pytree
_unflatten_pytree = eng.unflatten_pytree
graph_update_static = eng.graph_update_static


class GraphDef(_graphdef.GraphDef[Node]):
    """The static part of a split graph. Hashable; equal graphs give equal GraphDefs.

    A pytree without leaves, so it may be passed to (and returned from) ``jax.jit``.
    """

    __slots__ = ()

    def _compile(self) -> None:
        # Generated split/merge code is compiled on the third use: a definition used once or
        # twice (a one-off split, a clone) would not repay the compile.
        self._uses += 1
        if self._uses == _COMPILE_AT:
            self._states_fn = _codegen.make_states_fn(self.defs)
            self._merge_fn = _codegen.make_merge_fn(self.defs)

    def merge(self, state: tp.Mapping, /, *states: tp.Mapping) -> Node:
        return merge(self, state, *states)

    def apply(self, state: tp.Mapping, /, *states: tp.Mapping) -> _ApplyCaller:
        """``graphdef.apply(state).method(*args)`` -> ``(out, (graphdef, new_state))``."""
        return _ApplyCaller(self, (state, *states))

    def make_empty(self) -> Node:
        """The node with every Variable holding :data:`~flaxen.nnx.EMPTY`."""
        n = len(_graphdef.var_defs(self.defs))
        return eng.unflatten(self.defs, [EMPTY] * n)[0][0]


jax.tree_util.register_pytree_node(GraphDef, lambda g: ((), g), lambda g, _: g)


class _ApplyCaller:
    __slots__ = ("_graphdef", "_states")

    def __init__(self, graphdef: tp.Any, states: tuple) -> None:  # either face's GraphDef
        self._graphdef = graphdef
        self._states = states

    def _call(self, name: str | None, args: tuple, kwargs: dict) -> tuple:
        node = merge(self._graphdef, *self._states)
        fn = node if name is None else getattr(node, name)
        out = fn(*args, **kwargs)
        # the new State holds the kind of leaves the given one held (snapshots stay snapshots)
        return out, split(node, snapshot=_snapshot_class(self._states))

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tuple:
        return self._call(None, args, kwargs)

    def __getattr__(self, name: str) -> tp.Callable[..., tuple]:
        return lambda *args, **kwargs: self._call(name, args, kwargs)


def _snapshot_class(states: tp.Iterable[tp.Any]) -> type | None:
    """The snapshot class the first snapshot leaf of ``states`` has, or None (Variables)."""
    for leaf in jax.tree_util.tree_leaves(
            tuple(states), is_leaf=lambda x: type(x) in SNAPSHOT_TYPES):
        if type(leaf) in SNAPSHOT_TYPES:
            return type(leaf)
    return None


class RefMap(MutableMapping, _reprlib.MappingReprMixin):
    """A dict keyed by object identity (graph nodes and Variables) -> walk index."""

    def __init__(self, items: tp.Iterable[tuple[tp.Any, int]] = ()) -> None:
        self._data: dict[int, tuple[tp.Any, int]] = {}
        for k, v in items:
            self[k] = v

    def __getitem__(self, key: tp.Any) -> int:
        return self._data[id(key)][1]

    def __setitem__(self, key: tp.Any, value: int) -> None:
        self._data[id(key)] = (key, value)

    def __delitem__(self, key: tp.Any) -> None:
        del self._data[id(key)]

    def __contains__(self, key: object) -> bool:
        return id(key) in self._data

    def __iter__(self) -> tp.Iterator[tp.Any]:
        return (k for k, _ in self._data.values())

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"RefMap({len(self)} objects)"

    @staticmethod
    def from_indexmap(indexmap: tp.Mapping[int, tp.Any]) -> RefMap:
        """The inverse of an ``index -> object`` map."""
        return RefMap((obj, i) for i, obj in indexmap.items())


def is_node(x: tp.Any) -> bool:
    """True for what split accepts as a root: graph nodes and pytree containers."""
    return isinstance(x, GraphNode) or eng.is_pytree_node(x) or type(x) in eng._USER_TYPES


def _intern(new: eng.FlatGraph, old: eng.FlatGraph | None) -> None:
    gd: GraphDef[tp.Any] = GraphDef(new.defs)
    if old is not None and old.graphdef == gd:
        gd = old.graphdef
    new.graphdef = gd


def flatten_node(node: tp.Any) -> eng.FlatGraph:
    """The (cached) walk of one node."""
    return eng.flatten_cached((node,), _intern)


def _check_node(node: tp.Any, fn: str) -> None:
    if not isinstance(node, (GraphNode, Variable, list, dict, tuple, State)) \
            and not eng.is_pytree_node(node) and type(node) not in eng._USER_TYPES:
        raise NotAGraphNodeError(
            "", f"nnx.{fn} expects a graph node or a container of them, got a "
            f"{type(node).__name__}")


def _copy_variable(x: Variable) -> Variable:
    """A new Variable of ``x``'s type holding its raw value and a copy of its metadata (a
    ``jax.Ref`` inside stays shared, as the value of a snapshot would)."""
    t = type(x)
    if _kind(t) == 1:  # a plain Variable class: its slots are written directly
        new = object.__new__(t)
        _set_meta(new, dict(x._var_metadata))
        _set_trace(new, _trace.current_trace())
        _set_raw(new, x.raw_value)
        return new
    return x.copy(_copy_ref=False)


def _leaf_copy(x: tp.Any, snapshot: type | None) -> tp.Any:
    if isinstance(x, Variable):
        if snapshot is None:
            return _copy_variable(x)
        return snapshot._from_parts(type(x), x.raw_value, x._var_metadata)  # type: ignore[attr-defined]
    return x


# generated ``fn(variables) -> State of snapshots``, per definition and snapshot class
_SNAPSHOT_FNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _generated(gd: GraphDef, snapshot: type | None, kind: str) -> tp.Any:
    """The generated States (``kind='states'``) or merge function of ``gd`` for leaves of
    ``snapshot`` (None: Variable copies), or None while uncompiled or when there is none."""
    if snapshot is None:
        fn = gd._states_fn if kind == "states" else gd._merge_fn
        if fn is None and gd._uses < _COMPILE_AT:
            gd._compile()
        return fn
    fns = _SNAPSHOT_FNS.get(gd)
    if fns is None:
        fns = _SNAPSHOT_FNS[gd] = {}
    key = (snapshot, kind)
    if key not in fns:
        if gd._uses < _COMPILE_AT:
            gd._compile()
            return None
        fns[key] = (_codegen.make_states_fn(gd.defs, snapshot=snapshot) if kind == "states"
                    else _codegen.make_merge_fn(gd.defs, snapshot=snapshot))
    return fns[key]


def _states_from_flat(fg: eng.FlatGraph, filters: tuple, exhaustive: bool = True,
                      snapshot: type | None = None) -> tuple[State, ...]:
    leaves = fg.leaves
    paths = fg.paths
    if not filters:
        fn = _generated(fg.graphdef, snapshot, "states")
        if fn is not None:
            return (fn(leaves),)
        return (_nest([(p, _leaf_copy(v, snapshot)) for p, v in zip(paths, leaves)]),)
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in preds]
    for p, v in zip(paths, leaves):
        for i, pred in enumerate(preds):
            if pred(p, v):
                buckets[i].append((p, _leaf_copy(v, snapshot)))
                break
        else:
            if exhaustive:
                raise NNXFilterError(
                    eng.path_str(p), f"Non-exhaustive filters, got a non-empty remainder: the "
                    f"{type(v).__name__} here matches none of the filters {list(filters)!r}")
    return tuple(_nest(b) for b in buckets)


def _nest(items: list) -> State:
    root: dict = {}
    for path, leaf in items:
        node = root
        for k in path[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            node = nxt
        node[path[-1]] = leaf
    return State._from_raw(root)


@traceback_util.api_boundary
def split(node: Node, *filters: filterlib.Filter, snapshot: type | None = None) -> tuple:
    """``(graphdef, state)`` or, with filters, ``(graphdef, state_1, ..., state_n)``; the
    States hold Variable copies, or snapshots of class ``snapshot``."""
    _check_node(node, "split")
    fg = flatten_node(node)
    return (fg.graphdef, *_states_from_flat(fg, filters, snapshot=snapshot))


@traceback_util.api_boundary
def graphdef(node: Node) -> GraphDef[Node]:
    _check_node(node, "graphdef")
    return flatten_node(node).graphdef


@traceback_util.api_boundary
def state(node: Node, *filters: filterlib.Filter, snapshot: type | None = None
          ) -> State | tuple[State, ...]:
    """The node's State, or one State per filter (variables matching none are left out)."""
    _check_node(node, "state")
    fg = flatten_node(node)
    states = _states_from_flat(fg, filters, exhaustive=False, snapshot=snapshot)
    return states[0] if len(states) == 1 else states


@traceback_util.api_boundary
def flatten(node: Node, *, snapshot: type | None = None
            ) -> tuple[GraphDef[Node], State, RefMap]:
    """``(graphdef, state, refmap)``: :func:`split` plus the map from each shared object
    (graph node or Variable) to its index in the definition."""
    _check_node(node, "flatten")
    fg = flatten_node(node)
    return fg.graphdef, _states_from_flat(fg, (), snapshot=snapshot)[0], RefMap(
        (obj, i) for i, obj in enumerate(fg.refs))


@traceback_util.api_boundary
def unflatten(graphdef: GraphDef[Node], state: tp.Mapping, /, *,
              idxmap: tp.Mapping[int, tp.Any] | None = None) -> tuple[Node, dict[int, tp.Any]]:
    """``(node, {index: object})``: :func:`merge`, reusing (and updating in place) the
    objects ``idxmap`` gives for definition indices instead of building new ones."""
    if not isinstance(graphdef, _graphdef.GraphDef):
        raise NotAGraphNodeError("", f"nnx.graph.unflatten expects a GraphDef first, got a "
                                 f"{type(graphdef).__name__}", "Pass the graphdef from split.")
    leaves = _leaves_from_states(graphdef.defs, (state,), "unflatten")
    roots, built = eng.unflatten(graphdef.defs, leaves, idxmap, fresh=True)
    return roots[0], built


def compose_mapping(map_ab: tp.Mapping[tp.Any, tp.Any], map_bc: tp.Mapping[tp.Any, tp.Any]
                    ) -> dict[tp.Any, tp.Any]:
    """``{a: c}`` for each ``a -> b`` in ``map_ab`` whose ``b`` is a key of ``map_bc``."""
    return {a: map_bc[b] for a, b in map_ab.items() if b in map_bc}


def compose_mapping_reversed(map_ab: tp.Mapping[tp.Any, tp.Any],
                             map_bc: tp.Mapping[tp.Any, tp.Any]) -> dict[tp.Any, tp.Any]:
    """``{c: a}`` for each ``a -> b`` in ``map_ab`` whose ``b`` is a key of ``map_bc``."""
    return {map_bc[b]: a for a, b in map_ab.items() if b in map_bc}


def _leaves_from_states(defs: tuple, states: tp.Sequence[tp.Mapping], what: str,
                        allow_missing: bool = False, extras: dict | None = None) -> list:
    """Values for each leaf of ``defs`` (walk order), looked up along the graph's paths.

    With ``extras`` (a dict), the state entries the graph has no Variable or node for are
    collected there instead of refused: ``{(node path, key): (value, static def or None)}``,
    later states winning."""
    leaves: list = []
    raw = [s._mapping if isinstance(s, State) else s for s in states]

    def sub(ms: list, key: tp.Any) -> list:
        out = []
        for m in ms:
            v = m.get(key, _NONE) if isinstance(m, dict) else _NONE
            out.append(None if v is _NONE else (v._mapping if isinstance(v, State) else v))
        return out

    def walk(d: tp.Any, ms: list, path: tuple) -> None:
        t = type(d)
        if t is VariableDef:
            for m in reversed(ms):  # later states win
                if m is not None:
                    leaves.append(m)
                    return
            if allow_missing:
                leaves.append(eng.MISSING)
                return
            raise GraphStateMismatchError(
                eng.path_str(path), f"nnx.{what}: Expected key for Variable but was not found "
                f"in state (the graph has a {d.type.__name__} here)")
        if t is NodeDef:
            names = set()
            for k, s in d.attributes:
                if type(s) is not Static:  # a state entry at a static one is extra
                    names.add(k)
                walk(s, sub(ms, k), (*path, k))
            if extras is not None:
                _collect_extra(ms, names, d, path, extras)
            elif not allow_missing:
                _check_extra(ms, names, path, what)

    for d in defs:
        walk(d, raw, ())
    return leaves


def _check_extra(ms: list, names: set, path: tuple, what: str) -> None:
    for m in ms:
        if not isinstance(m, dict) or (len(m) <= len(names) and names.issuperset(m)):
            continue
        extra = [k for k in m if k not in names]
        if extra:
            raise GraphStateMismatchError(
                eng.path_str((*path, extra[0])), f"nnx.{what}: the state has an entry here "
                f"that the graph definition does not have (it has {sorted(map(str, names))} "
                f"at {eng.path_str(path)})")


def _collect_extra(ms: list, names: set, d: NodeDef, path: tuple, extras: dict) -> None:
    for m in ms:
        if not isinstance(m, dict) or (len(m) <= len(names) and names.issuperset(m)):
            continue
        statics = {k: s for k, s in d.attributes if type(s) is Static}
        for k, v in m.items():
            if k not in names:
                extras[(path, k)] = (v._mapping if isinstance(v, State) else v,
                                     statics.get(k))


def _write_extras(node: tp.Any, extras: dict) -> None:
    """Puts the state entries the graph had no Variable for into ``node``, as Flax does: a
    raw value replaces a static attribute or item, a new key is added (a Variable as a copy
    of it); a Variable where the graph holds a static value is refused."""
    for (path, key), (value, static) in extras.items():
        where = eng.path_str((*path, key))
        if static is not None and isinstance(value, (Variable, dict)):
            raise GraphStateMismatchError(
                where, f"nnx.update: the state has a {type(value).__name__} here, but the "
                f"graph holds a static value ({static.get()!r}), not a Variable or a node",
                "Give a plain value to replace a static attribute, or build the model with "
                "this Variable in place before updating it.")
        target = node
        for k in path:
            target = dict(_proto.children(target) or ())[k]
        if isinstance(value, Variable):
            value = value.copy()
        elif type(value) is dict:
            value = State._from_raw(value)
        if isinstance(target, GraphNode):  # as an assignment: a Pytree's checks and status
            setattr(target, str(key) if type(target)._graph_int_keys else key, value)
        elif not _proto.set_child(target, key, value):
            raise GraphStateMismatchError(
                where, f"nnx.update: the state has an entry here that the graph does not, "
                f"and the {type(target).__name__} at {eng.path_str(path)} cannot take new "
                "entries", "Update an object that has this entry, or drop it from the state.")


_NONE = object()


@traceback_util.api_boundary
def merge(graphdef: GraphDef[Node], state: tp.Mapping, /, *states: tp.Mapping,
          snapshot: type | None = None) -> Node:
    """A fresh object graph from ``graphdef`` and the union of the states: new Variables
    (never the State's own), so the result shares nothing with the State. ``snapshot``
    names the snapshot class the States are expected to hold (None: Variables)."""
    if not isinstance(graphdef, _graphdef.GraphDef):
        raise NotAGraphNodeError("", f"nnx.merge expects a GraphDef first, got a "
                                 f"{type(graphdef).__name__}", "Pass the graphdef from split.")
    if not states and type(state) is State and type(graphdef) is GraphDef:
        fn = _generated(graphdef, snapshot, "merge")
        if fn:
            node = fn(state)
            if node is not _codegen.MISS:
                return node
    leaves = _leaves_from_states(graphdef.defs, (state, *states), "merge")
    return eng.unflatten(graphdef.defs, leaves, fresh=True)[0][0]


@traceback_util.api_boundary
def update(node: Node, state: tp.Mapping, /, *states: tp.Mapping) -> None:
    """Writes the states' values (and metadata) into ``node``'s Variables, in place."""
    _check_node(node, "update")
    fg = flatten_node(node)
    leaves = _lookup(fg, state) if not states else None
    extras: dict = {}
    if leaves is None:
        leaves = _leaves_from_states(fg.graphdef.defs, (state, *states), "update",
                                     allow_missing=True, extras=extras)
    if not fg.has_arrays and _write_plain(fg.leaves, leaves):
        if extras:
            _write_extras(node, extras)
        return
    arrays = False
    for var, leaf in zip(fg.leaves, leaves):
        if leaf is var:  # a State of the node's own Variables: nothing to write
            continue
        if leaf is eng.MISSING:
            continue
        if not isinstance(var, Variable):
            arrays = True
        elif type(leaf) in SNAPSHOT_TYPES:
            object.__setattr__(var, "raw_value", leaf.value)
            if leaf._var_metadata != var._var_metadata:
                object.__setattr__(var, "_var_metadata", dict(leaf._var_metadata))
                eng._EPOCH[0] += 1
        elif isinstance(leaf, Variable):
            object.__setattr__(var, "raw_value", leaf.raw_value)
            if leaf._var_metadata != var._var_metadata:
                eng._EPOCH[0] += 1  # the cached walk froze the old metadata
            object.__setattr__(var, "_var_metadata", dict(leaf._var_metadata))
        else:
            object.__setattr__(var, "raw_value", leaf)
    if arrays:  # bare arrays live in their owner's __dict__: rebuild those in place
        # the builder keeps old values only for the Variables it reuses: give the bare
        # arrays the state does not mention their current value
        leaves = [old if new is eng.MISSING and not isinstance(old, Variable) else new
                  for old, new in zip(fg.leaves, leaves)]
        eng.unflatten(fg.defs, leaves, dict(enumerate(fg.refs)))
    if extras:
        _write_extras(node, extras)


# A leaf type's kind for _write_plain: 0 a snapshot, 1 a plain Variable subclass, 2 any
# other value (a raw array), 3 one the general loop must handle (a hijax Variable, or a
# class with its own raw_value / _var_metadata attribute: the slots are written directly).
_KINDS: dict[type, int] = {}
_set_raw = Variable.raw_value.__set__  # type: ignore[attr-defined]
_set_meta = Variable._var_metadata.__set__  # type: ignore[attr-defined]
_set_trace = Variable._trace_state.__set__  # type: ignore[attr-defined]
_get_raw = operator.attrgetter("raw_value")
_get_value = operator.attrgetter("value")
_get_meta = operator.attrgetter("_var_metadata")
_run: tp.Callable[[tp.Iterable], None] = collections.deque(maxlen=0).extend  # a map's effects


def _kind(t: type) -> int:
    k = _KINDS.get(t)
    if k is None:
        if getattr(t, "_hijax_var_type", None) is not None:
            k = 3
        elif t in SNAPSHOT_TYPES:
            k = 0
        elif issubclass(t, Variable):
            k = 1 if _codegen.plain_variable_type(t) else 3
        else:
            k = 2
        _KINDS[t] = k
    return k


def _write_plain(variables: list, leaves: list) -> bool:
    """``update``'s writes when every target is a plain Variable and every leaf a Variable,
    a snapshot or a raw value (what a State from split holds): the same writes as the
    general loop, with each type's kind looked up once instead of isinstance chains per
    leaf. False, with nothing written, when some pair needs the general loop."""
    # the distinct types are few: check those, not every pair
    present = {_kind(t) for t in set(map(type, leaves))}
    if any(_kind(t) != 1 for t in set(map(type, variables))) or 3 in present:
        return False
    missing = eng.MISSING
    if len(present) == 1 and 2 not in present:
        # all Variables (or all snapshots), as a State from split holds: the values are
        # written by C-level maps, and the metadata compared as two lists (identity first)
        _run(map(_set_raw, variables, map(_get_raw if 1 in present else _get_value, leaves)))
        metas = list(map(_get_meta, leaves))
        if list(map(_get_meta, variables)) != metas:
            for var, meta in zip(variables, metas):
                if meta != var._var_metadata:
                    _set_meta(var, dict(meta))
            eng._EPOCH[0] += 1  # the cached walk froze the old metadata
        return True
    if present == {2} and not any(map(operator.is_, leaves, itertools.repeat(missing))):
        _run(map(_set_raw, variables, leaves))  # raw values, none missing
        return True
    kinds = _KINDS
    bump = False
    for var, leaf in zip(variables, leaves):
        if leaf is var or leaf is missing:  # its own Variable, or no new value: no write
            continue
        k = kinds[type(leaf)]
        if k == 1:
            _set_raw(var, leaf.raw_value)
            meta = leaf._var_metadata
            if meta != var._var_metadata:
                _set_meta(var, dict(meta))
                bump = True  # the cached walk froze the old metadata
        elif k == 0:
            _set_raw(var, leaf.value)
            meta = leaf._var_metadata
            if meta != var._var_metadata:
                _set_meta(var, dict(meta))
                bump = True
        else:
            _set_raw(var, leaf)
    if bump:
        eng._EPOCH[0] += 1
    return True


_SEEN = object()


def _lookup(fg: eng.FlatGraph, state: tp.Any) -> list | None:
    """The leaves of ``fg`` read out of ``state`` by code generated for the walk's paths
    (from its second use), or None: not a State with exactly those paths, or no code."""
    fn = fg.lookup
    if fn is None:
        fg.lookup = _SEEN
        return None
    if fn is _SEEN:
        fn = fg.lookup = (_codegen.make_lookup_fn(fg.paths) or False) if not fg.has_arrays \
            else False
    if fn is False:
        return None
    out = fn(state)
    return None if out is _codegen.MISS else out


@traceback_util.api_boundary
def pop(node: Node, *filters: filterlib.Filter, snapshot: type | None = None
        ) -> State | tuple[State, ...]:
    """Removes the Variables matching ``filters`` from ``node`` and returns them as States."""
    _check_node(node, "pop")
    if not filters:
        raise NNXFilterError("", "nnx.pop needs at least one filter saying which Variables "
                             "to remove", "Pass e.g. nnx.Intermediate.")
    fg = flatten_node(node)
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in preds]
    removed = []
    for p, v in zip(fg.paths, fg.leaves):
        for i, pred in enumerate(preds):
            if pred(p, v):
                buckets[i].append((p, _leaf_copy(v, snapshot)))
                removed.append(p)
                break
    def attr(n: tp.Any, k: tp.Any) -> tp.Any:
        return str(k) if type(n)._graph_int_keys else k

    for p in removed:
        parent: tp.Any = node
        for k in p[:-1]:
            parent = parent.__dict__[attr(parent, k)] if isinstance(parent, GraphNode) \
                else parent[k]
        if isinstance(parent, GraphNode):
            del parent.__dict__[attr(parent, p[-1])]
        else:
            del parent[p[-1]]
    eng._EPOCH[0] += 1
    states = tuple(_nest(b) for b in buckets)
    return states[0] if len(states) == 1 else states


@traceback_util.api_boundary
def clone(node: Node) -> Node:
    """A deep, independent copy (shared references inside stay shared)."""
    graphdef_, state_ = split(node)
    return merge(graphdef_, state_)


def iter_graph(node: tp.Any) -> tp.Iterator[tuple[tuple, tp.Any]]:
    """``(path, object)`` for every graph node and Variable reachable from ``node``, once,
    parents before their children."""
    fg = eng.flatten((node,))

    def walk(d: tp.Any, path: tuple) -> tp.Iterator:
        t = type(d)
        if t is VariableDef and d.index >= 0:
            yield path, fg.refs[d.index]
        elif t is NodeDef:
            if d.index >= 0:
                yield path, fg.refs[d.index]
            for k, s in d.attributes:
                yield from walk(s, (*path, k))

    yield from walk(fg.defs[0], ())


