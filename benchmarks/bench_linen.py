"""Linen Module system overhead: flaxen vs flax vs hand-written pure JAX.

Cases (each an MLP of ``depth`` Dense layers built in a compact loop, tiny widths so the
Python overhead of the Module system dominates):

* traced init (``jax.eval_shape(model.init, key, x)``),
* eager ``apply``,
* jitted ``apply`` (steady state),
* per-module construction, ``bind`` and ``clone`` cost (baseline: flax).

The Dense layer is defined identically in both frameworks with ``self.param`` so the
numbers measure the Module machinery, not a particular layer implementation.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from benchmarks._harness import Result, compare, have_flax

_lecun = jax.nn.initializers.lecun_normal()
_zeros = jax.nn.initializers.zeros


def _make_models(nn: Any) -> tuple[type, type]:
    class Dense(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            kernel = self.param("kernel", _lecun, (x.shape[-1], self.features))
            bias = self.param("bias", _zeros, (self.features,))
            return x @ kernel + bias

    class MLP(nn.Module):
        depth: int
        width: int

        @nn.compact
        def __call__(self, x):
            for _ in range(self.depth - 1):
                x = jax.nn.relu(Dense(self.width)(x))
            return Dense(self.width)(x)

    return Dense, MLP


def _jax_init(key: Any, x: Any, depth: int, width: int) -> dict:
    params = {}
    fan_in = x.shape[-1]
    for i in range(depth):
        key, sub = jax.random.split(key)
        params[f"Dense_{i}"] = {"kernel": _lecun(sub, (fan_in, width)),
                                "bias": _zeros(sub, (width,))}
        fan_in = width
    return {"params": params}


def _jax_apply(variables: dict, x: Any, depth: int) -> Any:
    params = variables["params"]
    for i in range(depth):
        p = params[f"Dense_{i}"]
        x = x @ p["kernel"] + p["bias"]
        if i < depth - 1:
            x = jax.nn.relu(x)
    return x


def _frameworks() -> dict[str, Any]:
    import flaxen.linen as fnn

    out = {"flaxen": fnn}
    if have_flax():
        import flax.linen as nn

        out["flax"] = nn
    return out


def run(quick: bool) -> list[Result]:
    results = []
    width = 8
    key = jax.random.PRNGKey(0)
    x = jnp.ones((2, width))
    rounds = 5 if quick else 7
    frameworks = _frameworks()
    models = {name: _make_models(nn) for name, nn in frameworks.items()}
    for depth in (2, 100):
        mlps = {name: m[1](depth=depth, width=width) for name, m in models.items()}
        variables = {name: mlp.init(key, x) for name, mlp in mlps.items()}
        jax_vars = _jax_init(key, x, depth, width)

        impls = {name: (lambda m=mlp: jax.eval_shape(m.init, key, x))
                 for name, mlp in mlps.items()}
        impls["jax"] = lambda d=depth: jax.eval_shape(
            lambda k, v: _jax_init(k, v, d, width), key, x)
        results.append(compare("linen", f"MLP-{depth} init traced", impls, rounds=rounds))

        impls = {name: (lambda m=mlp, v=variables[name]: m.apply(v, x))
                 for name, mlp in mlps.items()}
        impls["jax"] = lambda d=depth, jv=jax_vars: _jax_apply(jv, x, d)
        results.append(compare("linen", f"MLP-{depth} eager apply", impls, rounds=rounds))

        jitted = {name: jax.jit(mlp.apply) for name, mlp in mlps.items()}
        impls = {name: (lambda f=f, v=variables[name]: f(v, x)) for name, f in jitted.items()}
        jax_jit = jax.jit(lambda v, xx, d=depth: _jax_apply(v, xx, d))
        impls["jax"] = lambda f=jax_jit, jv=jax_vars: f(jv, x)
        results.append(compare("linen", f"MLP-{depth} jit apply", impls, rounds=rounds))

    small = {name: m[1](depth=2, width=width) for name, m in models.items()}
    small_vars = {name: mlp.init(key, x) for name, mlp in small.items()}
    impls = {name: (lambda d=m[0]: d(4)) for name, m in models.items()}
    results.append(compare("linen", "construct Dense (per module)", impls, rounds=rounds,
                           baseline="flax"))
    impls = {name: (lambda m=mlp, v=small_vars[name]: m.bind(v)) for name, mlp in small.items()}
    results.append(compare("linen", "bind MLP-2", impls, rounds=rounds, baseline="flax"))
    impls = {name: (lambda m=mlp: m.clone()) for name, mlp in small.items()}
    results.append(compare("linen", "clone MLP-2", impls, rounds=rounds, baseline="flax"))
    return results
