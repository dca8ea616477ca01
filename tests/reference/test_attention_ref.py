"""Differential tests: flaxen's attention functions and Modules against flax's."""

from __future__ import annotations

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen.attention as att
from flaxen.linen import _attention_fns as fns


def _qkv(shape_q, kv_len, seed=0, dtype=jnp.float32):
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
    shape_k = shape_q[:-3] + (kv_len,) + shape_q[-2:]
    return tuple(jax.random.normal(r, s, dtype) for r, s in
                 ((kq, shape_q), (kk, shape_k), (kv, shape_k)))


def _close(a, b, rtol=1e-6):
    """Within ``rtol`` relative to the largest magnitude (float32 rounding level)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    scale = max(np.max(np.abs(b)), 1e-30)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


# --- masks ------------------------------------------------------------------------------


def test_masks_match():
    x = jnp.array([[3, 0, 2, 0], [1, 1, 0, 0]])
    y = jnp.array([[1, 0, 2], [0, 0, 1]])
    for kw in ({}, {"extra_batch_dims": 2}, {"dtype": jnp.bool_}, {"pairwise_fn": jnp.less}):
        np.testing.assert_array_equal(att.make_attention_mask(x > 0, y > 0, **kw),
                                      fnn.make_attention_mask(x > 0, y > 0, **kw))
    ours, theirs = att.make_causal_mask(x, extra_batch_dims=1), fnn.make_causal_mask(
        x, extra_batch_dims=1)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
    m1, m2 = fnn.make_causal_mask(x), fnn.make_attention_mask(x > 0, x > 0)
    np.testing.assert_array_equal(att.combine_masks(m1, None, m2, dtype=jnp.int8),
                                  fnn.combine_masks(m1, None, m2, dtype=jnp.int8))


# --- functions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"bias": "bias"},
        {"mask": "mask"},
        {"bias": "bias", "mask": "mask", "dtype": jnp.bfloat16},
        {"dropout_rate": 0.3, "dropout_rng": 1},
        {"dropout_rate": 0.3, "dropout_rng": 1, "broadcast_dropout": False, "mask": "mask"},
        {"dropout_rate": 0.3, "dropout_rng": 1, "deterministic": True},
        {"force_fp32_for_softmax": True, "dtype": jnp.float16},
    ],
)
def test_functions_match_flax(kwargs):
    q, k, v = _qkv((2, 3, 4, 8), 5)
    resolved = dict(kwargs)
    if "bias" in kwargs:
        resolved["bias"] = jax.random.normal(jax.random.PRNGKey(4), (2, 4, 3, 5))
    if "mask" in kwargs:
        resolved["mask"] = jax.random.bernoulli(jax.random.PRNGKey(5), 0.6, (2, 1, 3, 5))
    if "dropout_rng" in kwargs:
        resolved["dropout_rng"] = jax.random.PRNGKey(kwargs["dropout_rng"])
    ours = att.dot_product_attention_weights(q, k, **resolved)
    theirs = fnn.dot_product_attention_weights(q, k, **resolved)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)  # same ops in the same order: bit-identical
    ours = att.dot_product_attention(q, k, v, **resolved)
    theirs = fnn.dot_product_attention(q, k, v, **resolved)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("shape_q", [(3, 2, 4), (2, 2, 3, 2, 4)])
def test_functions_match_flax_other_batch_ranks(shape_q):
    q, k, v = _qkv(shape_q, 6)
    np.testing.assert_array_equal(att.dot_product_attention(q, k, v),
                                  fnn.dot_product_attention(q, k, v))


def test_sown_weights_match_flax():
    q, k, v = _qkv((2, 3, 4, 8), 5)

    class Theirs(fnn.Module):
        @fnn.compact
        def __call__(self, q, k, v):
            return fnn.dot_product_attention(q, k, v, module=self)

    class Recorder:
        sown = None

        def sow(self, col, name, value):
            self.sown = (col, name, value)

    _, state = Theirs().init_with_output({}, q, k, v, mutable=True)
    rec = Recorder()
    att.dot_product_attention(q, k, v, module=rec)
    col, name, value = rec.sown
    np.testing.assert_array_equal(state[col][name][0], value)


@pytest.mark.parametrize("mask_kind", ["causal", "padding"])
def test_blockwise_path_matches_flax_to_float_rounding(mask_kind, monkeypatch):
    # q_len 40 with 16-query blocks: three blocks, the last one padded.
    monkeypatch.setattr(fns, "_BLOCKWISE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(fns, "_Q_BLOCK", 16)
    q, k, v = _qkv((2, 40, 2, 8), 40)
    mask = None
    if mask_kind == "causal":
        mask = fnn.make_causal_mask(jnp.ones((2, 40)))
    elif mask_kind == "padding":
        tokens = jnp.arange(40)[None] < jnp.array([[33], [40]])
        mask = fnn.make_attention_mask(tokens, tokens)
    cot = jax.random.normal(jax.random.PRNGKey(8), q.shape)

    def loss(fn):
        def f(q, k, v):
            out = fn(q, k, v, mask=mask)
            return jnp.sum(out * cot), out

        return jax.jit(jax.value_and_grad(f, (0, 1, 2), has_aux=True))(q, k, v)

    (l1, out1), g1 = loss(att.dot_product_attention)
    (l2, out2), g2 = loss(fnn.dot_product_attention)
    _close(out1, out2)
    _close(l1, l2, rtol=1e-5)
    for a, b in zip(g1, g2):
        _close(a, b, rtol=2e-6)


def test_blockwise_default_threshold_matches_flax():
    q, k, v = _qkv((1, 512, 1, 8), 512)
    _close(jax.jit(att.dot_product_attention)(q, k, v),
           jax.jit(fnn.dot_product_attention)(q, k, v))


@pytest.mark.parametrize("call", [
    lambda m, q, k, v: m.dot_product_attention(q, k[..., :7], v),
    lambda m, q, k, v: m.dot_product_attention(q, k[:, :, :3], v),
    lambda m, q, k, v: m.dot_product_attention(q, k[0], v),
    lambda m, q, k, v: m.dot_product_attention(q, k, v[:, :4]),
])
def test_bad_shapes_raise_what_flax_raises(call):
    q, k, v = _qkv((2, 3, 4, 8), 5)
    with pytest.raises(AssertionError):
        call(fnn, q, k, v)
    with pytest.raises(AssertionError):
        call(att, q, k, v)
