"""Today's graph API (``flax.nnx.graphlib``): split/merge/state/... with ``graph=``.

``graph=True`` (graph mode, the default set by :func:`flaxen.nnx.set_graph_mode`) walks
objects as a graph with the engine of :mod:`flaxen.nnx._graph_engine`: shared Variables and
modules are kept shared, cycles are allowed. ``graph=False`` (tree mode) treats the object as
a plain JAX pytree (``nnx.Pytree`` is registered as one) and rejects shared references.

Unlike Flax 0.8.3's ``split`` (:mod:`flaxen.experimental.nnx.graph`), the State returned
here holds the Variables themselves, and ``merge`` puts the given Variables into the new
object graph: no copies. The walkers that need no split (``iter_graph``,
``recursive_map``, ...) live in :mod:`flaxen.nnx._graph_walk` and ``GraphState`` in
:mod:`flaxen.nnx._graph_state`; both are re-exported here.

>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> graphdef, state = nnx.split(model)
>>> state['kernel'] is model.kernel
True
>>> nnx.merge(graphdef, state).kernel is model.kernel
True
"""

from __future__ import annotations

import typing as tp

import jax
import numpy as np

from flaxen import traceback_util
from flaxen.nnx import _codegen, _graphdef, filterlib
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _graph_ops as _ops
from flaxen.nnx import _graph_views as _views  # nnx.view's Module settings
from flaxen.nnx import _node_protocol as _proto
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graph_ops import (
    PytreeType,
    RefMap,
    compose_mapping,
    compose_mapping_reversed,
    graph_update_static,
    is_node,
)
from flaxen.nnx._graph_state import (  # a State bundled with its GraphDef
    GraphState,
    _gs_flatten,  # noqa: F401 - GraphState's pytree functions, kept importable from here
    _gs_flatten_with_keys,  # noqa: F401
    _gs_unflatten,  # noqa: F401
    _merge_graph_states,
)
from flaxen.nnx._graph_views import (  # nnx.view_info, public here
    _args_doc,  # noqa: F401 - kept importable from here
    view_info,  # noqa: F401
)
from flaxen.nnx._graph_walk import (  # walking a graph without splitting it
    _is_pytree,  # noqa: F401 - the walkers' helpers, kept importable from here
    _is_walked,  # noqa: F401
    _mode,
    _node_items,  # noqa: F401
    _path_str,
    find_duplicates,
    iter_children,
    iter_graph,
    iter_module_children,  # noqa: F401
    iter_modules,
    recursive_map,
    tree_flatten_cached,
)
from flaxen.nnx._graphdef import (  # Flax's definition classes and markers
    LEAF_ATTR,
    NO_UPDATE,
    NODE_ATTR,
    REPEATED,
    ArrayRefDef,
    ArrayRefOutput,
    LeafAttr,
    NodeAttr,
    NodeDef,
    NodeRef,
    NoUpdate,
    Repeated,
    Static,
    VariableDef,
)
from flaxen.nnx._modes import set_graph_mode, set_graph_updates
from flaxen.nnx._node_protocol import (  # the node protocol and its registry
    GRAPH_REGISTRY,
    PYTREE_NODE_IMPL,
    PYTREE_REGISTRY,
    DataElem,
    GenericPytree,
    GraphNodeImpl,
    IndexesPytreeDef,
    NodeImplBase,
    PytreeNodeImpl,
    StaticElem,
    get_node_impl,
    get_node_impl_for_type,
    is_node_module,
    is_node_type,
    is_pytree_node,
    jax_to_nnx_path,
    register_graph_node_type,
    register_pytree_node_type,
)
from flaxen.nnx._state_leaves import (  # a walk's leaves as States, and back
    _copy_vars,
    _nest,
    _partition,
    _root_is_leaf,
    _single_leaf,
    _states,
    _unflatten_leaves,
)
from flaxen.nnx._tree_mode import (  # tree mode (graph=False), re-exported here
    TreeGraphDef,
    TreeNodeDef,
    tree_unflatten,
)
from flaxen.nnx._tree_mode import flat_leaves as _flat_leaves
from flaxen.nnx._tree_mode import flatten_mapping as _flatten_mapping
from flaxen.nnx._tree_mode import tree_flatten_slow as _tree_flatten_slow
from flaxen.nnx._var_tools import set_metadata, with_vars
from flaxen.nnx.deprecations import deprecated
from flaxen.nnx.statelib import (
    FlatState,
    State,
    check_paths,
    remember_leaves,
    remembered_leaves,
)
from flaxen.nnx.variablelib import Variable, is_array_ref
from flaxen.typing import HashableMapping as HashableMapping
from flaxen.typing import Key
from flaxen.typing import PathParts as PathParts

__all__ = [
    "FlatState", "GraphDef", "NodeDef", "NodeRef", "PytreeType", "RefMap", "TreeNodeDef",
    "VariableDef", "call", "clone", "compose_mapping",
    # Flax 0.12.8's graphlib names: the node protocol, definitions, markers, tools
    "GRAPH_REGISTRY", "LEAF_ATTR", "NODE_ATTR", "NO_UPDATE", "PYTREE_NODE_IMPL",
    "PYTREE_REGISTRY", "REPEATED", "ArrayRefDef", "ArrayRefOutput", "AttrType", "DataElem",
    "GenericPytree", "GraphFlatState", "GraphNodeImpl", "Index", "IndexesPytreeDef",
    "LeafAttr", "LeafType", "Names", "NodeAttr", "NodeDefType", "NodeImpl", "NodeImplBase",
    "NoUpdate", "PythonRefMap", "PytreeNodeImpl", "Repeated", "Static", "StaticElem",
    "get_node_impl", "get_node_impl_for_type", "graph_pop", "is_node_leaf", "is_node_module",
    "is_node_type", "is_pytree_node", "jax_to_nnx_path", "register_graph_node_type",
    "register_pytree_node_type", "set_metadata", "with_vars", "vars_as",
    # typing names Flax's graphlib imports from flax.typing (same objects as flaxen.typing's)
    "HashableMapping", "PathParts",
    "compose_mapping_reversed", "find_duplicates", "flatten", "graph_update_static",
    "graphdef", "is_graph_node", "is_node", "iter_children", "iter_graph", "iter_modules",
    "merge", "pop", "recursive_map", "set_graph_mode", "set_graph_updates", "split", "state",
    "unflatten", "update",
]

A = tp.TypeVar("A")
B = tp.TypeVar("B")
C = tp.TypeVar("C")
F = tp.TypeVar("F", bound=tp.Callable)
HA = tp.TypeVar("HA", bound=tp.Hashable)
HB = tp.TypeVar("HB", bound=tp.Hashable)
KeyT = tp.TypeVar("KeyT", bound=Key)
Node = tp.TypeVar("Node")
Leaf = tp.TypeVar("Leaf")
AuxData = tp.TypeVar("AuxData")
Index = int
Names = tp.Sequence[int]
# what a State of a graph holds: Variables, bare arrays and the placeholders of Ref-backed
# Variables an inner split leaves
LeafType = tp.Union[Variable, jax.Array, np.ndarray, ArrayRefOutput, NoUpdate]  # noqa: UP007
GraphFlatState = FlatState[LeafType]  # type: ignore[type-arg]  # generic at runtime
# typing.Union, as Flax: these are typing forms (X | Y of classes would be a types.UnionType)
NodeImpl = tp.Union[  # noqa: UP007
    GraphNodeImpl[Node, Leaf, AuxData], PytreeNodeImpl[Node, Leaf, AuxData]]
AttrType = tp.Union[NodeAttr, LeafAttr, Static[tp.Any]]  # noqa: UP007
_MISSING = object()


def is_node_leaf(x: tp.Any) -> bool:
    """True for what a State holds as a leaf: a Variable, an array, a ``jax.Ref``, or an
    inner split's placeholder (:class:`ArrayRefOutput`, :class:`NoUpdate`).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> is_node_leaf(nnx.Param(1.0)), is_node_leaf(jnp.ones(1)), is_node_leaf(1.0)
    (True, True, False)
    """
    return isinstance(x, (Variable, jax.Array, np.ndarray, ArrayRefOutput, NoUpdate)) \
        or is_array_ref(x)


def is_graph_node(x: tp.Any) -> bool:
    """True for objects walked as graph nodes (Modules, Pytrees, Rngs...)."""
    return isinstance(x, GraphNode)


# -- graph definitions ---------------------------------------------------------------------

class _GraphDefMeta(type):
    # Flax has one GraphDef class for both modes; flaxen's tree-mode definition is a class of
    # its own (TreeGraphDef), so ``isinstance(gd, nnx.GraphDef)`` answers True for it too.
    def __instancecheck__(cls, obj: tp.Any) -> bool:
        return type.__instancecheck__(cls, obj) or (
            cls is GraphDef and isinstance(obj, TreeGraphDef))

    def __subclasscheck__(cls, sub: type) -> bool:
        return type.__subclasscheck__(cls, sub) or (
            cls is GraphDef and issubclass(sub, TreeGraphDef))


class GraphDef(_graphdef.GraphDef[Node], metaclass=_GraphDefMeta):
    """The static half of a graph-mode split (hashable, a pytree without leaves).

    ``nodes`` are the root definitions (nested :class:`NodeDef` trees, not Flax's flat list;
    :attr:`attributes` and :attr:`num_leaves` give Flax's flat views and, when passed, must
    agree with them). ``outer_index`` (set by ``flatten(..., ref_outer_index=...)``) maps
    this walk's object indices to the indices the same objects had in an outer walk.

    >>> from flaxen import nnx
    >>> gd = nnx.graphdef(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    >>> gd.num_leaves, GraphDef(gd.nodes, gd.attributes, gd.num_leaves) == gd
    (2, True)
    """

    __slots__ = ("outer_index",)

    def __init__(self, nodes: tp.Sequence[tp.Any], attributes: tp.Any = None,
                 num_leaves: int | None = None, *, outer_index: dict | None = None) -> None:
        super().__init__(tuple(nodes))
        if isinstance(attributes, dict):  # flaxen's earlier (defs, outer_index) order
            attributes, outer_index = None, attributes
        self.outer_index = outer_index
        if attributes is not None and list(attributes) != self.attributes or (
                num_leaves is not None and num_leaves != self.num_leaves):
            raise ValueError(
                "GraphDef(nodes, attributes, num_leaves): attributes / num_leaves disagree "
                "with the node definitions (flaxen's nodes are nested, the flat lists are "
                "derived from them). Pass only the nodes, e.g. GraphDef(graphdef.nodes).")

    def with_no_outer_index(self) -> GraphDef[Node]:
        """This definition with no outer indices."""
        return GraphDef(self.defs)

    def with_same_outer_index(self) -> GraphDef[Node]:
        """This definition with each shared object's outer index its own index."""
        n = 1 + max((i for i in _graphdef_indices(self.defs)), default=-1)
        return GraphDef(self.defs, outer_index={i: i for i in range(n)})

    def with_matching_outer_index(self, other: tp.Any) -> GraphDef[Node]:
        """This definition with ``other``'s outer indices."""
        return GraphDef(self.defs, outer_index=getattr(other, "outer_index", None))

    def _compile(self) -> None:
        # the generated fast path (see _codegen), built on the third use, for States of
        # Variables; types registered with the node protocol take the general path
        self._uses += 1
        if self._uses == _ops._COMPILE_AT and not _has_registered(self.defs):
            self._states_fn = _codegen.make_states_fn(self.defs, variables=True)
            self._merge_fn = _codegen.make_merge_fn(self.defs, variables=True)

    @property
    def nodes(self) -> tuple:
        return self.defs

    def merge(self, state: tp.Any, /, *states: tp.Any) -> Node:  # type: ignore[override]
        return merge(self, state, *states)

    def apply(self, state: tp.Any, *states: tp.Any, graph: bool | None = None
              ) -> _ops._ApplyCaller:
        """``gd.apply(state).method(*args)`` -> ``(out, (graphdef, state))``: merges, calls,
        splits again (in graph mode unless ``graph=False``)."""
        return _ApplyCaller(self, (state, *states), graph)


jax.tree_util.register_pytree_node(GraphDef, lambda g: ((), g), lambda g, _: g)


def _graphdef_indices(defs: tuple) -> tp.Iterator[int]:
    stack = list(defs)
    while stack:
        d = stack.pop()
        if type(d) in (NodeDef, VariableDef) and d.index >= 0:
            yield d.index
        if type(d) is NodeDef:
            stack.extend(s for _, s in d.attributes)


def _has_registered(defs: tuple) -> bool:
    stack = list(defs)
    while stack:
        d = stack.pop()
        if type(d) is NodeDef:
            if d.type is not PytreeType and not issubclass(d.type, GraphNode):
                return True
            stack.extend(s for _, s in d.attributes)
    return False


# What ``nnx.split(node)`` returns, as a type: ``def f(pure: nnx.PureState[Model])``.
PureState = tuple[GraphDef[A], State]


class _ApplyCaller(_ops._ApplyCaller):
    __slots__ = ("_graph",)

    def __init__(self, graphdef: tp.Any, states: tuple, graph: bool | None = True) -> None:
        super().__init__(graphdef, states)
        self._graph = graph

    def _call(self, name: str | None, args: tuple, kwargs: dict) -> tuple:
        node = merge(self._graphdef, *self._states)
        fn = node if name is None else getattr(node, name)
        out = fn(*args, **kwargs)
        return out, split(node, graph=self._graph)  # None: the current graph mode


NodeDefType = tp.Union[NodeDef, NodeRef, VariableDef, ArrayRefDef, TreeNodeDef]  # noqa: UP007


def _intern(new: eng.FlatGraph, old: eng.FlatGraph | None) -> None:
    gd: GraphDef[tp.Any] = GraphDef(new.defs)
    if old is not None and old.graphdef == gd:
        gd = old.graphdef
    new.graphdef = gd


def _walk(node: tp.Any) -> eng.FlatGraph:
    # cached per intern function, so today's walks (GraphDef of this module) and the copying
    # operations' walks (their own GraphDef) of the same node never share an entry
    return eng.flatten_cached((node,), _intern)


# -- tree mode -----------------------------------------------------------------------------

def _tree_flatten(node: tp.Any) -> tuple[TreeGraphDef, list, list]:
    gd, paths, leaves, _ = tree_flatten_cached(node, _walk, _tree_flatten_slow)
    return gd, list(paths), leaves


# -- flatten / split -----------------------------------------------------------------------

def flatten(node: tp.Any, /, *, with_paths: bool = True, ref_index: RefMap | None = None,
            ref_outer_index: RefMap | None = None, graph: bool | None = None
            ) -> tuple[tp.Any, tp.Any]:
    """``(graphdef, FlatState of (path, leaf))``, or ``(graphdef, [leaf, ...])`` with
    ``with_paths=False``. Leaves are the Variables themselves (and bare arrays).
    ``ref_index`` (a :class:`RefMap`) receives ``object -> index`` of every shared object."""
    gd: TreeGraphDef | GraphDef
    if not _mode(graph):
        gd, paths, leaves = _tree_flatten(node)
    else:
        fg = eng.flatten((node,)) if ref_index is not None else _walk(node)
        if fg.graphdef is None:
            _intern(fg, None)
        gd, paths, leaves = fg.graphdef, fg.paths, fg.leaves
        if ref_index is not None:
            for i, obj in enumerate(fg.refs):
                if obj not in ref_index:
                    ref_index[obj] = i
            # a Variable's jax.Ref is an object of the graph too (numbered after the walk's)
            inner = [v.raw_value for v in fg.refs
                     if isinstance(v, Variable) and is_array_ref(v.raw_value)]
            for i, ref in enumerate(inner, len(fg.refs)):
                if ref not in ref_index:
                    ref_index[ref] = i
        if ref_outer_index is not None:
            outer = {i: ref_outer_index[obj] for i, obj in enumerate(fg.refs)
                     if obj in ref_outer_index}
            gd = GraphDef(fg.defs[:1], outer_index=outer)
    if not with_paths:
        return gd, list(leaves)
    return gd, FlatState.from_sorted_keys_values(tuple(paths), list(leaves))


def _split_parts(node: tp.Any, graph: bool | None) -> tuple[tp.Any, list, list]:
    if not _mode(graph) or not (isinstance(node, Variable) or is_node(node)
                                or isinstance(node, eng._ARRAYS)):
        return _tree_flatten(node)
    fg = _walk(node)
    return fg.graphdef, fg.paths, fg.leaves


# the containers a split's root may be beside a graph node, with a cached walk
_ROOTS = (tuple, list, dict)


@traceback_util.api_boundary
def split(node: A, *filters: filterlib.Filter, graph: bool | None = None) -> tuple:
    """``(graphdef, state)`` or ``(graphdef, state_1, ..., state_n)`` with filters (each
    Variable goes to the first filter it matches; they must cover every Variable)."""
    if not filters and (isinstance(node, GraphNode) or type(node) in _ROOTS) and (
            graph or (graph is None and set_graph_mode.current_value())):
        fg = _walk(node)
        gd = fg.graphdef
        if type(gd.defs[0]) is not NodeDef:  # a container holding no graph node
            return (gd, *_states(gd, fg.paths, fg.leaves, filters, True))
        fn = gd._states_fn
        if fn is not None and not fg.has_arrays:
            return gd, fn(fg.leaves)
        if gd._uses < _ops._COMPILE_AT:
            gd._compile()
        st = _nest(fg.paths, fg.leaves)
        if not fg.has_arrays:
            remember_leaves(st, gd.defs, tuple(fg.leaves))
        return gd, st
    if not _mode(graph):
        return _tree_states(node, filters, True)
    gd, paths, leaves = _split_parts(node, graph)
    return (gd, *_states(gd, paths, leaves, filters, True))


def _tree_states(node: tp.Any, filters: tuple, exhaustive: bool) -> tuple:
    gd, paths, leaves, tw = tree_flatten_cached(node, _walk, _tree_flatten_slow)
    if not filters and tw is not None:
        fn = tw.nest_fn()
        if fn is not None:
            return gd, fn(leaves)
    return (gd, *_states(gd, list(paths), leaves, filters, exhaustive))


@traceback_util.api_boundary
def state(node: tp.Any, *filters: filterlib.Filter, graph: bool | None = None) -> tp.Any:
    """The node's State (of its Variables), or one State per filter."""
    if not _mode(graph):
        out = _tree_states(node, filters, False)[1:]
    else:
        gd, paths, leaves = _split_parts(node, graph)
        out = _states(gd, paths, leaves, filters, False)
    return out[0] if len(out) == 1 else out


def graphdef(node: tp.Any, /, *, graph: bool | None = None) -> tp.Any:
    """The graph definition of ``node`` (what :func:`split` returns first)."""
    return _split_parts(node, graph)[0]


def variables(node: tp.Any, *filters: filterlib.Filter, graph: bool | None = None) -> tp.Any:
    """Alias of :func:`state`: the Variables of ``node`` as a State."""
    return state(node, *filters, graph=graph)


# -- merge ---------------------------------------------------------------------------------

def _as_variable(d: VariableDef, leaf: tp.Any) -> tp.Any:
    if isinstance(leaf, Variable) or d.type is _graphdef.ArrayLeaf:
        return leaf
    return leaf  # a raw value or a snapshot: the engine builds the Variable


class _NoState:
    pass


_NO_STATE = _NoState()


@traceback_util.api_boundary
def merge(graphdef: tp.Any, state: tp.Any = _NO_STATE, /, *states: tp.Any,
          copy: bool = False, recreate_variables: bool = True) -> tp.Any:
    """Builds the object graph of ``graphdef`` around the given Variables (used as they are,
    or copies of them with ``copy=True``). Raw values (a pure dict) become new Variables of
    the split's types and metadata; with ``recreate_variables=False`` a graph-mode merge puts
    them in place as they are (tree mode always rebuilds the Variables, as Flax's does).

    >>> from flaxen import nnx
    >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> graphdef, state = nnx.split(model)
    >>> pure = nnx.to_pure_dict(state)
    >>> type(nnx.merge(graphdef, pure).kernel).__name__
    'Param'
    >>> type(nnx.merge(graphdef, pure, recreate_variables=False).kernel).__name__
    'ArrayImpl'
    >>> nnx.merge(graphdef, state, copy=True).kernel is model.kernel
    False
    """
    if type(state) is list:
        # as Flax: a plain list is the leaves themselves (Variables or raw values), in the
        # order split gave them (``jax.tree.leaves(state)``), e.g. carried through jax.jit
        if states:
            raise ValueError(
                f"nnx.merge: a list of leaves is the whole state, but {len(states)} more "
                "state(s) were given. Pass the leaves of all of them in one list, or States.")
        return unflatten(graphdef, state, copy_variables=copy,
                         recreate_variables=recreate_variables)
    if copy:
        state, states = _copy_vars(state), tuple(_copy_vars(s) for s in states)
    if not states and type(graphdef) is TreeGraphDef:
        node = graphdef.fast_merge(state)
        if node is not _codegen.MISS:
            return node
    if not states and type(state) is State and type(graphdef) is GraphDef:
        fn = graphdef._merge_fn
        if fn is not None:
            leaves = remembered_leaves(state, graphdef.defs)
            node = fn(state) if leaves is None else fn.build(leaves)
            if node is not _codegen.MISS:
                return node
        elif graphdef._uses < _ops._COMPILE_AT:
            graphdef._compile()
    if isinstance(graphdef, GraphState):
        graphdef, all_states = _merge_graph_states((graphdef, state, *states)
                                                   if not isinstance(state, _NoState)
                                                   else (graphdef, *states))
    elif isinstance(state, _NoState):
        raise TypeError(
            "merge() missing 1 required positional argument: 'state'. Pass the State(s) "
            "that nnx.split returned next to this graphdef: nnx.merge(graphdef, state).")
    else:
        all_states = (state, *states)
    if isinstance(graphdef, TreeGraphDef):
        nodedef = graphdef.nodes[0]
        if _root_is_leaf(graphdef):
            leaves = [_single_leaf(all_states)]
        else:
            leaves = nodedef.leaves_of(all_states, "merge")
        return tree_unflatten(graphdef, leaves)
    if not isinstance(graphdef, _graphdef.GraphDef):
        raise TypeError(
            f"nnx.merge expects a GraphDef first, got a {type(graphdef).__name__}. Pass the "
            "graphdef returned by nnx.split.")
    defs = graphdef.defs
    if type(defs[0]) is VariableDef:
        leaves = [_single_leaf(all_states)]
    elif any(isinstance(s, FlatState) for s in all_states):
        leaves = _flat_leaves([p for p, _ in _graphdef.var_def_paths(defs)], all_states,
                              "merge")
    else:
        leaves = _ops._leaves_from_states(defs, all_states, "merge")
    return eng.unflatten(defs[:1], leaves, None, recreate_variables)[0][0]


def unflatten(graphdef: tp.Any, state: tp.Any, /, *, index_ref: dict | None = None,
              outer_index_outer_ref: dict | None = None, copy_variables: bool = False,
              recreate_variables: bool = True) -> tp.Any:
    """:func:`merge` from a FlatState or list of leaves (checks the leaf count).
    ``recreate_variables=False``: raw values stay raw in graph mode (see :func:`merge`)."""
    leaves = _unflatten_leaves(graphdef, state)
    if isinstance(graphdef, TreeGraphDef):
        return tree_unflatten(graphdef, leaves, copy_variables)
    if copy_variables:
        leaves = [v.copy() if isinstance(v, Variable) else v for v in leaves]
    idxmap = None
    if outer_index_outer_ref is not None and getattr(graphdef, "outer_index", None):
        idxmap = {i: outer_index_outer_ref[o] for i, o in graphdef.outer_index.items()
                  if o in outer_index_outer_ref}
    roots, built = eng.unflatten(graphdef.defs[:1], leaves, idxmap, recreate_variables)
    if index_ref is not None:
        index_ref.update(built)
    return roots[0]


PythonRefMap = RefMap  # Flax's name for its pure-Python RefMap (flaxen has only that one)


class IndexMap(dict):
    """``index -> object``: the inverse of a :class:`RefMap`."""

    @staticmethod
    def from_refmap(refmap: tp.Mapping[tp.Any, int]) -> IndexMap:
        return IndexMap((i, obj) for obj, i in refmap.items())


# -- update / pop / clone ------------------------------------------------------------------

@traceback_util.api_boundary
def update(node: tp.Any, state: tp.Any, /, *states: tp.Any, strict: bool = False) -> None:
    """Writes the states' values (and metadata) into ``node``'s Variables, in place.

    ``strict=True`` (flaxen's, off by default as in Flax) first checks that the states
    together hold exactly ``node``'s Variables, each with its shape and dtype, and raises one
    :class:`~flaxen.errors.RestoreMismatchError` listing every difference; nothing is written.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> wrong = nnx.state(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
    >>> try:
    ...     nnx.update(model, wrong, strict=True)
    ... except ValueError as e:
    ...     print(str(e).splitlines()[1].strip())
    /kernel: shape (2, 3) in the target, (4, 3) restored
    """
    if strict:
        _check_update(node, (state, *states))
    if isinstance(node, Variable):
        src = _single_leaf((state, *states))
        if isinstance(src, Variable):
            node.copy_from(src)
        else:
            node.value = src
        return
    flat = [s.to_nested_state() if isinstance(s, FlatState)
            else (s._state if isinstance(s, GraphState) else s) for s in (state, *states)]
    _ops.update(node, *flat)


def _check_update(node: tp.Any, states: tuple) -> None:
    if isinstance(node, Variable):
        target: dict = {(): node}
        restored: dict = {(): _single_leaf(states)}
    else:
        target = {}
        _flatten_mapping(state(node), (), target)
        restored = {}
        for s in states:
            s = s.to_nested_state() if isinstance(s, FlatState) else (
                s._state if isinstance(s, GraphState) else s)
            _flatten_mapping(s, (), restored)
    check_paths(target, restored)


@traceback_util.api_boundary
def pop(node: tp.Any, *filters: filterlib.Filter) -> tp.Any:
    """Removes the Variables matching ``filters`` from ``node``; returns them as States."""
    if not filters:
        raise ValueError("nnx.pop needs at least one filter saying which Variables to remove, "
                         "e.g. nnx.pop(model, nnx.Intermediate).")
    fg = eng.flatten((node,))
    buckets = _partition(list(fg.paths), list(fg.leaves), filters, False)
    states = tuple(_nest([p for p, _ in b], [v for _, v in b]) for b in buckets)
    for b in buckets:
        for p, _ in b:
            _delete(node, p)
    eng._EPOCH[0] += 1
    return states[0] if len(states) == 1 else states


def graph_pop(node: tp.Any, filters: tuple[filterlib.Filter, ...]) -> tuple[State, ...]:
    """Removes the Variables matching each of ``filters`` from ``node`` in place and returns
    one State per filter (what :func:`pop` does, always as a tuple).

    >>> from flaxen import nnx
    >>> m = nnx.Dict(a=nnx.Param(1.0), i=nnx.Intermediate(2.0))
    >>> (out,) = graph_pop(m, (nnx.Intermediate,))
    >>> list(out), 'i' in m
    (['i'], False)
    """
    out: tp.Any = pop(node, *filters) if filters else ()
    return out if isinstance(out, tuple) else (out,)


def _delete(node: tp.Any, path: tuple) -> None:
    parent = node
    for k in path[:-1]:
        parent = _child(parent, k)
    k = path[-1]
    if k in dict(_proto.children(parent) or ()) and not _proto.pop_child(parent, k):
        raise ValueError(
            f"nnx.pop: Cannot pop key {k!r} from node of type {type(parent).__name__} (at "
            f"{_path_str(path)}): it cannot change in place. Hold such Variables in a list, "
            "dict or Module instead.")


def _child(x: tp.Any, k: tp.Any) -> tp.Any:
    return dict(_proto.children(x) or ())[k]


@traceback_util.api_boundary
def clone(node: A, variables: bool = True, *, arrays: bool = False,
          graph: bool | None = None) -> A:
    """A deep copy of ``node``: new Variables (and nodes), shared references kept shared.
    The arrays inside are shared with ``node`` unless ``arrays=True`` (fresh buffers)."""
    gd, paths, leaves = _split_parts(node, graph)
    if arrays:
        import jax.numpy as jnp

        def fresh(x: tp.Any) -> tp.Any:
            return jnp.array(x, copy=True) if isinstance(x, eng._ARRAYS) else x

        leaves = [v.replace(jax.tree_util.tree_map(fresh, v.raw_value))
                  if isinstance(v, Variable) else fresh(v) for v in leaves]
    elif variables:
        leaves = [v.copy() if isinstance(v, Variable) else v for v in leaves]
    if isinstance(gd, TreeGraphDef):
        return gd.nodes[0].unflatten(leaves)
    return eng.unflatten(gd.defs[:1], leaves)[0][0]


# -- calls ---------------------------------------------------------------------------------

class _Call:
    __slots__ = ("_graphdef", "_state", "_names")

    def __init__(self, graphdef: tp.Any, state: tp.Any, names: tuple = ()) -> None:
        self._graphdef = graphdef
        self._state = state
        self._names = names

    def __getattr__(self, name: str) -> _Call:
        return _Call(self._graphdef, self._state, (*self._names, name))

    def __getitem__(self, key: tp.Any) -> _Call:
        return _Call(self._graphdef, self._state, (*self._names, ("item", key)))

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tuple:
        node = merge(self._graphdef, self._state)
        fn = node
        for n in self._names:
            fn = fn[n[1]] if isinstance(n, tuple) else getattr(fn, n)
        out = fn(*args, **kwargs)
        return out, split(node, graph=not isinstance(self._graphdef, TreeGraphDef))


def call(graphdef_state: tuple[tp.Any, tp.Any], /) -> tp.Any:
    """``nnx.call((graphdef, state)).method(*args)`` -> ``(out, (graphdef, new_state))``:
    runs a method on the merged object and splits it again (a pure-function form)."""
    graphdef_, state_ = graphdef_state
    return _Call(graphdef_, state_)


def as_pure(tree: A) -> A:
    """``tree`` with every Variable replaced by its value."""
    return jax.tree_util.tree_map(
        lambda x: x.get_value() if isinstance(x, Variable) and hasattr(x, "get_value")
        else (x.value if isinstance(x, Variable) else x),
        tree, is_leaf=lambda x: isinstance(x, Variable))


# Flax 0.12.8's older name, kept: calling it warns and runs as_pure
pure = deprecated(as_pure)
# with_vars' older name: Flax 0.12.8 keeps it in graphlib (so also nnx.graph and nnx.vars_as)
# as a wrapper that warns (DeprecationWarning) on each call, then runs with_vars
vars_as = deprecated(with_vars)


# private names Flax's tests reach for
_flatten_pytree = eng.flatten_pytree
_unflatten_pytree = eng.unflatten_pytree
NodeDef = NodeDef
NodeRef = NodeRef
VariableDef = VariableDef


# -- map / unpack --------------------------------------------------------------------------

def map(f: tp.Callable[[tuple, tp.Any], tp.Any], node: A, /, *, graph: bool | None = None,  # noqa: A001
        recreate_variables: bool = True) -> A:
    """A new ``node`` whose Variables are ``f(path, variable)``: a returned Variable is used
    as is, another value becomes a Variable of the same type and metadata (or stays a plain
    value with ``recreate_variables=False``)."""
    if not recreate_variables:
        gd, paths, leaves = _tree_flatten(node)
    else:
        gd, paths, leaves = _split_parts(node, graph)
    new = []
    for p, v in zip(paths, leaves):
        out = f(p, v)
        if recreate_variables and isinstance(v, Variable) and not isinstance(out, Variable):
            out = v.replace(out)
        new.append(out)
    if isinstance(gd, TreeGraphDef):
        return gd.nodes[0].unflatten(new)
    return eng.unflatten(gd.defs[:1], new)[0][0]


def unpack(node: tp.Any, *filters: filterlib.Filter, graph: bool | None = None) -> tp.Any:
    """Like :func:`split`, but each State comes back bundled with the GraphDef as a
    :class:`GraphState`, so ``nnx.merge(*states)`` needs nothing else."""
    gd, *states = split(node, *filters, graph=graph)
    out: tuple = tuple(GraphState(gd, s) for s in states)
    return out[0] if len(out) == 1 else out


# -- views: the copy here (split and merge live here), the Module settings in _graph_views

def _shallow_copy(node: A, graph: bool | None) -> A:
    """New node objects around the same Variables."""
    gd, paths, leaves = _split_parts(node, graph)
    if isinstance(gd, TreeGraphDef):
        return gd.nodes[0].unflatten(leaves)
    return eng.unflatten(gd.defs[:1], leaves)[0][0]


def with_attributes(node: A, /, *, only: filterlib.Filter = ..., raise_if_not_found: bool = True,
                    graph: bool | None = None, **attributes: tp.Any) -> A:
    """A copy of ``node`` (sharing its Variables) whose Modules matching ``only`` have
    ``attributes`` set where they already have them (``node`` itself is unchanged)."""
    new = _shallow_copy(node, graph)
    _views.apply_attributes(new, only, raise_if_not_found, graph, attributes)
    return new


def view(node: A, /, *, only: filterlib.Filter = ..., raise_if_not_found: bool = True,
         graph: bool | None = None, **kwargs: tp.Any) -> A:
    """A copy of ``node`` (sharing its Variables) in another mode: each Module matching
    ``only`` gets the keyword arguments its ``set_view`` method accepts (or, without such a
    method, the attributes it already has), e.g. ``nnx.view(model, deterministic=True)``."""
    new = _shallow_copy(node, graph)
    _views.apply_view(new, only, raise_if_not_found, graph, kwargs)
    return new


_CONTEXT_NAMES = frozenset({
    "GRAPH_CONTEXT", "GraphContext", "MergeContext", "SplitContext", "StaticCache",
    "UpdateContext", "UpdateContextManager", "current_update_context", "merge_context",
    "split_context", "static_cache", "update_context"})


def __getattr__(name: str) -> tp.Any:
    if name in _CONTEXT_NAMES:
        # upward: today's split/merge/update contexts live in _contexts, which imports this
        from flaxen.nnx import _contexts

        return getattr(_contexts, name)
    if name == "cached_partial":
        # upward: cached_partial is a transform (jit's caching), defined above this file
        from flaxen.nnx.transforms.compilation import cached_partial

        return cached_partial
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

