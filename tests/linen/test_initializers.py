"""Initializers: builders, named variance-scaling variants, statistics and shape rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.linen import initializers as init

KEY = jax.random.key(0)


def test_public_names():
    names = (
        "constant delta_orthogonal glorot_normal glorot_uniform he_normal he_uniform "
        "kaiming_normal kaiming_uniform lecun_normal lecun_uniform normal ones ones_init "
        "orthogonal truncated_normal uniform variance_scaling xavier_normal xavier_uniform "
        "zeros zeros_init"
    ).split()
    for name in names:
        assert callable(getattr(init, name)), name


def test_zeros_init_and_ones_init_ignore_the_key():
    z = init.zeros_init()(KEY, (2, 3), jnp.float32)
    o = init.ones_init()(jax.random.key(7), (4,), jnp.bfloat16)
    np.testing.assert_array_equal(z, np.zeros((2, 3)))
    np.testing.assert_array_equal(o.astype(jnp.float32), np.ones(4))
    assert z.dtype == jnp.float32 and o.dtype == jnp.bfloat16
    assert init.zeros(KEY, (1,)).dtype == jnp.float32  # default float without x64


def test_constant_fills_with_value():
    np.testing.assert_array_equal(init.constant(-7)(KEY, (2, 2), jnp.float32), -7 * np.ones((2, 2)))


@pytest.mark.parametrize(
    "name, scale, mode, dist",
    [
        ("glorot_normal", 1.0, "fan_avg", "truncated_normal"),
        ("xavier_normal", 1.0, "fan_avg", "truncated_normal"),
        ("glorot_uniform", 1.0, "fan_avg", "uniform"),
        ("xavier_uniform", 1.0, "fan_avg", "uniform"),
        ("he_normal", 2.0, "fan_in", "truncated_normal"),
        ("kaiming_normal", 2.0, "fan_in", "truncated_normal"),
        ("he_uniform", 2.0, "fan_in", "uniform"),
        ("kaiming_uniform", 2.0, "fan_in", "uniform"),
        ("lecun_normal", 1.0, "fan_in", "truncated_normal"),
        ("lecun_uniform", 1.0, "fan_in", "uniform"),
    ],
)
def test_named_variants_are_variance_scaling(name, scale, mode, dist):
    shape = (3, 3, 4, 5)
    got = getattr(init, name)()(KEY, shape, jnp.float32)
    want = init.variance_scaling(scale, mode, dist)(KEY, shape, jnp.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dist", ["truncated_normal", "normal", "uniform"])
def test_variance_scaling_std_matches_fan(dist):
    # fan_in = receptive field (3*3) * in (8) = 72; std after truncation is sqrt(scale/fan_in).
    shape = (3, 3, 8, 512)
    w = init.variance_scaling(2.0, "fan_in", dist)(KEY, shape, jnp.float32)
    np.testing.assert_allclose(float(jnp.std(w)), np.sqrt(2.0 / 72), rtol=0.03)
    if dist == "truncated_normal":
        assert float(jnp.max(jnp.abs(w))) <= 2 * np.sqrt(2.0 / 72) / 0.8796 + 1e-6


def test_variance_scaling_fan_out_and_avg():
    shape = (64, 1024)
    out = init.variance_scaling(1.0, "fan_out", "normal")(KEY, shape, jnp.float32)
    avg = init.variance_scaling(1.0, "fan_avg", "normal")(KEY, shape, jnp.float32)
    np.testing.assert_allclose(float(jnp.std(out)), np.sqrt(1 / 1024), rtol=0.05)
    np.testing.assert_allclose(float(jnp.std(avg)), np.sqrt(2 / (64 + 1024)), rtol=0.05)


def test_variance_scaling_uniform_complex_is_a_disk():
    w = init.variance_scaling(1.0, "fan_in", "uniform")(KEY, (16, 512), jnp.complex64)
    assert w.dtype == jnp.complex64
    assert float(jnp.abs(w).max()) <= np.sqrt(2 / 16) * 1.0001 + 1e-6
    np.testing.assert_allclose(float(jnp.mean(jnp.abs(w) ** 2)), 1 / 16, rtol=0.05)


def test_variance_scaling_rejects_bad_mode():
    with pytest.raises(ValueError):
        init.variance_scaling(1.0, "fan_sideways", "normal")(KEY, (2, 2), jnp.float32)


def test_normal_and_uniform_ranges():
    n = init.normal(0.5)(KEY, (20000,), jnp.float32)
    np.testing.assert_allclose(float(jnp.std(n)), 0.5, rtol=0.03)
    u = init.uniform(2.0)(KEY, (20000,), jnp.float32)
    assert float(u.min()) >= 0.0 and float(u.max()) < 2.0  # [0, scale), not symmetric


def test_orthogonal_rows_or_columns_are_orthonormal():
    tall = init.orthogonal()(KEY, (6, 3), jnp.float32)
    np.testing.assert_allclose(tall.T @ tall, np.eye(3), atol=1e-5)
    wide = init.orthogonal(scale=2.0)(KEY, (3, 6), jnp.float32)
    np.testing.assert_allclose(wide @ wide.T, 4 * np.eye(3), atol=1e-4)


def test_delta_orthogonal_center_slice_only():
    w = init.delta_orthogonal()(KEY, (3, 3, 4, 4), jnp.float32)
    center = w[1, 1]
    np.testing.assert_allclose(center @ center.T, np.eye(4), atol=1e-5)
    mask = np.ones((3, 3), bool)
    mask[1, 1] = False
    assert float(jnp.abs(w[mask]).max()) == 0.0
    with pytest.raises(ValueError):
        init.delta_orthogonal()(KEY, (4, 4), jnp.float32)


def test_same_key_same_values_and_dtype_is_honoured():
    a = init.lecun_normal()(KEY, (4, 5), jnp.bfloat16)
    b = init.lecun_normal(dtype=jnp.bfloat16)(KEY, (4, 5))
    assert a.dtype == b.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
