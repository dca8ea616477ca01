"""Dropout: rate semantics, scaling, broadcast masks, RNG streams, deterministic switch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn


def _apply(layer, x, key=0, **kw):
    return layer.apply({}, x, rngs={"dropout": jax.random.key(key)}, **kw)


def test_rate_is_drop_probability_and_survivors_are_rescaled():
    x = jnp.ones((200, 50))
    y = _apply(nn.Dropout(0.25), x, deterministic=False)
    kept = np.asarray(y) != 0
    np.testing.assert_allclose(kept.mean(), 0.75, atol=0.02)
    np.testing.assert_allclose(np.asarray(y)[kept], 1 / 0.75, rtol=1e-6)


def test_deterministic_from_attribute_or_call_exactly_once():
    x = jnp.arange(4.0)
    np.testing.assert_array_equal(nn.Dropout(0.5, deterministic=True).apply({}, x), x)
    np.testing.assert_array_equal(nn.Dropout(0.5).apply({}, x, deterministic=True), x)
    with pytest.raises(ValueError, match="deterministic"):
        nn.Dropout(0.5).apply({}, x)
    with pytest.raises(ValueError, match="just once"):
        nn.Dropout(0.5, deterministic=False).apply({}, x, deterministic=True)


def test_edge_rates_need_no_rng():
    x = jnp.ones(3)
    assert nn.Dropout(1.0).apply({}, x, deterministic=False).tolist() == [0.0] * 3
    assert nn.Dropout(0.0).apply({}, x, deterministic=False).tolist() == [1.0] * 3


def test_broadcast_dims_share_the_mask():
    y = np.asarray(_apply(nn.Dropout(0.5, broadcast_dims=(0,)), jnp.ones((6, 20)),
                          deterministic=False))
    assert (y == y[0]).all()


def test_rng_stream_and_explicit_rng():
    x = jnp.ones((8, 8))
    a = _apply(nn.Dropout(0.5), x, key=1, deterministic=False)
    b = _apply(nn.Dropout(0.5), x, key=1, deterministic=False)
    c = _apply(nn.Dropout(0.5), x, key=2, deterministic=False)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    d = nn.Dropout(0.5, rng_collection="noise").apply(
        {}, x, deterministic=False, rngs={"noise": jax.random.key(1)})
    assert d.shape == x.shape
    e = nn.Dropout(0.5).apply({}, x, deterministic=False, rng=jax.random.key(3))
    f = nn.Dropout(0.5).apply({}, x, deterministic=False, rng=jax.random.key(3))
    np.testing.assert_array_equal(e, f)


def test_dtype_and_jit():
    x = jnp.ones((4, 4), jnp.bfloat16)
    f = jax.jit(lambda x, k: nn.Dropout(0.5).apply({}, x, deterministic=False,
                                                    rngs={"dropout": k}))
    assert f(x, jax.random.key(0)).dtype == jnp.bfloat16
