"""``nnx.to_tree`` / ``nnx.from_tree``: a tree holding graph nodes <-> a pure pytree.

:func:`to_tree` replaces every graph node (and Variable) of a pytree by a
:class:`NodeStates` (its graph definition plus its states), splitting all of them in one
split context so nodes shared between leaves stay shared (a later occurrence is a
``NodeRef`` with empty states). :func:`from_tree` turns those back into objects in one merge
context. With ``ctxtag`` they are steps of an ``nnx.update_context`` (see
:mod:`flaxen.nnx._contexts`), and with ``prefix`` each node is split knowing the prefix
(e.g. the ``in_axes`` entry) that covers it; a Variable reached under two different
prefixes is an error.

>>> from flaxen import nnx
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> pure = nnx.to_tree((m, 1, {'again': m}))
>>> isinstance(pure[0], nnx.NodeStates), len(pure[2]['again'].state)
(True, 0)
>>> a, one, d = nnx.from_tree(pure)
>>> a is d['again'], one
(True, 1)
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen import struct
from flaxen.errors import NNXTransformError, TraceContextError
from flaxen.nnx import _contexts, _trace
from flaxen.nnx._contexts import MergeContext, SplitContext
from flaxen.nnx._extract_prefix import broadcast_prefix
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx.graphlib import iter_graph
from flaxen.nnx.variablelib import Variable
from flaxen.typing import Missing

__all__ = [
    "NodeStates", "aliasing_error", "can_update", "check_consistent_aliasing",
    "clear_non_graph_nodes", "default_split_fn", "from_tree", "is_tree_node", "merge_tree_node",
    "to_tree",
]

KeyPath = tuple
_MISSING: tp.Any = Missing


class NodeStates(struct.PyTreeNode):
    """What :func:`to_tree` puts in place of a node: its graph definition (static for JAX)
    and its states (the pytree children); ``metadata`` is static too.

    >>> import jax
    >>> from flaxen import nnx
    >>> ns = nnx.NodeStates.from_prefixes((None, 0))
    >>> ns.states, jax.tree.leaves(ns)
    ((None, 0), [0])
    """

    _graphdef: tp.Any
    states: tuple
    metadata: tp.Any = struct.field(pytree_node=False, default=None)

    @property
    def graphdef(self) -> tp.Any:
        if self._graphdef is None:
            raise ValueError("This NodeStates has no graphdef (it was built from states or "
                             "prefixes only); build it with NodeStates.from_split.")
        return self._graphdef

    @property
    def state(self) -> tp.Any:
        if len(self.states) != 1:
            raise ValueError(f"NodeStates.state needs exactly one state, this one has "
                             f"{len(self.states)}; read .states instead.")
        return self.states[0]

    @classmethod
    def from_split(cls, graphdef: tp.Any, state: tp.Any, /, *states: tp.Any,
                   metadata: tp.Any = None) -> NodeStates:
        """From what ``split`` returns: ``NodeStates.from_split(*ctx.split(node))``."""
        return cls(graphdef, (state, *states), metadata)

    @classmethod
    def from_states(cls, state: tp.Any, *states: tp.Any) -> NodeStates:
        """States only (no graphdef)."""
        return cls(None, (state, *states), None)

    @classmethod
    def from_prefixes(cls, prefixes: tp.Iterable[tp.Any], /, *, metadata: tp.Any = None
                      ) -> NodeStates:
        """One prefix per state: the shape of a transform's axes for a NodeStates."""
        return cls(None, tuple(prefixes), metadata)



def _is_node(x: tp.Any) -> bool:
    return isinstance(x, (GraphNode, Variable))


def is_tree_node(x: tp.Any) -> bool:
    """Whether ``x`` is a :class:`NodeStates` (what :func:`from_tree` merges)."""
    return isinstance(x, NodeStates)


def default_split_fn(ctx: SplitContext, path: KeyPath, prefix: tp.Any, leaf: tp.Any
                     ) -> NodeStates:
    """``to_tree``'s default: the whole node, one state."""
    return NodeStates.from_split(*ctx.split(leaf))


def merge_tree_node(ctx: MergeContext, path: KeyPath, prefix: tp.Any, leaf: tp.Any) -> tp.Any:
    """``from_tree``'s default: merges a :class:`NodeStates` back into its object."""
    if not isinstance(leaf, NodeStates):
        raise ValueError(f"from_tree expected a NodeStates at {jax.tree_util.keystr(path)}, "
                         f"got a {type(leaf).__name__}; pass the output of nnx.to_tree.")
    return ctx.merge(leaf.graphdef, *leaf.states)


def aliasing_error(node_prefixes: dict[int, list[tuple[tuple, tp.Any]]],
                   variables: dict[int, Variable]) -> NNXTransformError | None:
    """The error naming every Variable of ``node_prefixes`` (``id -> [(path, prefix)]``)
    that was given two different prefixes, each with all its paths; None when there is
    none. Prefixes are compared with ``is`` then ``==`` (they need not be hashable)."""
    bad = []
    for key, entries in node_prefixes.items():
        distinct: list = []
        for _, p in entries:
            if not any(p is q or _equal(p, q) for q in distinct):
                distinct.append(p)
        if len(distinct) > 1:
            name = type(variables[key]).__name__ if key in variables else f"Node ID: {key}"
            where = "\n".join(f"  {'/'.join(map(str, path)) or '<root>'}: {p}"
                              for path, p in entries)
            bad.append(f"Node: {name}\n{where}")
    if not bad:
        return None
    return NNXTransformError(
        "", "Inconsistent aliasing detected. The following nodes have different prefixes:\n"
        + "\n".join(bad) + "\nGive every path to a shared Variable the same prefix (e.g. the "
        "same in_axes), or stop sharing it.", "")


def _equal(a: tp.Any, b: tp.Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - prefixes that cannot be compared are different
        return False


def can_update(v: Variable) -> bool:
    """Whether ``v`` may take updates here: it was created under the current JAX trace (not
    captured by closure from outside a transform), or it is a hijax Variable."""
    return bool(v.hijax) or v._trace_state is _trace.current_trace()


def _where(path: tuple) -> str:
    return "/" + "/".join(map(str, path))


def check_consistent_aliasing(node: tp.Any, prefix: tp.Any, /, *,
                              node_prefixes: dict[int, list] | None = None) -> None:
    """Records ``(path, prefix)`` for each Variable of ``node`` in ``node_prefixes`` and
    raises when one Variable has been seen under two different prefixes. A prefix with a
    ``map_prefix`` method (``StateAxes``, a graph-mode ``nnx.prefix``) gives each Variable
    ``prefix.map_prefix(path, variable)``.

    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> seen = {}
    >>> check_consistent_aliasing(m, 0, node_prefixes=seen)
    >>> try:
    ...     check_consistent_aliasing(m, 1, node_prefixes=seen)
    ... except ValueError as e:
    ...     print(str(e).splitlines()[1:4])
    ['Node: Param', '  bias: 0', '  bias: 1']
    """
    seen = {} if node_prefixes is None else node_prefixes
    variables: dict[int, Variable] = {}
    map_prefix = getattr(prefix, "map_prefix", None)
    for path, value in iter_graph(node, graph=True):
        if isinstance(value, GraphNode):
            try:
                value.check_valid_context("")
            except TraceContextError:
                raise TraceContextError(
                    f"Trying to extract graph node from different trace level, got a "
                    f"{type(value).__name__} at {_where(path)} (captured by closure inside a "
                    "transform?); pass it as an argument of the transform instead.") from None
        if isinstance(value, Variable):
            if not can_update(value):
                raise NNXTransformError(
                    _where(path), f"Cannot extract graph node from different trace level, got "
                    f"a {type(value).__name__} created under another JAX trace",
                    "Pass it as an argument of the transform instead of capturing it.")
            p = map_prefix(path, value) if callable(map_prefix) else prefix
            variables[id(value)] = value
            seen.setdefault(id(value), []).append((path, p))
    err = aliasing_error(seen, variables)
    if err is not None:
        raise err


def to_tree(tree: tp.Any, /, *, prefix: tp.Any = _MISSING,
            split_fn: tp.Callable[[SplitContext, KeyPath, tp.Any, tp.Any], tp.Any]
            = default_split_fn,
            map_non_graph_nodes: bool = False, ctxtag: tp.Hashable | None = None,
            check_aliasing: bool = True) -> tp.Any:
    """``tree`` with each graph node and Variable replaced by ``split_fn(ctx, path, prefix,
    node)`` (by default a :class:`NodeStates`), all split in one
    :func:`~flaxen.nnx.split_context` (of ``ctxtag``).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> pure = nnx.to_tree({'m': m, 'x': jnp.ones(2)})
    >>> sorted(pure['m'].state), pure['x'].shape
    (['bias', 'kernel'], (2,))
    """
    if prefix is _MISSING or prefix is None:
        with _contexts.split_context(ctxtag) as ctx:
            return jax.tree_util.tree_map(
                lambda x: split_fn(ctx, (), prefix, x)
                if map_non_graph_nodes or _is_node(x) else x,
                tree, is_leaf=_is_node)
    prefixes = broadcast_prefix(prefix, tree, prefix_is_leaf=lambda x: x is None or _is_node(x),
                                tree_is_leaf=_is_node)
    treedef: tp.Any  # jax's PyTreeDef (unresolved by mypy)
    keyed, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_node)
    seen: dict[int, list] = {}
    out = []
    with _contexts.split_context(ctxtag) as ctx:
        for (path, leaf), p in zip(keyed, prefixes):
            if _is_node(leaf):
                if check_aliasing:
                    check_consistent_aliasing(leaf, p, node_prefixes=seen)
                leaf = split_fn(ctx, path, p, leaf)
            elif map_non_graph_nodes:
                leaf = split_fn(ctx, path, p, leaf)
            out.append(leaf)
    return treedef.unflatten(out)


def from_tree(tree: tp.Any, /, *, prefix: tp.Any = _MISSING,
              merge_fn: tp.Callable[[MergeContext, KeyPath, tp.Any, tp.Any], tp.Any]
              = merge_tree_node,
              is_node_leaf: tp.Callable[[tp.Any], bool] = is_tree_node,
              is_leaf: tp.Callable[[tp.Any], bool] = is_tree_node,
              map_non_graph_nodes: bool = False, is_inner: bool | None = None,
              ctxtag: tp.Hashable | None = None) -> tp.Any:
    """The inverse of :func:`to_tree`: each :class:`NodeStates` becomes its object again, all
    merged in one :func:`~flaxen.nnx.merge_context` (of ``ctxtag``; ``is_inner`` says which
    side of the transform this is).

    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> (m2,) = nnx.from_tree(nnx.to_tree((m,)))
    >>> type(m2).__name__, m2 is m
    ('Linear', False)
    """
    def wanted(x: tp.Any) -> bool:
        return map_non_graph_nodes or is_node_leaf(x) or isinstance(x, Variable)

    if prefix is _MISSING or prefix is None:
        with _contexts.merge_context(ctxtag, is_inner) as ctx:
            return jax.tree_util.tree_map(
                lambda x: merge_fn(ctx, (), prefix, x) if wanted(x) else x, tree,
                is_leaf=is_leaf)
    prefixes = broadcast_prefix(prefix, tree, prefix_is_leaf=lambda x: x is None or is_leaf(x),
                                tree_is_leaf=is_leaf)
    treedef: tp.Any
    keyed, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    out = []
    with _contexts.merge_context(ctxtag, is_inner) as ctx:
        for (path, leaf), p in zip(keyed, prefixes):
            out.append(merge_fn(ctx, path, p, leaf) if wanted(leaf) else leaf)
    return treedef.unflatten(out)


def clear_non_graph_nodes(tree: tp.Any) -> tp.Any:
    """``tree`` with every leaf that is not a graph node or Variable replaced by None.

    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> out = nnx.extract.clear_non_graph_nodes((m, 1.5))
    >>> out[0] is m, out[1]
    (True, None)
    """
    return jax.tree_util.tree_map(lambda x: x if _is_node(x) else None, tree,
                                  is_leaf=_is_node)
