"""Tree mode (``graph=False``): an object split as a plain JAX pytree.

A tree-mode split flattens the object with JAX's pytree registry (``nnx.Pytree`` classes are
registered; Variables are leaves), sorts the leaves by path as graph mode does, and returns a
:class:`TreeGraphDef`: one :class:`TreeNodeDef` (the root's type, the JAX treedef and
``path_index``, which pairs each path with its leaf's place in the treedef) followed by a
:class:`~flaxen.nnx._graphdef.VariableDef` for each leaf that is a Variable, so that a merge
given raw values (a pure dict) can rebuild the Variables, as Flax's tree mode does.

Speed (shown by ``benchmarks/bench_nnx_tree.py``, ``tree split+merge``): a split is reused
with the graph engine's cached walk (:func:`flaxen.nnx._graph_walk.tree_flatten_cached`), and
from its second use a :class:`TreeNodeDef` rebuilds its tree with code generated for it
(:func:`flaxen.nnx._codegen.make_tree_build_fn`) instead of JAX's unflatten, which calls back
into Python once per Module.

>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> graphdef, state = nnx.split(model, graph=False)
>>> nodedef = graphdef.nodes[0]
>>> nodedef.type.__name__, [p for p, _ in nodedef.path_index]
('Linear', [('bias',), ('kernel',)])
>>> pure = nnx.to_pure_dict(state)  # raw arrays: merge rebuilds the Params
>>> type(nnx.merge(graphdef, pure).kernel).__name__
'Param'
"""

from __future__ import annotations

import dataclasses
import typing as tp
from collections.abc import Mapping

import jax

from flaxen.nnx import _codegen
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx._graph_walk import _check_tree, _key, _path_str, _tree_leaf
from flaxen.nnx._graphdef import VariableDef
from flaxen.nnx._snapshots import SNAPSHOT_TYPES
from flaxen.nnx.statelib import FlatState, State
from flaxen.nnx.variablelib import Variable

__all__ = ["TreeGraphDef", "TreeNodeDef", "tree_flatten_slow", "tree_unflatten"]

Node = tp.TypeVar("Node")
PathParts = tuple
_MISSING = object()


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class TreeNodeDef(tp.Generic[Node]):
    """The root definition of a tree-mode split: the root's ``type``, the JAX ``treedef``
    and ``path_index``, one ``(path, position in the treedef)`` per leaf in path order.

    :meth:`unflatten` takes leaves in path order (the order of a State) and puts each where
    the treedef wants it.

    >>> import jax
    >>> tree = {'b': 1, 'a': [2, 3]}
    >>> leaves, treedef = jax.tree_util.tree_flatten(tree)
    >>> nd = TreeNodeDef(dict, treedef, ((('a', 0), 0), (('a', 1), 1), (('b',), 2)))
    >>> nd.unflatten([20, 30, 10])
    {'a': [20, 30], 'b': 10}
    """

    type: type
    treedef: jax.tree_util.PyTreeDef
    path_index: tuple[tuple[PathParts, int], ...]
    # per-process caches, not part of the definition
    paths: tuple = dataclasses.field(init=False, repr=False, compare=False)
    _hash: int = dataclasses.field(init=False, repr=False, compare=False)
    _order: tp.Any = dataclasses.field(init=False, repr=False, compare=False)
    _lookup: tp.Any = dataclasses.field(init=False, repr=False, compare=False)
    _build: tp.Any = dataclasses.field(init=False, repr=False, compare=False)
    _uses: list = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "paths", tuple(p for p, _ in self.path_index))
        put(self, "_hash", hash((self.type, self.treedef, self.path_index)))
        # path order is the treedef's own order for most trees: no reordering then
        in_order = all(i == k for k, (_, i) in enumerate(self.path_index))
        put(self, "_order", None if in_order else tuple(i for _, i in self.path_index))
        put(self, "_lookup", None)
        put(self, "_build", None)
        put(self, "_uses", [0, 0])  # lookups, builds: code is generated on the second

    def with_no_outer_index(self) -> TreeNodeDef[Node]:
        """Itself: a tree-mode definition has no outer indices (as in Flax)."""
        return self

    def with_same_outer_index(self) -> TreeNodeDef[Node]:
        """Itself: a tree-mode definition has no outer indices (as in Flax)."""
        return self

    def with_matching_outer_index(self, other: tp.Any) -> TreeNodeDef[Node]:
        """Itself: a tree-mode definition has no outer indices (as in Flax)."""
        del other
        return self

    def unflatten(self, leaves: tp.Sequence[tp.Any]) -> Node:
        """The tree with ``leaves`` (in path order) put back, each object built anew."""
        fn = self._build
        if fn is None:
            self._uses[1] += 1
            if self._uses[1] >= 2:  # most definitions are reused: generate on the second
                fn = _codegen.make_tree_build_fn(self.treedef, self.path_index) or False
                object.__setattr__(self, "_build", fn)
        if fn:
            out = fn(leaves)
            if out is not _codegen.MISS:
                return out
        order = self._order
        if order is None:
            return self.treedef.unflatten(leaves)
        ordered = list(leaves)
        for i, leaf in zip(order, leaves):
            ordered[i] = leaf
        return self.treedef.unflatten(ordered)

    def leaves_of(self, states: tp.Sequence[tp.Any], what: str) -> list:
        """The leaves for :meth:`unflatten`, in path order, read out of ``states``."""
        if len(states) == 1:
            fn = self._lookup
            if fn is None:
                self._uses[0] += 1
                if self._uses[0] >= 2:
                    fn = _codegen.make_lookup_fn(self.paths) or False
                    object.__setattr__(self, "_lookup", fn)
            if fn:
                out = fn(states[0])
                if out is not _codegen.MISS:
                    return out
        return flat_leaves(self.paths, states, what)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, TreeNodeDef) and self._hash == other._hash
            and self.type is other.type and self.treedef == other.treedef
            and self.path_index == other.path_index)

    def __treescope_repr__(self, path: str | None, subtree_renderer: tp.Any) -> tp.Any:
        from flaxen.nnx import _treescope

        # the three fields of the definition; the per-process caches stay out of sight
        return _treescope.render_object_constructor(
            type(self), {"type": self.type, "treedef": self.treedef,
                         "path_index": self.path_index}, path, subtree_renderer,
            roundtrippable=True)

    def __getstate__(self) -> tuple:
        return (self.type, self.treedef, self.path_index)  # generated code stays behind

    def __setstate__(self, state: tuple) -> None:
        for name, value in zip(("type", "treedef", "path_index"), state):
            object.__setattr__(self, name, value)
        self.__post_init__()


jax.tree_util.register_static(TreeNodeDef)


class TreeGraphDef(tp.Generic[Node]):
    """The static half of a tree-mode split (hashable, a pytree without leaves): ``nodes``
    is the :class:`TreeNodeDef` followed by one ``VariableDef`` per Variable leaf (its index
    is the leaf's position in path order)."""

    __slots__ = ("nodes", "_hash", "_all_variables", "_merge_fn", "_uses")

    def __init__(self, nodedef: TreeNodeDef, variables: tp.Sequence[VariableDef] = ()) -> None:
        self.nodes: tuple = (nodedef, *variables)
        self._hash = hash(self.nodes)
        self._all_variables = len(variables) == len(nodedef.path_index)
        self._merge_fn: tp.Any = None
        self._uses = 0

    def fast_merge(self, state: tp.Any) -> tp.Any:
        """The merge of one State holding exactly this split's paths and Variables of the
        split's types, by code generated on the second use; :data:`flaxen.nnx._codegen.MISS`
        for any other state (the general path then merges it, or reports what is wrong)."""
        fn = self._merge_fn
        if fn is None:
            self._uses += 1
            if self._uses < 2:
                return _codegen.MISS
            nd = self.nodes[0]
            fn = self._merge_fn = _codegen.make_tree_merge_fn(
                nd.treedef, nd.path_index, {d.index: d.type for d in self.nodes[1:]}) or False
        return fn(state) if fn else _codegen.MISS

    @property
    def treedef(self) -> tp.Any:
        return self.nodes[0].treedef

    @property
    def num_leaves(self) -> int:
        return len(self.nodes[0].path_index)

    def with_no_outer_index(self) -> TreeGraphDef[Node]:
        return self

    def with_same_outer_index(self) -> TreeGraphDef[Node]:
        return self

    def with_matching_outer_index(self, other: tp.Any) -> TreeGraphDef[Node]:
        del other
        return self

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, TreeGraphDef) and self._hash == other._hash
                                 and self.nodes == other.nodes)

    def __repr__(self) -> str:
        # Flax 0.12.8's tree-mode GraphDef: the node definition and one VariableDef per
        # leaf in ``nodes``, no attributes
        # (each VariableDef in the NNX layout, as Flax's list shows them)
        from flaxen.nnx import reprlib

        nodes = [repr(self.nodes[0]), *(reprlib.Representable.__repr__(v)
                                        for v in self.nodes[1:])]
        return f"GraphDef(nodes=[{', '.join(nodes)}], attributes=[], " \
            f"num_leaves={self.num_leaves})"

    def __treescope_repr__(self, path: str | None, subtree_renderer: tp.Any) -> tp.Any:
        from flaxen.nnx import _treescope
        from flaxen.nnx._graphdef import GraphDef

        return _treescope.render_object_constructor(
            GraphDef, {"nodes": list(self.nodes), "attributes": [],
                       "num_leaves": self.num_leaves}, path, subtree_renderer)

    def merge(self, state: tp.Any, /, *states: tp.Any) -> Node:
        # upward: merge lives in graphlib, which builds on this file
        from flaxen.nnx import graphlib

        return graphlib.merge(self, state, *states)

    def apply(self, state: tp.Any, /, *states: tp.Any) -> tp.Any:
        # upward: the caller merges and splits with graphlib's functions
        from flaxen.nnx import graphlib

        return graphlib._ApplyCaller(self, (state, *states))  # type: ignore[arg-type]


jax.tree_util.register_pytree_node(TreeGraphDef, lambda g: ((), g), lambda g, _: g)


def tree_flatten_slow(node: tp.Any) -> tuple[TreeGraphDef, list, list]:
    """``(graphdef, paths, leaves)`` of ``node`` by a full tree-mode flatten (the sharing
    checks included); leaves sorted by path."""
    _check_tree(node)
    with_path, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=_tree_leaf)
    tree_paths = [tuple(_key(k) for k in kp) for kp, _ in with_path]
    order = sorted(range(len(tree_paths)), key=lambda i: path_order(tree_paths[i]))
    paths = [tree_paths[i] for i in order]
    leaves = [with_path[i][1] for i in order]
    index = tuple((tree_paths[i], i) for i in order)
    var_defs: list[VariableDef[tp.Any]] = [
        eng.variable_def(x, i)
        for i, x in enumerate(leaves) if isinstance(x, Variable)]
    return TreeGraphDef(TreeNodeDef(type(node), treedef, index), var_defs), paths, leaves


def path_order(path: tuple) -> tuple:
    """Sort key of a path: numbers before names, each in its own order (paths can mix the
    two at one depth)."""
    return tuple((0, k, "") if isinstance(k, int) else (1, 0, str(k)) for k in path)


def tree_unflatten(graphdef: TreeGraphDef, leaves: tp.Sequence[tp.Any],
                   copy_variables: bool = False) -> tp.Any:
    """The object of ``graphdef`` around ``leaves`` (in path order). A raw value where the
    split found a Variable becomes a Variable of that type and metadata again (as in Flax's
    tree mode); given Variables are used as they are, or copied with ``copy_variables``."""
    nodes = graphdef.nodes
    if copy_variables:  # only the given Variables: the rebuilt ones below are new anyway
        leaves = [v.copy() if isinstance(v, Variable) else v for v in leaves]
    if len(nodes) > 1 and not (graphdef._all_variables and _only_variables(leaves)):
        leaves = list(leaves)
        for d in nodes[1:]:
            leaf = leaves[d.index]
            if isinstance(leaf, Variable):
                continue
            if type(leaf) in SNAPSHOT_TYPES:  # a snapshot: its own metadata
                leaves[d.index] = d.type.from_metadata(leaf.value, dict(leaf._var_metadata))
            else:
                leaves[d.index] = d.type.from_metadata(leaf, d.thawed_metadata())
    return nodes[0].unflatten(leaves)


_VARIABLE_TYPES: dict[type, bool] = {}


def _only_variables(leaves: tp.Sequence[tp.Any]) -> bool:
    # the distinct leaf types are few: one check per type, not per leaf
    for t in set(map(type, leaves)):
        ok = _VARIABLE_TYPES.get(t)
        if ok is None:
            ok = _VARIABLE_TYPES[t] = isinstance(t, type) and issubclass(t, Variable)
        if not ok:
            return False
    return True


# -- reading leaves out of States ------------------------------------------------------------

def flat_leaves(paths: tp.Sequence[tuple], states: tp.Sequence[tp.Any], what: str) -> list:
    """The value at each of ``paths`` in ``states`` (States, dicts, FlatStates or lists of
    ``(path, value)``; later states win); a missing path raises, naming it."""
    flat: dict = {}
    for s in states:
        if isinstance(s, FlatState) or (isinstance(s, list) and s and isinstance(s[0], tuple)):
            flat.update((tuple(p), v) for p, v in s)
        elif isinstance(s, Mapping):
            flatten_mapping(s, (), flat)
    out = []
    for p in paths:
        v = flat.get(tuple(p), _MISSING)
        if v is _MISSING:
            raise ValueError(
                f"nnx.{what}: Expected key for Variable but was not found in state: no "
                f"entry at {_path_str(p)}. Pass the state(s) returned by nnx.split.")
        out.append(v)
    return out


def flatten_mapping(m: Mapping, prefix: tuple, out: dict) -> None:
    """``out[path] = leaf`` for every leaf of the nested mapping ``m`` (a Variable is a
    leaf even though it may look like a mapping)."""
    for k, v in (m._mapping.items() if isinstance(m, State) else m.items()):
        if isinstance(v, Mapping) and not isinstance(v, Variable):
            flatten_mapping(v, (*prefix, k), out)
        else:
            out[(*prefix, k)] = v
