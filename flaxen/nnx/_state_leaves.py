"""Between a walk's flat leaves and the States the graph API takes and returns.

A walk of an object graph (:mod:`flaxen.nnx._graph_engine`, or tree mode's
:mod:`flaxen.nnx._tree_mode`) gives a definition and two aligned lists: each leaf's path and
the leaf (a Variable, or a bare array). :mod:`flaxen.nnx.graphlib`'s ``split``, ``state`` and
``pop`` turn those into States here: nested by path, and sorted by filters, each leaf to the
first filter it matches. Its ``merge``, ``update`` and ``unflatten`` come back the other way:
the one leaf of the States given when the definition's root is itself a leaf, and the leaves
``unflatten`` takes from a State, a FlatState or a list, counted against the definition.
``graphlib`` re-exports these helpers (the split/merge contexts and tests reach them there).
"""

from __future__ import annotations

import typing as tp
from collections.abc import Mapping

import jax

from flaxen.nnx import _graph_ops as _ops
from flaxen.nnx import _graphdef, filterlib
from flaxen.nnx._graph_walk import _path_str
from flaxen.nnx._graphdef import VariableDef
from flaxen.nnx._tree_mode import TreeGraphDef, TreeNodeDef
from flaxen.nnx._tree_mode import flat_leaves as _flat_leaves
from flaxen.nnx._tree_mode import flatten_mapping as _flatten_mapping
from flaxen.nnx.statelib import FlatState, State
from flaxen.nnx.variablelib import Variable

# -- leaves to States ----------------------------------------------------------------------

def _nest(paths: tp.Sequence[tuple], leaves: tp.Sequence[tp.Any]) -> State:
    return _ops._nest(list(zip(paths, leaves)))


def _root_is_leaf(gd: tp.Any) -> bool:
    d = gd.nodes[0]
    if isinstance(d, TreeNodeDef):
        return jax.tree_util.treedef_is_leaf(d.treedef)
    return type(d) is VariableDef


def _partition(paths: list, leaves: list, filters: tuple, exhaustive: bool) -> list[list]:
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in preds]
    for p, v in zip(paths, leaves):
        for i, pred in enumerate(preds):
            if pred(p, v):
                buckets[i].append((p, v))
                break
        else:
            if exhaustive:
                raise ValueError(
                    f"Non-exhaustive filters, got a non-empty remainder: the "
                    f"{type(v).__name__} at {_path_str(p)} matches none of the filters "
                    f"{list(filters)!r}. Add `...` as the last filter to collect the rest.")
    return buckets


def _states(gd: tp.Any, paths: list, leaves: list, filters: tuple, exhaustive: bool
            ) -> tuple:
    if _root_is_leaf(gd) and leaves:
        if not filters:
            return (leaves[0],)
        buckets = _partition(paths, leaves, filters, exhaustive)
        return tuple(b[0][1] if b else State({}) for b in buckets)
    if not filters:
        return (_nest(paths, leaves),)
    buckets = _partition(paths, leaves, filters, exhaustive)
    return tuple(_nest([p for p, _ in b], [v for _, v in b]) for b in buckets)


# -- States to leaves ----------------------------------------------------------------------

def _copy_vars(tree: tp.Any) -> tp.Any:
    return jax.tree_util.tree_map(lambda v: v.copy() if isinstance(v, Variable) else v, tree,
                                  is_leaf=lambda x: isinstance(x, Variable))


def _single_leaf(states: tuple) -> tp.Any:
    states = tuple(s[0][1] if isinstance(s, FlatState) and len(s) == 1 else s for s in states)
    for s in reversed(states):
        if not (isinstance(s, State) and len(s) == 0):
            return s
    return states[0]


def _unflatten_leaves(graphdef: tp.Any, state: tp.Any) -> list:
    """The leaves ``unflatten`` builds ``graphdef`` around, from a nested State, a FlatState
    or a list of leaves (or of ``(path, leaf)`` pairs); their count must match."""
    if isinstance(state, Mapping):
        counted: dict = {}
        _flatten_mapping(state, (), counted)
        expected = (len(graphdef.nodes[0].paths) if isinstance(graphdef, TreeGraphDef)
                    else len(_graphdef.var_defs(graphdef.defs[:1])))
        if len(counted) != expected:
            raise ValueError(
                f"Incorrect number of leaves: the graph definition has {expected} leaves, "
                f"the state {len(counted)}. Pass the state that nnx.split returned with it.")
    if isinstance(state, Mapping) and isinstance(graphdef, _graphdef.GraphDef):
        leaves = _ops._leaves_from_states(graphdef.defs[:1], (state,), "unflatten")
        state = leaves
    elif isinstance(state, Mapping):
        state = _flat_leaves(graphdef.nodes[0].paths, (state,), "unflatten")
    if isinstance(graphdef, TreeGraphDef):
        n = len(graphdef.nodes[0].paths)
    else:
        n = len(_graphdef.var_defs(graphdef.defs))
    leaves = [v for _, v in state] if isinstance(state, FlatState) or (
        state and isinstance(state[0], tuple)) else list(state)
    if len(leaves) != n:
        raise ValueError(
            f"Incorrect number of leaves: the graph definition has {n} leaves, the state "
            f"{len(leaves)}. Pass the state that nnx.graphlib.flatten returned with it.")
    return leaves
