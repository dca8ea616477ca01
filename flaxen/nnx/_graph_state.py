"""``GraphState``: a State bundled with its GraphDef (re-exported by :mod:`flaxen.nnx.graphlib`).

:func:`flaxen.nnx.unpack` returns GraphStates, so ``nnx.merge(*graph_states)`` needs no
separate graphdef; :func:`_merge_graph_states` checks such a call (GraphStates only, all of
one GraphDef). A GraphState reads and writes through to its State and is a pytree with the
same paths, the GraphDef riding along as static data.

>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> gs = nnx.unpack(model)
>>> sorted(gs), type(gs).__name__
(['bias', 'kernel'], 'GraphState')
>>> nnx.merge(gs).kernel is model.kernel
True
"""

from __future__ import annotations

import dataclasses
import typing as tp
from collections.abc import MutableMapping

import jax

from flaxen.nnx import reprlib
from flaxen.nnx.statelib import State

__all__ = ["GraphState"]


A = tp.TypeVar("A")


@dataclasses.dataclass(init=False, repr=False, eq=False)
class GraphState(MutableMapping, reprlib.Representable, tp.Generic[A]):
    """A State bundled with its GraphDef (what :func:`unpack` returns): ``nnx.merge`` takes
    GraphStates alone, and it is a pytree with the same paths as its State. Attribute writes
    go to the State (``_graphdef`` and ``_state`` are its two fields)."""

    __slots__ = ("_graphdef", "_state")
    _graphdef: tp.Any
    _state: State

    def __init__(self, _graphdef: tp.Any, _state: State) -> None:
        object.__setattr__(self, "_graphdef", _graphdef)
        object.__setattr__(self, "_state", _state)

    def __getitem__(self, key: tp.Any) -> tp.Any:
        return self._state[key]

    def __setitem__(self, key: tp.Any, value: tp.Any) -> None:
        self._state[key] = value

    def __delitem__(self, key: tp.Any) -> None:
        del self._state[key]

    def __iter__(self) -> tp.Iterator[tp.Any]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __contains__(self, key: object) -> bool:
        return key in self._state

    def __getattr__(self, name: str) -> tp.Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._state, name)

    def __setattr__(self, name: str, value: tp.Any) -> None:
        setattr(self._state, name, value)

    def __nnx_repr__(self) -> tp.Iterator[reprlib.Object | reprlib.Attr]:
        # Flax 0.12.8 prints both fields under their own names
        yield reprlib.Object(type=type(self))
        yield reprlib.Attr("_graphdef", self._graphdef)
        yield reprlib.Attr("_state", self._state)

    def __repr__(self) -> str:
        return reprlib.Representable.__repr__(self)


def _gs_flatten_with_keys(gs: GraphState) -> tuple[list, tuple]:
    s = gs._state
    kids, treedef = jax.tree_util.tree_flatten_with_path(s, is_leaf=lambda y: y is not s)
    return [(kp[0], v) for kp, v in kids], (gs._graphdef, treedef)


def _gs_flatten(gs: GraphState) -> tuple[list, tuple]:
    s = gs._state
    kids, treedef = jax.tree_util.tree_flatten(s, is_leaf=lambda y: y is not s)
    return kids, (gs._graphdef, treedef)


def _gs_unflatten(aux: tuple, children: tp.Iterable[tp.Any]) -> GraphState:
    return GraphState(aux[0], aux[1].unflatten(list(children)))


jax.tree_util.register_pytree_with_keys(GraphState, _gs_flatten_with_keys, _gs_unflatten,
                                        flatten_func=_gs_flatten)


def _merge_graph_states(states: tuple) -> tuple[tp.Any, tuple]:
    gd = states[0]._graphdef
    plain = []
    for s in states:
        if not isinstance(s, GraphState):
            raise ValueError(
                f"nnx.merge: Expected GraphState objects after a GraphState, got a "
                f"{type(s).__name__}. Pass only what nnx.unpack returned, or use "
                "nnx.merge(graphdef, *states).")
        if s._graphdef != gd:
            raise ValueError(
                "nnx.merge: the GraphDef must be the same for every GraphState; these come "
                "from different objects. Merge the GraphStates of one nnx.unpack call.")
        plain.append(s._state)
    return gd, tuple(plain)
