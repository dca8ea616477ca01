"""The checks every today's NNX transform shares: bound methods, prefix arguments, modes.

A transform's prefix arguments (``in_axes``, ``in_shardings``, ``argnums`` with
``DiffState``...) may hold :class:`PrefixMapping` objects only in graph mode with graph
updates, and never graph nodes or Variables; a bound method of a graph node is refused
because its ``self`` would be captured instead of lifted.

>>> from flaxen import nnx
>>> resolve_bound(len, "jit") is len
True
"""

from __future__ import annotations

import functools
import inspect
import typing as tp

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.variablelib import Variable

__all__ = ["PrefixMapping", "check_prefix", "resolve_bound", "resolve_modes"]


class PrefixMapping:
    """Base of the objects that map Variables (by filter) to a per-Variable prefix value:
    ``StateSharding`` (shardings), ``DiffState`` (what to differentiate), ``StateAxes``.
    Graph mode with graph updates only."""


def resolve_bound(fn: tp.Any, transform: str) -> tp.Any:
    """Refuses a bound method of a graph node (its ``self`` would be captured, not lifted)."""
    inner = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    if inspect.ismethod(inner) and isinstance(inner.__self__, (GraphNode, Variable)):
        raise NNXTransformError(
            "", f"nnx.{transform} does not support bound methods (got "
            f"{type(inner.__self__).__name__}.{inner.__name__} bound to an instance): the "
            "instance would be captured by closure instead of being lifted",
            f"Use the decorator form @nnx.{transform} on the method, or call "
            f"nnx.{transform}(MyClass.method)(instance, ...) with the unbound method.")
    return fn


def check_prefix(prefix: tp.Any, prefix_name: str, fn_name: str, graph: bool,
                 graph_updates: bool) -> None:
    """Refuses graph nodes / Variables as prefixes, and prefix mappings outside graph mode."""
    leaves = jax.tree_util.tree_leaves_with_path(
        prefix, is_leaf=lambda x: isinstance(x, (GraphNode, Variable, PrefixMapping)))
    for path, leaf in leaves:
        where = jax.tree_util.keystr(path) or "<root>"
        if isinstance(leaf, Variable):
            raise NNXTransformError(
                "", f"Found Variable of type {type(leaf).__name__} at path {where} in "
                f"`{prefix_name}` for nnx.{fn_name}: Variables prefixes are not supported",
                "Pass a prefix for the whole Variable instead of a Variable holding one.")
        if isinstance(leaf, PrefixMapping) and not (graph and graph_updates):
            raise NNXTransformError(
                "", f"`{prefix_name}` cannot contain `{type(leaf).__name__}` objects when "
                "`graph=False` or `graph_updates=False`",
                f"Remove them, or pass graph=True, graph_updates=True to nnx.{fn_name} "
                f"(or use nnx.compat.{fn_name}).")
        if isinstance(leaf, GraphNode) and graph:
            raise NNXTransformError(
                "", f"Found graph node of type {type(leaf).__name__} at path {where} in "
                f"`{prefix_name}` for nnx.{fn_name}. Graph nodes are not allowed as prefixes "
                "when graph=True",
                f"Remove it, or use tree mode: nnx.{fn_name}(..., graph=False).")
