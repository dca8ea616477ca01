"""Tests for flaxen.training.dynamic_scale.DynamicScale."""

import jax
import jax.numpy as jnp
import numpy as np

from flaxen.training.dynamic_scale import DynamicScale, DynamicScaleResult


def test_finite_step_unscales_loss_and_grad():
    ds = DynamicScale()
    res = ds.value_and_grad(lambda x: jnp.sum(x ** 2))(jnp.ones(3))
    assert isinstance(res, DynamicScaleResult)
    assert bool(res.finite) and float(res.aux) == 3.0
    np.testing.assert_allclose(res.grad, [2, 2, 2])
    assert res.grad.dtype == jnp.float32 and int(res.dynamic_scale.fin_steps) == 1


def test_growth_after_interval_and_backoff_on_overflow():
    ds = DynamicScale(growth_interval=2, scale=2.0)
    f = lambda x: jnp.sum(x * x)
    scales = []
    for x in [1.0, 1.0, 1.0, jnp.inf, 1.0]:
        ds, finite, _, _ = ds.value_and_grad(f)(jnp.array([x]))
        scales.append((float(ds.scale), int(ds.fin_steps), bool(finite)))
    assert scales == [(2.0, 1, True), (2.0, 2, True), (4.0, 0, True), (2.0, 0, False),
                      (2.0, 1, True)]


def test_minimum_scale_and_has_aux_and_argnums():
    ds = DynamicScale(scale=8.0, minimum_scale=4.0)
    res = ds.value_and_grad(lambda x: (jnp.sum(x * x), "aux"), has_aux=True)(jnp.array([jnp.nan]))
    assert not bool(res.finite) and float(res.dynamic_scale.scale) == 4.0
    assert res.aux[1] == "aux"
    res = DynamicScale().value_and_grad(lambda x, y: jnp.sum(x * y), argnums=(0, 1))(
        jnp.ones(2), jnp.full(2, 3.0))
    np.testing.assert_allclose(res.grad[0], [3, 3])
    np.testing.assert_allclose(res.grad[1], [1, 1])


def test_jit_and_pmap_axis_name():
    ds = DynamicScale(growth_interval=10, scale=1024.0)  # 65536 overflows float16
    step = jax.jit(lambda d, p: d.value_and_grad(lambda q: jnp.asarray(q, jnp.float16) ** 2)(p))
    ds, finite, loss, grad = step(ds, jnp.float32(1.0))
    assert bool(finite) and float(grad) == 2.0
    n = jax.local_device_count()
    pstep = jax.pmap(lambda d, x: d.value_and_grad(lambda y: jnp.sum(y ** 2), axis_name="i")(x),
                     axis_name="i", in_axes=(None, 0))
    res = pstep(DynamicScale(), jnp.arange(float(n)).reshape(n, 1))
    np.testing.assert_allclose(res.grad[:, 0], np.full(n, np.mean(2 * np.arange(n))))
