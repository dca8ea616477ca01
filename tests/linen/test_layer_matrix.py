"""Every layer through jax.jit, jax.vmap and jax.grad, in float32 and bfloat16.

Each case builds the layer, initialises it, and checks that (a) the jitted apply equals the
eager apply, (b) vmapping apply over a leading axis equals applying per example, and
(c) gradients w.r.t. parameters and inputs exist, are finite and have the right shapes.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn

R = np.random.RandomState(0)

# name -> (factory, input shape, apply kwargs, mutable collections, differentiable input)
CASES = {
    "Dense": (lambda: nn.Dense(3), (2, 4), {}, False, True),
    "DenseGeneral": (lambda: nn.DenseGeneral((2, 3), axis=(-2, -1)), (2, 3, 4), {}, False, True),
    "Einsum": (lambda: nn.Einsum((4, 3), "ab,bc->ac"), (2, 4), {}, False, True),
    "Embed": (lambda: nn.Embed(5, 3), (2, 4), {}, False, False),
    "Conv": (lambda: nn.Conv(3, (3, 3), padding="CIRCULAR"), (2, 5, 5, 2), {}, False, True),
    "Conv1DCausal": (lambda: nn.Conv(3, (2,), padding="CAUSAL"), (2, 6, 2), {}, False, True),
    "ConvTranspose": (lambda: nn.ConvTranspose(3, (3, 3), strides=(2, 2)), (2, 4, 4, 2), {},
                      False, True),
    "ConvLocal": (lambda: nn.ConvLocal(3, (3,)), (2, 5, 2), {}, False, True),
    "BatchNorm": (lambda: nn.BatchNorm(use_running_average=False), (4, 3), {},
                  ["batch_stats"], True),
    "LayerNorm": (lambda: nn.LayerNorm(), (2, 5), {}, False, True),
    "RMSNorm": (lambda: nn.RMSNorm(), (2, 5), {}, False, True),
    "GroupNorm": (lambda: nn.GroupNorm(num_groups=2), (2, 3, 4), {}, False, True),
    "InstanceNorm": (lambda: nn.InstanceNorm(), (2, 3, 4), {}, False, True),
    "Dropout": (lambda: nn.Dropout(0.5, deterministic=False), (2, 5), {}, False, True),
    "PReLU": (lambda: nn.PReLU(), (2, 5), {}, False, True),
    "Sequential": (lambda: nn.Sequential([nn.Dense(4), nn.gelu, nn.Dense(2)]), (2, 3), {},
                   False, True),
}


def _inputs(name, shape, dtype):
    if name == "Embed":
        return jnp.asarray(R.randint(0, 5, size=shape))
    return jnp.asarray(R.randn(*shape), dtype)


def _run(layer, variables, x, mutable):
    rngs = {"dropout": jax.random.key(1)}
    out = layer.apply(variables, x, rngs=rngs, mutable=mutable)
    return out[0] if mutable else out


def _close(a, b, dtype):
    tol = 1e-5 if dtype == jnp.float32 else 2e-2
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_under_jit_vmap_grad(name, dtype):
    factory, shape, _, mutable, diff_input = CASES[name]
    layer = factory()
    x = _inputs(name, shape, dtype)
    variables = layer.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)
    params = variables.get("params", {})
    for leaf in jax.tree.leaves(params):
        assert leaf.dtype == jnp.float32  # param_dtype default, whatever the input dtype

    eager = _run(layer, variables, x, mutable)
    jitted = jax.jit(lambda v, x: _run(layer, v, x, mutable))(variables, x)
    _close(eager, jitted, dtype)
    if name != "Embed" and name != "Dropout" and dtype == jnp.bfloat16:
        # dtype=None promotes with float32 params (norms reduce in float32 too)
        assert eager.dtype in (jnp.float32, jnp.bfloat16)

    if name not in ("BatchNorm", "Dropout"):  # batch statistics / masks couple examples
        stacked = jnp.stack([x, x[::-1]])
        mapped = jax.vmap(lambda xi: _run(layer, variables, xi, mutable))(stacked)
        _close(mapped[0], eager, dtype)
        _close(mapped[1], _run(layer, variables, x[::-1], mutable), dtype)

    def loss(p, xi):
        v = dict(variables, params=p) if params else variables
        return jnp.sum(_run(layer, v, xi, mutable).astype(jnp.float32) ** 2)

    if params:
        g = jax.grad(loss)(params, x)
        for gl, pl in zip(jax.tree.leaves(g), jax.tree.leaves(params)):
            assert gl.shape == pl.shape and bool(jnp.all(jnp.isfinite(gl)))
        assert any(float(jnp.abs(gl).max()) > 0 for gl in jax.tree.leaves(g))
    if diff_input:
        gx = jax.grad(loss, argnums=1)(params, x)
        assert gx.shape == x.shape and gx.dtype == x.dtype
        assert bool(jnp.all(jnp.isfinite(gx.astype(jnp.float32))))


def test_batch_norm_under_vmap_with_axis_name_matches_full_batch():
    bn = nn.BatchNorm(use_running_average=False, axis_name="b")
    x = jnp.asarray(R.randn(4, 2, 3), jnp.float32)
    v = bn.init(jax.random.key(0), x[0])
    y, _ = jax.vmap(lambda xi: bn.apply(v, xi, mutable=["batch_stats"]), axis_name="b")(x)
    full, _ = nn.BatchNorm(use_running_average=False).apply(
        v, x.reshape(8, 3), mutable=["batch_stats"])
    _close(y.reshape(8, 3), full, jnp.float32)
