"""flaxen.linen.fp8_ops: FP8 rounding helpers, delayed scaling and Fp8DotGeneralOp in training."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import flaxen.linen as nn
from flaxen.linen import fp8_ops
from flaxen.training import train_state

E4M3_MAX = 448.0


def test_quantize_dequantize_rounds_to_e4m3():
    x = jnp.array([1.0, 1.07, 1000.0])
    y = fp8_ops.quantize_dequantize(x, jnp.float8_e4m3fn, jnp.ones((1,)), jnp.float32)
    assert y.dtype == jnp.float32
    np.testing.assert_array_equal(y, [1.0, 1.125, E4M3_MAX])  # rounded, then clipped


def test_compute_scale_maps_amax_to_the_fp8_max_and_keeps_old_scale_for_zero():
    s = fp8_ops.compute_scale(jnp.float32(2.0), jnp.float32(1.0), jnp.float32(E4M3_MAX))
    np.testing.assert_allclose(s, 2.0 / E4M3_MAX)
    kept = fp8_ops.compute_scale(jnp.float32(0.0), jnp.float32(0.5), jnp.float32(E4M3_MAX))
    np.testing.assert_allclose(kept, 0.5)
    kept = fp8_ops.compute_scale(jnp.float32(jnp.inf), jnp.float32(0.5), jnp.float32(E4M3_MAX))
    np.testing.assert_allclose(kept, 0.5)


def test_in_qdq_gradients_are_the_new_scale_and_history():
    hist = jnp.array([3.0, 0.0, 1.0])
    scale = jnp.ones((1,))
    x = jnp.array([-2.0, 0.5])
    gx, gscale, ghist = jax.grad(
        lambda x, s, h: fp8_ops.in_qdq(jnp.float32, x, s, h).sum(), argnums=(0, 1, 2)
    )(x, scale, hist)
    np.testing.assert_array_equal(gx, [1.0, 1.0])  # straight through
    np.testing.assert_allclose(gscale, [3.0 / E4M3_MAX])  # from the largest amax in history
    np.testing.assert_array_equal(ghist, [2.0, 1.0, 3.0])  # rolled, new amax first


def test_dense_with_fp8_dot_general_variables_and_train_state_overwrite():
    dense = nn.DenseGeneral(features=4, dot_general_cls=nn.Fp8DotGeneralOp)
    x = jax.random.normal(jax.random.key(1), (2, 3))
    variables = dense.init(jax.random.key(0), x)
    fp8 = variables[fp8_ops.OVERWRITE_WITH_GRADIENT]["Fp8DotGeneralOp_0"]
    assert jax.tree_util.tree_map(jnp.shape, dict(fp8)) == {
        "input_amax_history": (1024,), "kernel_amax_history": (1024,),
        "output_grad_amax_history": (1024,), "input_scale": (1,), "kernel_scale": (1,),
        "output_grad_scale": (1,),
    }
    state = train_state.TrainState.create(params=variables, tx=optax.sgd(0.1),
                                          apply_fn=dense.apply)
    grads = jax.grad(lambda v: state.apply_fn(v, x).sum())(state.params)
    state = state.apply_gradients(grads=grads)
    new = state.params[fp8_ops.OVERWRITE_WITH_GRADIENT]["Fp8DotGeneralOp_0"]
    np.testing.assert_allclose(new["input_amax_history"][0], jnp.max(jnp.abs(x)), rtol=1e-6)
    np.testing.assert_array_equal(new["input_scale"], [1.0])  # history was all zeros
    np.testing.assert_array_equal(new["output_grad_amax_history"][0], 1.0)  # d(sum)/dy
