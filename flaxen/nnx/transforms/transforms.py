"""Today's general transforms (``eval_shape``, ``checkify``, ``make_jaxpr``) and the checks
every today's transform shares: modes, bound methods, prefix arguments.

Each transform takes ``graph=`` / ``graph_updates=`` (``None``: the defaults of
``nnx.set_graph_mode`` / ``nnx.set_graph_updates``). ``graph=True, graph_updates=True`` is
the graph mode of :mod:`flaxen.nnx._lift` (structure changes written back); the other
combinations write back Variable values only (:mod:`._functional`).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
>>> abstract.kernel.value.shape
(2, 3)
"""

from __future__ import annotations

import functools
import inspect
import typing as tp

import jax
from jax.experimental import checkify as _checkify

from flaxen import traceback_util
from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.transforms import _functional
from flaxen.nnx.variables import Variable

__all__ = ["PrefixMapping", "check_prefix", "checkify", "eval_shape", "make_jaxpr",
           "resolve_bound", "resolve_modes"]


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


# -- eval_shape -------------------------------------------------------------------------------

@traceback_util.api_boundary
def eval_shape(f: tp.Callable[..., tp.Any], *args: tp.Any, graph: bool | None = None,
               graph_updates: bool | None = None, **kwargs: tp.Any) -> tp.Any:
    """Like ``jax.eval_shape``; graph nodes in the output hold ``ShapeDtypeStruct`` values.

    The inputs are never updated.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> nnx.eval_shape(lambda m, x: m(x), m, jnp.ones((4, 2))).shape
    (4, 3)
    """
    resolve_bound(f, "eval_shape")
    graph, graph_updates = resolve_modes(graph, graph_updates)
    lift = _lift.Lift(args, kwargs)
    if graph and graph_updates:
        inner = lift.pure(f)

        def pure_values(values: list, leaves: list) -> tuple:
            out = inner(values, leaves)
            return _functional.unref(out, ())[0] if _functional.has_refs(*out) else out

        values, out_leaves = jax.eval_shape(pure_values, lift.values, lift.leaves)
        return lift.finish(lift.out, values, out_leaves,  # type: ignore[arg-type]  # traced
                           update_inputs=False)
    _functional.check_no_shared(lift.static, "eval_shape")
    box: list = []

    def pure(values: list, leaves: list) -> tuple:
        new, out_values, out_leaves, fo = _functional.run(
            lift.static, f, values, leaves, "eval_shape")
        box.append(fo)
        out = (out_values, out_leaves)
        return _functional.unref(out, ())[0] if _functional.has_refs(*out) else out

    out_values, out_leaves = jax.eval_shape(pure, lift.values, lift.leaves)
    return _functional.build_output(box[0], out_values, out_leaves)


# -- checkify ---------------------------------------------------------------------------------

def checkify(f: tp.Callable[..., tp.Any], errors: frozenset = _checkify.user_checks, *,
             graph: bool | None = None, graph_updates: bool | None = None
             ) -> tp.Callable[..., tuple[tp.Any, tp.Any]]:
    """Lifted ``jax.experimental.checkify.checkify``: returns ``(error, out)`` and writes
    the function's Variable updates back.

    >>> import jax.numpy as jnp
    >>> from jax.experimental import checkify as jc
    >>> from flaxen import nnx
    >>> err, out = nnx.checkify(lambda x: jnp.log(x), errors=jc.float_checks)(jnp.array(-1.))
    >>> err.get() is not None
    True
    """
    resolve_bound(f, "checkify")

    @traceback_util.api_boundary
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tuple[tp.Any, tp.Any]:
        g, gu = resolve_modes(graph, graph_updates)
        lift = _lift.Lift(args, kwargs)
        if g and gu:
            err, (values, out_leaves) = _checkify.checkify(lift.pure(f), errors=errors)(
                lift.values, lift.leaves)
            return err, lift.finish(lift.out, values, out_leaves)  # type: ignore[arg-type]  # traced
        if not g:
            _functional.check_no_shared(lift.static, "checkify")
        box: list = []

        def pure(values: list, leaves: list) -> tuple:
            new, out_values, out_leaves, fo = _functional.run(
                lift.static, f, values, leaves, "checkify")
            box.append(fo)
            return new, out_values, out_leaves

        err, (new, out_values, out_leaves) = _checkify.checkify(pure, errors=errors)(
            lift.values, lift.leaves)
        return err, _functional.finish(lift, box[0], new, out_values, out_leaves)

    return wrapper


# -- make_jaxpr -------------------------------------------------------------------------------

def make_jaxpr(f: tp.Callable[..., tp.Any], *, graph: bool | None = None,
               graph_updates: bool | None = None, **jax_kwargs: tp.Any
               ) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.make_jaxpr`` (functional modes only): the inputs are not updated.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> jaxpr = nnx.make_jaxpr(lambda m, x: m(x), graph_updates=False)(m, jnp.ones((1, 2)))
    >>> 'dot_general' in str(jaxpr)
    True
    """
    resolve_bound(f, "make_jaxpr")

    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        g, gu = resolve_modes(graph, graph_updates)
        if g and gu:
            raise NNXTransformError(
                "", "nnx.make_jaxpr does not support graph_updates=True.",
                "Pass graph_updates=False (Variable updates are traced, not applied).")
        lift = _lift.Lift(args, kwargs)
        if not g:
            _functional.check_no_shared(lift.static, "make_jaxpr")

        def pure(values: list, leaves: list) -> tuple:
            new, out_values, out_leaves, _ = _functional.run(
                lift.static, f, values, leaves, "make_jaxpr")
            return new, out_values, out_leaves

        return jax.make_jaxpr(pure, **jax_kwargs)(lift.values, lift.leaves)

    return wrapper
