"""Lazy evaluation for ``lazy_init``: run a function whose inputs may be abstract.

Inputs given as ``jax.ShapeDtypeStruct`` are traced abstractly; every output must be
computable without their values (e.g. parameters depend only on shapes and RNG keys).
An output that depends on an abstract input raises :class:`~flaxen.errors.LazyInitError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core

from flaxen import errors


def _is_abstract(x: Any) -> bool:
    return isinstance(x, jax.ShapeDtypeStruct)


def lazy_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Calls ``fn(*args, **kwargs)`` with ShapeDtypeStruct leaves treated as unknown values.

    >>> import jax, jax.numpy as jnp
    >>> x = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    >>> lazy_call(lambda x: jnp.zeros(x.shape[-1]), (x,), {})
    Array([0., 0., 0.], dtype=float32)
    """
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_abstract)
    abstract_idx = [i for i, leaf in enumerate(leaves) if _is_abstract(leaf)]
    if not abstract_idx:
        return fn(*args, **kwargs)

    def concrete_fn(*abstract_vals: Any) -> Any:
        full = list(leaves)
        for i, v in zip(abstract_idx, abstract_vals):
            full[i] = v
        a, k = jax.tree_util.tree_unflatten(treedef, full)
        return fn(*a, **k)

    abstract_in = [leaves[i] for i in abstract_idx]
    closed, out_shape = jax.make_jaxpr(concrete_fn, return_shape=True)(*abstract_in)
    jaxpr = closed.jaxpr
    dependent = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(isinstance(v, jex_core.Var) and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    out_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(out_shape)[0]]
    for path, var in zip(out_paths, jaxpr.outvars):
        if isinstance(var, jex_core.Var) and var in dependent:
            raise errors.LazyInitError(jax.tree_util.keystr(path))
    # Keep only the equations the outputs need: the rest (the model's forward pass on the
    # abstract inputs) is never run, so a huge abstract input allocates nothing.
    needed = {v for v in jaxpr.outvars if isinstance(v, jex_core.Var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if any(v in needed for v in eqn.outvars) or eqn.effects:
            kept.append(eqn)
            needed.update(v for v in eqn.invars if isinstance(v, jex_core.Var))
    kept.reverse()
    if any(v in dependent for eqn in kept for v in eqn.invars
           if isinstance(v, jex_core.Var)):
        dummies = [jnp.zeros(s.shape, s.dtype) for s in abstract_in]  # effects on inputs
        out_flat = jex_core.jaxpr_as_fun(closed)(*dummies)
    else:
        info = jaxpr.debug_info
        info = info._replace(arg_names=()) if info is not None else None
        pruned = jaxpr.replace(invars=[], eqns=kept, debug_info=info)
        out_flat = jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(pruned, closed.consts))()
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), out_flat)
