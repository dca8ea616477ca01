"""Graph operations of Flax 0.8.3's NNX (``flax.experimental.nnx.graph``).

``split(node)`` returns a :class:`GraphDef` and a :class:`~flaxen.nnx.State` of
``VariableState`` snapshots; ``merge(graphdef, state)`` builds an equal, independent object
graph (shared submodules and Variables stay shared, cycles are handled). The operations are
the engine's copying ones (:mod:`flaxen.nnx._graph_ops`) with :class:`VariableState` as their
snapshot class; this face adds 0.8.3's
:class:`UpdateContext` and :class:`Static`, and its ``split``, ``state`` and ``pop`` read string
filters by 0.8.3's rule (:mod:`flaxen.experimental.nnx.filterlib`).

>>> from flaxen.experimental import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> graphdef, state = nnx.split(model)
>>> copy = nnx.merge(graphdef, state)
>>> copy is model, bool((copy.kernel.value == model.kernel.value).all())
(False, True)
>>> params, rest = nnx.split(model, nnx.Param, ...)[1:]
>>> sorted(dict(params.flat_state()))
[('bias',), ('kernel',)]
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.errors import NotAGraphNodeError
from flaxen.experimental.nnx._variable_state import VariableState
from flaxen.experimental.nnx.filterlib import convert_all
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _graph_ops, filterlib
from flaxen.nnx._graph_ops import (
    GraphDef,
    GraphNode,
    PytreeType,
    RefMap,
    _flatten_pytree,  # noqa: F401 - 0.8.3's private seam, reached as nnx.graph._flatten_pytree
    _leaves_from_states,
    _states_from_flat,
    _unflatten_pytree,  # noqa: F401
    compose_mapping,
    compose_mapping_reversed,
    flatten_node,
    graph_update_static,
    graphdef,
    is_node,
    iter_graph,
    unflatten,
    update,
)

__all__ = [
    "GraphDef", "GraphNode", "PytreeType", "RefMap", "Static", "UpdateContext", "clone",
    "compose_mapping", "compose_mapping_reversed", "flatten", "graph_update_static",
    "graphdef", "is_node", "iter_graph", "merge", "pop", "split", "state", "unflatten",
    "update",
]

Node = tp.TypeVar("Node")
eng = eng  # the engine, for code and tests that reach it through this module


def split(node: Node, *filters: filterlib.Filter) -> tuple:
    """``(graphdef, state)`` or, with filters, ``(graphdef, state_1, ..., state_n)``; every
    Variable must match one filter (end with ``...`` for the rest)."""
    return _graph_ops.split(node, *convert_all(filters), snapshot=VariableState)


def state(node: Node, *filters: filterlib.Filter) -> tp.Any:
    """The node's State, or one State per filter (Variables matching none are left out)."""
    return _graph_ops.state(node, *convert_all(filters), snapshot=VariableState)


def pop(node: Node, *filters: filterlib.Filter) -> tp.Any:
    """Removes the Variables matching ``filters`` from ``node`` and returns them as States."""
    return _graph_ops.pop(node, *convert_all(filters), snapshot=VariableState)


def merge(graphdef: GraphDef[Node], state: tp.Mapping, /, *states: tp.Mapping) -> Node:
    """A fresh object graph from ``graphdef`` and the union of the states."""
    return _graph_ops.merge(graphdef, state, *states, snapshot=VariableState)


def flatten(node: Node) -> tuple[GraphDef[Node], tp.Any, RefMap]:
    """``(graphdef, state, refmap)``: :func:`split` plus the map from each shared object
    (graph node or Variable) to its index in the definition."""
    return _graph_ops.flatten(node, snapshot=VariableState)


def clone(node: Node) -> Node:
    """A deep, independent copy (shared references inside stay shared)."""
    return _graph_ops.clone(node)


class Static(tp.Generic[Node]):
    """Wraps a hashable value so it passes through JAX transforms as static metadata."""

    __slots__ = ("value",)

    def __init__(self, value: Node) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Static) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


jax.tree_util.register_pytree_node(Static, lambda s: ((), s.value), lambda v, _: Static(v))


class UpdateContext:
    """Carries object identities from a split to the matching merge and update.

    ``ctx.split(outer)`` -> ``ctx.merge(graphdef, state)`` (a copy to work on) ->
    ``ctx.split(copy)`` -> ``ctx.update(graphdef, state)`` writes the copy's changes (values
    and structure) back into the outer objects. Also usable as a context manager.

    >>> from flaxen.experimental import nnx  # the 0.8.3 face (today's takes a tag)
    >>> m = nnx.Dict(a=nnx.Param(1))
    >>> with nnx.UpdateContext() as ctx:
    ...     inner = ctx.merge(*ctx.split(m))
    ...     inner.b = nnx.Param(2)
    ...     _ = ctx.update(*ctx.split(inner))
    >>> m.b.value
    2
    """

    def __init__(self) -> None:
        self.outer_refs: list | None = None  # index -> outer object, of the first split
        self.inner_of: dict[int, int] | None = None  # id(inner object) -> outer index
        self.last_refs: list | None = None  # index -> object, of the latest split

    def __enter__(self) -> UpdateContext:
        return self

    def __exit__(self, *exc: tp.Any) -> None:
        self.outer_refs = self.inner_of = self.last_refs = None

    def split(self, node: Node, *filters: filterlib.Filter) -> tuple:
        fg = flatten_node(node)
        if self.outer_refs is None:
            self.outer_refs = list(fg.refs)
        self.last_refs = list(fg.refs)
        return (fg.graphdef, *_states_from_flat(fg, convert_all(filters),
                                                snapshot=VariableState))

    def merge(self, graphdef: GraphDef[Node], state: tp.Mapping, *states: tp.Mapping) -> Node:
        leaves = _leaves_from_states(graphdef.defs, (state, *states), "merge")
        roots, built = eng.unflatten(graphdef.defs, leaves)
        self.inner_of = {id(obj): i for i, obj in built.items()}
        return roots[0]

    def update(self, graphdef: GraphDef[Node], state: tp.Mapping, *states: tp.Mapping
               ) -> Node:
        if self.outer_refs is None or self.inner_of is None or self.last_refs is None:
            raise NotAGraphNodeError(
                "", "UpdateContext.update needs a split of the outer node, a merge and a "
                "split of the copy first", "Call ctx.split, ctx.merge, ctx.split, ctx.update.")
        idxmap = {}
        for i, obj in enumerate(self.last_refs):
            outer = self.inner_of.get(id(obj))
            if outer is not None:
                idxmap[i] = self.outer_refs[outer]
        leaves = _leaves_from_states(graphdef.defs, (state, *states), "update")
        return eng.unflatten(graphdef.defs, leaves, idxmap)[0][0]

