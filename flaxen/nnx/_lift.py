"""Shared plumbing for NNX transforms: graph nodes in, pure arrays through JAX, updates out.

:func:`prepare` finds the graph nodes among a call's arguments (anywhere inside the pytree
of ``(args, kwargs)``), walks them (cached) and returns the Variables' values. Inside the
JAX transform :func:`rebuild` makes fresh copies of the nodes from those values and puts
them back into the arguments; after the user function ran, :func:`collect` walks the copies
(plus any graph nodes in the output) recording which original object each copy stands for.
Outside, :func:`write_back` brings the original objects up to date, in place, and builds
new objects for nodes created inside.
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.nnx import _graph_engine as eng
from flaxen.nnx.graph import GraphNode, _intern
from flaxen.nnx.variables import Variable

_flatten = jax.tree_util.tree_flatten


def is_node(x: tp.Any) -> bool:
    return isinstance(x, (GraphNode, Variable))


class Prepared:
    """A call's arguments split into graph nodes (walked) and everything else."""

    __slots__ = ("treedef", "leaves", "node_pos", "nodes", "flat")

    def __init__(self, args: tuple, kwargs: dict) -> None:
        leaves, self.treedef = _flatten((args, kwargs))
        node_pos = []
        nodes = []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, (GraphNode, Variable)):
                node_pos.append(i)
                nodes.append(leaf)
                leaves[i] = None
        self.leaves = leaves
        self.node_pos = tuple(node_pos)
        self.nodes = tuple(nodes)
        self.flat = eng.flatten_cached(self.nodes, _intern) if nodes else None

    def values(self) -> list:
        if self.flat is None:
            return []
        return [v.raw_value for v in self.flat.variables]


def rebuild(defs: tuple, values: tp.Sequence[tp.Any], treedef: tp.Any, leaves: list,
            node_pos: tuple) -> tuple[tuple, dict, list, dict[int, int]]:
    """Fresh node copies from ``values`` placed into the arguments.

    Returns ``(args, kwargs, copies, outer_map)`` where ``outer_map`` maps each copy's id to
    the index of the original object in the walk.
    """
    refs: list = []
    copies = eng.unflatten(defs, values, refs) if defs else []
    leaves = list(leaves)
    for p, n in zip(node_pos, copies):
        leaves[p] = n
    args, kwargs = treedef.unflatten(leaves)
    outer_map = {id(obj): i for i, obj in enumerate(refs)}
    return args, kwargs, copies, outer_map


class Collected:
    """What came out of a traced call: new definitions, Variable values, output leaves."""

    __slots__ = ("defs", "values", "out_treedef", "out_leaves", "out_node_pos", "n_inputs",
                 "variables")

    def __init__(self, copies: list, out: tp.Any, outer_map: dict[int, int]) -> None:
        out_leaves, self.out_treedef = _flatten(out)
        out_nodes = []
        out_node_pos = []
        for i, leaf in enumerate(out_leaves):
            if isinstance(leaf, (GraphNode, Variable)):
                out_nodes.append(leaf)
                out_node_pos.append(i)
                out_leaves[i] = None
        self.out_leaves = out_leaves
        self.out_node_pos = tuple(out_node_pos)
        self.n_inputs = len(copies)
        roots = list(copies) + out_nodes
        if roots:
            fg = eng.flatten(roots, outer_map)
            self.defs = fg.defs
            self.variables = fg.variables
            self.values = [v.raw_value for v in fg.variables]
        else:
            self.defs = ()
            self.variables = []
            self.values = []


def write_back(defs: tuple, values: tp.Sequence[tp.Any], prepared: Prepared) -> list:
    """Updates the original nodes from ``defs``/``values``; returns all roots (in, then out)."""
    outer_refs = prepared.flat.refs if prepared.flat is not None else []
    return eng.apply_update(defs, values, outer_refs)


def assemble_output(out_treedef: tp.Any, out_leaves: list, out_node_pos: tuple,
                    out_nodes: tp.Sequence[tp.Any]) -> tp.Any:
    leaves = list(out_leaves)
    for p, n in zip(out_node_pos, out_nodes):
        leaves[p] = n
    return out_treedef.unflatten(leaves)


def unchanged(prepared: Prepared, defs: tuple) -> bool:
    """True when ``defs`` describe exactly the input graph (same structure, same objects)."""
    if prepared.flat is None:
        return not defs
    gd = prepared.flat.defs
    if len(defs) != len(gd):
        return False
    if eng.strip_outer(defs) != gd:
        return False
    in_idx = [d for d in _var_indices(gd)]
    return eng.var_outer_indices(defs) == in_idx


def _var_indices(defs: tuple) -> list[int]:
    out: list[int] = []

    def walk(d: tuple) -> None:
        kind = d[0]
        if kind == "var":
            out.append(d[2])
        elif kind == "node":
            for _, s in d[3]:
                walk(s)
        elif kind == "tree":
            for s in d[2]:
                walk(s)

    for d in defs:
        walk(d)
    return out
