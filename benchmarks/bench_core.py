"""flaxen.core speed: tracing init/apply of a model with many params in nested scopes.

The model has ``outer`` blocks, each with ``inner`` child scopes holding ``per`` params
(10,000 params in 1,000 scopes at full size). The pure-JAX limit calls the same
initialisers with the same fold_in-derived keys, precomputed hashes included, and
computes the same output (the sum of all params), so both trace the same operations.
``jax_nosum`` is the older baseline without that sum (less work than the model does).
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp

from benchmarks._harness import Result, compare, have_flax

_INIT = jax.nn.initializers.zeros


def _model(outer: int, inner: int, per: int):
    def fn(scope, x):
        total = x
        for i in range(outer):
            block = scope.push(f"block_{i}")
            for j in range(inner):
                layer = block.push(f"layer_{j}")
                for k in range(per):
                    total = total + layer.param(f"p{k}", _INIT, (2,)).sum()
        return total
    return fn


def _h32(items):
    m = hashlib.sha1()
    for x in items:
        m.update(x.encode() if isinstance(x, str) else x.to_bytes((x.bit_length() + 7) // 8, "big"))
    return int.from_bytes(m.digest()[:4], "big")


def _pure_jax(outer: int, inner: int, per: int):
    hashes = [[[_h32((f"block_{i}", f"layer_{j}", k + 1)) for k in range(per)]
               for j in range(inner)] for i in range(outer)]

    def fn(key, x):
        params = {}
        total = x
        for i in range(outer):
            block = params[f"block_{i}"] = {}
            for j in range(inner):
                layer = block[f"layer_{j}"] = {}
                for k in range(per):
                    p = layer[f"p{k}"] = _INIT(jax.random.fold_in(key, hashes[i][j][k]), (2,))
                    total = total + p.sum()
        return total, {"params": params}
    return fn


def _pure_jax_no_sum(outer: int, inner: int, per: int):
    """The older, smaller baseline: the same params, but not the sum the model computes."""
    hashes = [[[_h32((f"block_{i}", f"layer_{j}", k + 1)) for k in range(per)]
               for j in range(inner)] for i in range(outer)]

    def fn(key, x):
        params = {}
        for i in range(outer):
            block = params[f"block_{i}"] = {}
            for j in range(inner):
                layer = block[f"layer_{j}"] = {}
                for k in range(per):
                    layer[f"p{k}"] = _INIT(jax.random.fold_in(key, hashes[i][j][k]), (2,))
        return x, {"params": params}
    return fn


def run(quick: bool) -> list[Result]:
    import flaxen.core as xcore

    outer, inner, per = (10, 10, 10) if quick else (100, 10, 10)
    model = _model(outer, inner, per)
    key = jax.random.PRNGKey(0)
    x = jnp.ones(())
    note = f"{outer * inner * per} params in {outer * inner} scopes"
    impls = {"flaxen": lambda: jax.eval_shape(xcore.init(model), key, x),
             "jax": lambda: jax.eval_shape(_pure_jax(outer, inner, per), key, x),
             "jax_nosum": lambda: jax.eval_shape(_pure_jax_no_sum(outer, inner, per), key, x)}
    fcore = None
    if have_flax():
        import flax.core as fcore
        impls["flax"] = lambda: jax.eval_shape(fcore.init(model), key, x)
    results = [compare("core", "trace init (eval_shape)", impls, rounds=3, note=note)]

    _, variables = xcore.init(model)(key, x)
    apply_impls = {"flaxen": lambda: jax.eval_shape(xcore.apply(model), variables, x),
                   "jax": lambda: jax.eval_shape(lambda v, x: x + sum(
                       a.sum() for a in jax.tree_util.tree_leaves(v)), variables, x)}
    if fcore is not None:
        apply_impls["flax"] = lambda: jax.eval_shape(fcore.apply(model), variables, x)
    results.append(compare("core", "trace apply (eval_shape)", apply_impls, rounds=3,
                           note=note))
    return results
