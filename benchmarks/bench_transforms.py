"""Lifted-transform speed: ``nn.scan`` over Transformer layers, ``nn.remat``, ``nn.vmap``.

Cases (flaxen vs flax vs hand-written pure JAX on the same shapes):

* trace + compile of a training step of an ``nn.scan``-over-layers Transformer (48 layers,
  8 with ``--quick``): wall time of ``jit(step).trace(...).lower().compile()`` on a fresh
  function, and its trace-only and XLA-compile-only parts from the same runs;
* the HLO text size of that step (ratios of character counts, not times);
* with ``nn.remat`` around each block, the compiled step's temporary memory
  (``compiled.memory_analysis().temp_size_in_bytes``, ratios of bytes);
* step time of a ``nn.vmap`` ensemble of 8 MLPs (jitted value_and_grad + SGD update);
* issue 3: core-level ``lift.scan`` (``flaxen.core.lift`` vs ``flax.core.lift``) over 64
  layers (always 64, also with ``--quick``): HLO text size of jitted ``init`` (keys split per
  layer) and of a gradient step on ``apply``.
"""

from __future__ import annotations

import gc
import statistics
import time

import jax
import jax.numpy as jnp

from benchmarks._harness import Result, compare, have_flax

D, HEADS, SEQ, BATCH = 32, 4, 16, 4


def _transformer(nn, layers: int, remat: bool):
    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.LayerNorm()(x)
            x = x + nn.SelfAttention(num_heads=HEADS, qkv_features=D)(h)
            h = nn.LayerNorm()(x)
            x = x + nn.Dense(D)(nn.gelu(nn.Dense(4 * D)(h)))
            return x, None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            body = nn.remat(Block, prevent_cse=False) if remat else Block
            S = nn.scan(body, length=layers, variable_axes={"params": 0},
                        split_rngs={"params": True})
            return S()(x, None)[0]

    return Stack()


def _pure_transformer(layers: int, remat: bool):
    """The same network as ``_transformer`` over stacked params, written with jax.lax."""

    def layer_norm(x, p):
        mean = x.mean(-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-6) * p["scale"] + p["bias"]

    def block(x, p):
        h = layer_norm(x, p["ln1"])
        q, k, v = (jnp.einsum("bld,dhk->blhk", h, p[n]) for n in ("q", "k", "v"))
        w = jax.nn.softmax(jnp.einsum("bqhk,bshk->bhqs", q / jnp.sqrt(q.shape[-1]), k), -1)
        att = jnp.einsum("bhqs,bshk->bqhk", w, v)
        x = x + jnp.einsum("blhk,hkd->bld", att, p["o"])
        h = layer_norm(x, p["ln2"])
        h = jax.nn.gelu(h @ p["w1"] + p["b1"])
        return x + h @ p["w2"] + p["b2"]

    body = jax.checkpoint(block, prevent_cse=False) if remat else block

    def apply(params, x):
        return jax.lax.scan(lambda c, p: (body(c, p), None), x, params)[0]

    def init(key):
        ks = jax.random.split(key, 6)
        kd = D // HEADS
        n = jax.nn.initializers.lecun_normal()
        return {
            "ln1": {"scale": jnp.ones((layers, D)), "bias": jnp.zeros((layers, D))},
            "ln2": {"scale": jnp.ones((layers, D)), "bias": jnp.zeros((layers, D))},
            "q": n(ks[0], (layers, D, HEADS, kd)), "k": n(ks[1], (layers, D, HEADS, kd)),
            "v": n(ks[2], (layers, D, HEADS, kd)), "o": n(ks[3], (layers, HEADS, kd, D)),
            "w1": n(ks[4], (layers, D, 4 * D)), "b1": jnp.zeros((layers, 4 * D)),
            "w2": n(ks[5], (layers, 4 * D, D)), "b2": jnp.zeros((layers, D)),
        }

    return init, apply


def _step_fns(layers: int, remat: bool) -> dict:
    """name -> (params, step) for each implementation; ``step(params, x)`` = loss + grads."""
    import flaxen.linen as xnn

    x = jnp.ones((BATCH, SEQ, D))
    out = {}

    def linen(nn):
        model = _transformer(nn, layers, remat)
        params = jax.jit(model.init)(jax.random.PRNGKey(0), x)

        def step(params, x):
            return jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)

        return params, step

    out["flaxen"] = linen(xnn)
    if have_flax():
        import flax.linen as fnn

        out["flax"] = linen(fnn)
    init, apply = _pure_transformer(layers, remat)

    def jax_step(params, x):
        return jax.value_and_grad(lambda p: jnp.mean(apply(p, x) ** 2))(params)

    out["jax"] = (init(jax.random.PRNGKey(0)), jax_step)
    return out, x


def _compile(step, params, x):
    # A fresh wrapper per call defeats jit's cache: every call traces and compiles.
    return jax.jit(lambda p, x: step(p, x)).lower(params, x).compile()


def _phases(step, params, x) -> tuple[float, float, float]:
    """Seconds to trace, lower to StableHLO and XLA-compile a fresh jit of ``step``."""
    t0 = time.perf_counter()
    traced = jax.jit(lambda p, x: step(p, x)).trace(params, x)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    lowered.compile()
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def _trace_compile_results(layers: int, quick: bool) -> list[Result]:
    """Trace+lower+compile, split into phases from the same runs (rotated order, medians).

    XLA's compile of the (layer-count independent) loop body dominates; the split shows
    how much of the total the Python side (trace, lowering) can still move.
    """
    fns, x = _step_fns(layers, remat=False)
    note = f"{layers} layers, d={D}"
    names = list(fns)
    for k in names:  # warm-up
        _phases(fns[k][1], fns[k][0], x)
    samples: dict[str, list[tuple[float, float, float]]] = {k: [] for k in names}
    for r in range(3 if quick else 5):
        for k in names[r % len(names):] + names[: r % len(names)]:
            gc.collect()
            samples[k].append(_phases(fns[k][1], fns[k][0], x))

    def med(pick) -> dict[str, float]:
        return {k: statistics.median(pick(t) for t in v) for k, v in samples.items()}

    compile_share = statistics.median(t[2] / sum(t) for t in samples["flaxen"])
    results = [
        Result("transforms", f"scan Transformer trace+compile ({layers}L)", med(sum),
               note=f"{note}; XLA compile is {compile_share:.0%} of flaxen's total"),
        Result("transforms", f"scan Transformer trace only ({layers}L)",
               med(lambda t: t[0]), note=note),
        Result("transforms", f"scan Transformer XLA compile only ({layers}L)",
               med(lambda t: t[2]), note=note),
    ]
    sizes = {k: float(len(jax.jit(s).lower(p, x).as_text())) for k, (p, s) in fns.items()}
    results.insert(1, Result("transforms", f"scan Transformer HLO size ({layers}L)", sizes,
                             note="characters of StableHLO text"))
    return results


def _remat_memory_results(layers: int) -> list[Result]:
    fns, x = _step_fns(layers, remat=True)
    mem = {}
    for k, (p, s) in fns.items():
        analysis = _compile(s, p, x).memory_analysis()
        mem[k] = float(getattr(analysis, "temp_size_in_bytes", 0) or 0) or 1.0
    return [Result("transforms", f"scan+remat step temp memory ({layers}L)", mem,
                   note="bytes from compiled.memory_analysis()")]


def _ensemble_results(quick: bool) -> list[Result]:
    import flaxen.linen as xnn

    members, width = 8, 64
    x = jnp.ones((members, 32, width))

    def ensemble_step(nn):
        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(width)(nn.relu(nn.Dense(width)(x)))

        model = nn.vmap(MLP, variable_axes={"params": 0}, split_rngs={"params": True})()
        params = jax.jit(model.init)(jax.random.PRNGKey(0), x)

        @jax.jit
        def step(params, x):
            grads = jax.grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
            return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

        return lambda: step(params, x)

    def pure():
        keys = jax.random.split(jax.random.PRNGKey(0), 4)
        n = jax.nn.initializers.lecun_normal()
        params = {"w1": n(keys[0], (members, width, width)), "b1": jnp.zeros((members, width)),
                  "w2": n(keys[1], (members, width, width)), "b2": jnp.zeros((members, width))}

        def apply(p, x):
            h = jax.nn.relu(jnp.einsum("mbi,mio->mbo", x, p["w1"]) + p["b1"][:, None])
            return jnp.einsum("mbi,mio->mbo", h, p["w2"]) + p["b2"][:, None]

        @jax.jit
        def step(params, x):
            grads = jax.grad(lambda p: jnp.mean(apply(p, x) ** 2))(params)
            return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

        return lambda: step(params, x)

    impls = {"flaxen": ensemble_step(xnn), "jax": pure()}
    if have_flax():
        import flax.linen as fnn

        impls["flax"] = ensemble_step(fnn)
    return [compare("transforms", "vmap ensemble of 8 MLPs: step", impls,
                    rounds=5 if quick else 9, note=f"{members} members, width {width}")]


CORE_LAYERS = 64


def _core_scan_model(lift, layers: int):
    """A functional-core residual MLP: ``lift.scan`` over ``layers`` blocks with dropout."""

    def block(scope, x, _):
        w = scope.param("kernel", jax.nn.initializers.lecun_normal(), (D, D))
        b = scope.param("bias", jax.nn.initializers.zeros, (D,))
        h = jnp.tanh(x @ w + b)
        keep = jax.random.bernoulli(scope.make_rng("dropout"), 0.9, h.shape)
        return x + jnp.where(keep, h / 0.9, 0.0), None

    def model(scope, x):
        scanned = lift.scan(block, variable_axes={"params": 0},
                            split_rngs={"params": True, "dropout": True}, length=layers)
        return scanned(scope.push("layers"), x, None)[0]

    return model


def _core_scan_results() -> list[Result]:
    import flaxen.core as xcore

    cores = {"flaxen": xcore}
    if have_flax():
        import flax.core as fcore

        cores["flax"] = fcore
    x = jnp.ones((BATCH, D))
    rngs = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
    init_sizes, step_sizes = {}, {}
    for name, core in cores.items():
        model = _core_scan_model(core.lift, CORE_LAYERS)
        init = core.init(model)
        init_sizes[name] = float(len(jax.jit(init).lower(rngs, x).as_text()))
        _, variables = jax.jit(init)(rngs, x)
        apply = core.apply(model)

        def step(v, x, apply=apply):
            return jax.value_and_grad(
                lambda v: jnp.mean(apply(v, x, rngs={"dropout": rngs["dropout"]}) ** 2))(v)

        step_sizes[name] = float(len(jax.jit(step).lower(variables, x).as_text()))
    note = "characters of StableHLO text"
    return [
        Result("transforms", f"core lift.scan init HLO size ({CORE_LAYERS}L)", init_sizes,
               baseline="flax" if "flax" in cores else "flaxen", note=note),
        Result("transforms", f"core lift.scan grad step HLO size ({CORE_LAYERS}L)",
               step_sizes, baseline="flax" if "flax" in cores else "flaxen", note=note),
    ]


def run(quick: bool) -> list[Result]:
    layers = 8 if quick else 48
    results = _trace_compile_results(layers, quick)
    results += _remat_memory_results(layers)
    results += _ensemble_results(quick)
    results += _core_scan_results()
    return results
