"""Today's ``nnx.while_loop`` and ``nnx.fori_loop``: ``jax.lax`` loops whose state may hold
Modules and Variables.

The loop state is lifted once (:class:`~flaxen.nnx._lift.Lift` in roots mode) into leaf
values (Variables, arrays, numbers); each iteration gets fresh copies of the objects and
must return the same structure holding the same objects (Variables are updated in place,
``v[...] = ...``). After the loop the caller's
objects hold the final values and are returned in the state.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> count = nnx.Variable(jnp.array(0))
>>> def step(i, c):
...   c[...] += i
...   return c
>>> out = nnx.fori_loop(0, 4, step, count)
>>> out is count, int(count[...])
(True, 6)
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen import traceback_util
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _lift
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.transforms._common import arrays_for_scalars

T = tp.TypeVar("T")


def _identity_msg(graph_updates: bool) -> str:
    if graph_updates:
        return "Carry references must be the same between iterations"
    return "Variable identity must be preserved across iterations"


class _Loop:
    """The loop state lifted once (:class:`~flaxen.nnx._lift.Lift` in roots mode), and the
    pure step functions JAX traces over its values."""

    def __init__(self, init_val: tp.Any, what: str, graph_updates: bool) -> None:
        self.lift = _lift.Lift((arrays_for_scalars(init_val),), {}, roots=True)
        self.what = what
        self.graph_updates = graph_updates

    def state(self, values: tp.Sequence[tp.Any]) -> tuple[tp.Any, dict]:
        (val,), _, inner = _lift.enter(self.lift.static, values, self.lift.leaves)
        return val, inner.built

    def values_of(self, out: tp.Any, built: dict) -> list:
        fg = eng.flatten([arrays_for_scalars(out)], root_paths=[(0,)])
        _lift.check_carry(self.lift, fg.defs, fg.refs, built, self.what,
                          _identity_msg(self.graph_updates))
        return fg.values()

    def finish(self, values: tp.Sequence[tp.Any]) -> tp.Any:
        return self.lift.write_back(self.lift.static.defs, values)[0]


@traceback_util.api_boundary
def while_loop(
    cond_fun: tp.Callable[[T], tp.Any],
    body_fun: tp.Callable[[T], T],
    init_val: T,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """Lifted ``jax.lax.while_loop``: ``body_fun`` runs while ``cond_fun(val)`` is true.

    ``init_val`` may hold Modules and Variables (shared references are kept); the body must
    return the same structure with the same objects. Afterwards the objects in ``init_val``
    hold the final values.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> def body(val):
    ...   v, n = val
    ...   v[...] *= 2
    ...   return v, n - 1
    >>> v = nnx.Variable(jnp.array(1.0))
    >>> _, n = nnx.while_loop(lambda val: val[1] > 0, body, (v, 3))
    >>> float(v[...]), int(n)
    (8.0, 0)
    """
    _, graph_updates = resolve_modes(graph, graph_updates)
    loop = _Loop(init_val, "nnx.while_loop", graph_updates)

    def cond(values: list) -> tp.Any:
        val, _ = loop.state(values)
        return cond_fun(val)

    def body(values: list) -> list:
        val, built = loop.state(values)
        return loop.values_of(body_fun(val), built)

    final = jax.lax.while_loop(cond, body, loop.lift.values)
    return loop.finish(final)


@traceback_util.api_boundary
def fori_loop(
    lower: int,
    upper: int,
    body_fun: tp.Callable[[int, T], T],
    init_val: T,
    *,
    unroll: int | bool | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """Lifted ``jax.lax.fori_loop``: ``val = body_fun(i, val)`` for ``lower <= i < upper``.

    Same contract as :func:`while_loop` for the objects in ``init_val``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    >>> def step(i, m):
    ...   m.bias[...] += 1.0
    ...   return m
    >>> _ = nnx.fori_loop(0, 3, step, model)
    >>> model.bias[...].tolist()
    [3.0, 3.0]
    """
    _, graph_updates = resolve_modes(graph, graph_updates)
    loop = _Loop(init_val, "nnx.fori_loop", graph_updates)

    def body(i: tp.Any, values: list) -> list:
        val, built = loop.state(values)
        return loop.values_of(body_fun(i, val), built)

    kwargs = {} if unroll is None else {"unroll": unroll}
    final = jax.lax.fori_loop(lower, upper, body, loop.lift.values, **kwargs)
    return loop.finish(final)
