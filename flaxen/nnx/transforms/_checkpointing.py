"""Today's ``nnx.remat``: ``jax.checkpoint`` over graph nodes, in every ``graph=`` /
``graph_updates=`` mode (built on :func:`._mapped.mapped_call` with no mapped axes).

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> f = nnx.remat(lambda m, x: m(x).sum())
>>> float(nnx.grad(f)(m, jnp.ones((1, 2))).bias[...].sum())
3.0
"""

from __future__ import annotations

import functools
import typing as tp

import jax

from flaxen import traceback_util
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.transforms._common import resolve_bound
from flaxen.nnx.transforms._mapped import mapped_call

__all__ = ["remat"]


class _Missing:
    pass


def remat(
    f: tp.Any = _Missing,
    *,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: tp.Callable[..., bool] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> tp.Any:
    """Lifted ``jax.checkpoint``: the function's activations are recomputed in the backward
    pass; Variable updates made inside are written back."""
    graph, graph_updates = resolve_modes(graph, graph_updates)
    if f is _Missing:
        return functools.partial(remat, prevent_cse=prevent_cse, static_argnums=static_argnums,
                                 policy=policy, graph=graph, graph_updates=graph_updates)
    resolve_bound(f, "remat")
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def run(pure: tp.Callable, ins: list, late: list) -> tp.Any:
        return jax.checkpoint(pure, prevent_cse=prevent_cse, policy=policy)

    @traceback_util.api_boundary
    @functools.wraps(f)
    def remat_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        fun = f
        if statics:  # static arguments are closed over (hashable Python values)
            n = len(args)
            fixed = {i + n if i < 0 else i: args[i] for i in statics}
            dyn = [a for i, a in enumerate(args) if i not in fixed]

            def fun(*dyn_args: tp.Any, **kw: tp.Any) -> tp.Any:
                it = iter(dyn_args)
                full = [fixed[i] if i in fixed else next(it) for i in range(n)]
                return f(*full, **kw)

            args = tuple(dyn)
        return mapped_call(fun, args, kwargs, fn_name="remat", in_prefix=None, kw_prefix=None,
                           out_prefix=None, graph=graph, graph_updates=graph_updates,
                           transform=run)

    return remat_wrapper
