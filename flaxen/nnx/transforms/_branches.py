"""Today's ``nnx.cond`` and ``nnx.switch``: ``jax.lax.cond`` / ``jax.lax.switch`` with graph
nodes among the operands. Every branch gets fresh copies of the operands; the Variable
values each branch leaves behind are the branch's outputs and are written back (a Variable
a branch does not touch passes through unchanged, so a broadcast Variable stays unbatched
under ``vmap``). Built on :func:`._mapped.mapped_call`.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> x = nnx.Variable(jnp.array(3))
>>> def double(x): x[...] = x * 2
>>> def negate(x): x[...] = -x
>>> nnx.cond(x[...] > 0, double, negate, x)
>>> int(x[...])
6
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp

from flaxen import traceback_util
from flaxen.errors import NNXStructureChangeError
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.transforms._mapped import mapped_call

__all__ = ["cond", "switch"]


def _branching(kind: str, selector: tp.Any, branches: tp.Sequence[tp.Callable],
               operands: tuple, graph: bool | None, graph_updates: bool | None) -> tp.Any:
    g, gu = resolve_modes(graph, graph_updates)
    current = [0]

    def dispatch(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return branches[current[0]](*args, **kwargs)

    def run(pure: tp.Callable, ins: list, late: list) -> tp.Callable:
        def branch(i: int) -> tp.Callable:
            def call(values: list, leaves: list) -> tp.Any:
                current[0] = i
                return pure(values, leaves)
            return call

        fns = [branch(i) for i in range(len(branches))]

        def go(values: list, leaves: list) -> tp.Any:
            try:
                if kind == "cond":
                    return jax.lax.cond(selector, fns[0], fns[1], values, leaves)
                return jax.lax.switch(selector, fns, values, leaves)
            except TypeError as e:
                if "same pytree structure" not in str(e):
                    raise
                raise NNXStructureChangeError(
                    "", f"nnx.{kind}: the branches left the graph nodes (or returned outputs) "
                    "with different structures", "Make every branch create, remove and return "
                    "the same attributes and Variables; change only values.") from e

        return go

    return mapped_call(dispatch, operands, {}, fn_name=kind, in_prefix=None, kw_prefix=None,
                       out_prefix=None, graph=g, graph_updates=gu, transform=run)


@traceback_util.api_boundary
def cond(pred: tp.Any, true_fun: tp.Callable, false_fun: tp.Callable, *operands: tp.Any,
         graph: bool | None = None, graph_updates: bool | None = None) -> tp.Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, traced as a
    ``jax.lax.cond`` (see the module docstring).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> nnx.cond(True, lambda a: a + 1, lambda a: a - 1, jnp.array(1))
    Array(2, dtype=int32, weak_type=True)
    """
    return _branching("cond", pred, (true_fun, false_fun), operands, graph, graph_updates)


@traceback_util.api_boundary
def switch(index: tp.Any, branches: tp.Sequence[tp.Callable], *operands: tp.Any,
           graph: bool | None = None, graph_updates: bool | None = None) -> tp.Any:
    """``branches[index](*operands)`` traced as a ``jax.lax.switch`` (``index`` is clamped
    to the valid range, as in JAX).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> x = nnx.Variable(jnp.array(1))
    >>> def add(x): x[...] += 10
    >>> def sub(x): x[...] -= 10
    >>> nnx.switch(jnp.array(1), (add, sub), x)
    >>> int(x[...])
    -9
    """
    return _branching("switch", jnp.asarray(index), tuple(branches), operands, graph,
                      graph_updates)
