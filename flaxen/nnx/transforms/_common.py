"""The checks and argument helpers every today's NNX transform shares: bound methods,
prefix arguments, modes, keyword arguments placed by position, loop-state numbers.

A transform's prefix arguments (``in_axes``, ``in_shardings``, ``argnums`` with
``DiffState``...) may hold :class:`PrefixMapping` objects only in graph mode with graph
updates, and never graph nodes or Variables; a bound method of a graph node is refused
because its ``self`` would be captured instead of lifted.

>>> from flaxen import nnx
>>> resolve_bound(len, "jit") is len
True
"""

from __future__ import annotations

import abc
import functools
import inspect
import typing as tp

import jax
import jax.numpy as jnp

from flaxen.errors import NNXTransformError
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.variablelib import Variable

__all__ = ["PrefixMapping", "arrays_for_scalars", "check_prefix", "resolve_bound",
           "resolve_kwargs", "resolve_modes"]

_PY_SCALARS = (bool, int, float, complex)


class PrefixMapping(abc.ABC):
    """Base of the objects that map Variables (by filter) to a per-Variable prefix value:
    ``StateSharding`` (shardings), ``DiffState`` (what to differentiate), ``StateAxes``.
    Graph mode with graph updates only. A subclass implements :meth:`map_prefix`.

    >>> class Everything(PrefixMapping):
    ...     def map_prefix(self, path, variable, /):
    ...         return 0
    >>> Everything().map_prefix(('w',), None)
    0
    """

    @abc.abstractmethod
    def map_prefix(self, path: tuple, variable: tp.Any, /) -> tp.Any:
        """The prefix value (an axis, a sharding, whether to differentiate...) for the
        Variable ``variable`` found at ``path``."""


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


def resolve_kwargs(f: tp.Callable, args: tuple, kwargs: dict) -> tuple:
    """``args`` with the keyword arguments moved to their positions (defaults filled in), so
    a transform's per-argument axes cover them; e.g. ``Module(rngs=...)`` of a transformed
    ``__init__``. Keyword-only parameters cannot be placed: a TypeError says so."""
    if not kwargs:
        return args
    target = f
    if isinstance(target, functools.partial):  # a partial's signature is opaque
        def target(*a: tp.Any, **k: tp.Any) -> None:  # noqa: ARG001
            return None
    bound = inspect.signature(target).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(
            f"keyword arguments could not be resolved to positions: {sorted(bound.kwargs)} "
            "(keyword-only parameters, or a functools.partial). Pass them positionally.")
    return tuple(bound.args)


def arrays_for_scalars(tree: tp.Any) -> tp.Any:
    """Python numbers in ``tree`` (outside graph nodes) as JAX arrays, so they can be loop
    state (the graph walk would otherwise keep them as static constants)."""

    def conv(x: tp.Any) -> tp.Any:
        if type(x) in _PY_SCALARS:
            return jnp.asarray(x)
        return x

    return jax.tree_util.tree_map(
        conv, tree, is_leaf=lambda x: isinstance(x, (GraphNode, Variable)))
