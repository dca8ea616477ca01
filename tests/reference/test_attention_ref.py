"""Differential tests: flaxen's attention functions and Modules against flax's."""

from __future__ import annotations

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen.attention as att
from flaxen.layer_math import attention as fns
from tests import _inputs


def _qkv(shape_q, kv_len, seed=0, dtype=jnp.float32):
    shape_k = shape_q[:-3] + (kv_len,) + shape_q[-2:]
    return tuple(_inputs.normal((seed, i), s, dtype)
                 for i, s in enumerate((shape_q, shape_k, shape_k)))


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
        {"force_fp32_for_softmax": True, "dtype": jnp.float16},
    ],
)
def test_functions_match_flax(kwargs):
    q, k, v = _qkv((2, 3, 4, 8), 5)
    resolved = dict(kwargs)
    if "bias" in kwargs:
        resolved["bias"] = _inputs.normal(4, (2, 4, 3, 5))
    if "mask" in kwargs:
        resolved["mask"] = _inputs.bernoulli(5, 0.6, (2, 1, 3, 5))
    if "dropout_rng" in kwargs:
        resolved["dropout_rng"] = jax.random.PRNGKey(kwargs["dropout_rng"])
    ours = att.dot_product_attention_weights(q, k, **resolved)
    theirs = fnn.dot_product_attention_weights(q, k, **resolved)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)  # same ops in the same order: bit-identical
    ours = att.dot_product_attention(q, k, v, **resolved)
    theirs = fnn.dot_product_attention(q, k, v, **resolved)
    assert ours.dtype == theirs.dtype
    if "dtype" in kwargs or "dropout_rate" in kwargs:
        np.testing.assert_array_equal(ours, theirs)  # plain path: bit-identical
    else:  # float32 without dropout: jax.nn.dot_product_attention, same to float rounding
        _close(ours, theirs)


@pytest.mark.parametrize("shape_q", [(3, 2, 4), (2, 2, 3, 2, 4)])
def test_functions_match_flax_other_batch_ranks(shape_q):
    q, k, v = _qkv(shape_q, 6)
    _close(att.dot_product_attention(q, k, v), fnn.dot_product_attention(q, k, v))


def _spy_fused(monkeypatch):
    # The fused path is taken on accelerators only; let it run on the CPU here.
    monkeypatch.setattr(fns, "_FUSED_BACKENDS", frozenset({jax.default_backend()}))
    calls = []
    real = jax.nn.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", spy)
    return calls


@pytest.mark.parametrize(
    "shape_q,kv_len,mask_shape,bias_shape",
    [
        ((2, 5, 3, 4), 7, (2, 1, 5, 7), (3, 5, 7)),
        ((5, 2, 4), 5, (5, 5), None),  # no batch axes
        ((2, 3, 6, 2, 4), 4, (3, 1, 1, 4), (2, 1, 2, 1, 4)),  # two batch axes, partial bcast
        ((1, 4, 2, 8), 4, None, (2, 4, 4)),
    ],
)
def test_fused_path_matches_flax_values_and_grads(monkeypatch, shape_q, kv_len, mask_shape,
                                                  bias_shape):
    calls = _spy_fused(monkeypatch)
    q, k, v = _qkv(shape_q, kv_len)
    mask = None if mask_shape is None else _inputs.bernoulli(5, 0.7, mask_shape)
    bias = None if bias_shape is None else _inputs.normal(7, bias_shape)
    cot = _inputs.normal(6, q.shape)

    def vg(fn):
        def loss(q, k, v, bias):
            out = fn(q, k, v, bias=bias, mask=mask)
            return jnp.sum(out * cot), out
        return jax.jit(jax.value_and_grad(loss, (0, 1, 2, 3), has_aux=True))(q, k, v, bias)

    (_, ours), g_ours = vg(att.dot_product_attention)
    (_, theirs), g_theirs = vg(fnn.dot_product_attention)
    assert calls, "the fused path was not taken"
    _close(ours, theirs)
    for a, b in zip(jax.tree.leaves(g_ours), jax.tree.leaves(g_theirs)):
        _close(a, b, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"precision": jax.lax.Precision.HIGHEST},
        {"dtype": jnp.bfloat16},
        {"dropout_rate": 0.5, "dropout_rng": jax.random.PRNGKey(1)},
        {"v_depth": 3},
    ],
)
def test_fused_path_not_taken_when_it_would_differ(monkeypatch, kwargs):
    calls = _spy_fused(monkeypatch)
    kwargs = dict(kwargs)
    q, k, v = _qkv((2, 4, 2, 8), 4)
    if "v_depth" in kwargs:
        v = v[..., : kwargs.pop("v_depth")]
    ours = att.dot_product_attention(q, k, v, **kwargs)
    np.testing.assert_array_equal(ours, fnn.dot_product_attention(q, k, v, **kwargs))
    assert not calls


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


@pytest.mark.parametrize("mask_kind", ["causal", "padding", "bias"])
def test_blockwise_path_matches_flax_to_float_rounding(mask_kind, monkeypatch):
    # q_len 40 with 16-query blocks: three blocks, the last one padded.
    monkeypatch.setattr(fns, "_BLOCKWISE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(fns, "_Q_BLOCK", 16)
    q, k, v = _qkv((2, 40, 2, 8), 40)
    mask = bias = None
    if mask_kind == "bias":  # a learned relative-position-style bias, differentiated too
        bias = _inputs.normal(9, (2, 40, 40))
        mask = fnn.make_causal_mask(jnp.ones((2, 40)))
    if mask_kind == "causal":
        mask = fnn.make_causal_mask(jnp.ones((2, 40)))
    elif mask_kind == "padding":
        tokens = jnp.arange(40)[None] < jnp.array([[33], [40]])
        mask = fnn.make_attention_mask(tokens, tokens)
    cot = _inputs.normal(8, q.shape)

    def loss(fn):
        def f(q, k, v, bias):
            out = fn(q, k, v, mask=mask, bias=bias)
            return jnp.sum(out * cot), out

        return jax.jit(jax.value_and_grad(f, (0, 1, 2, 3), has_aux=True))(q, k, v, bias)

    (l1, out1), g1 = loss(att.dot_product_attention)
    (l2, out2), g2 = loss(fnn.dot_product_attention)
    _close(out1, out2)
    _close(l1, l2, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
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


# --- Modules ----------------------------------------------------------------------------

import flaxen.linen as nn  # noqa: E402


def _same_tree(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


_CONFIGS = [
    dict(num_heads=2),
    dict(num_heads=4, qkv_features=8, out_features=3, use_bias=False),
    dict(num_heads=2, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16),
    dict(num_heads=2, dtype=jnp.float16, force_fp32_for_softmax=True),
    dict(num_heads=2, out_kernel_init=fnn.initializers.normal(0.5),
         out_bias_init=fnn.initializers.ones_init()),
]


@pytest.mark.parametrize("config", _CONFIGS)
def test_mhdpa_params_and_outputs_match_flax(config):
    xq = _inputs.normal(1, (2, 3, 6))
    xkv = _inputs.normal(2, (2, 5, 4))
    mask = fnn.make_attention_mask(jnp.ones((2, 3)), jnp.arange(5)[None] < jnp.array([[5], [2]]))
    ours_layer = nn.MultiHeadDotProductAttention(**config)
    theirs_layer = fnn.MultiHeadDotProductAttention(**config)
    ours = ours_layer.init(jax.random.PRNGKey(0), xq, xkv)
    theirs = theirs_layer.init(jax.random.PRNGKey(0), xq, xkv)
    _same_tree(ours, theirs)
    out_ours = jax.jit(lambda v: ours_layer.apply(v, xq, xkv, mask=mask))(theirs)
    out_theirs = jax.jit(lambda v: theirs_layer.apply(v, xq, xkv, mask=mask))(theirs)
    assert out_ours.dtype == out_theirs.dtype
    _close(out_ours, out_theirs, rtol=1e-6 if out_ours.dtype == jnp.float32 else 1e-2)


def test_self_attention_and_alias_names_match_flax():
    x = _inputs.normal(1, (2, 3, 4))

    def wrap(lib, cls_name):
        class Outer(lib.Module):
            @lib.compact
            def __call__(self, x):
                return getattr(lib, cls_name)(num_heads=2)(x)

        return Outer()

    for cls_name in ("SelfAttention", "MultiHeadAttention", "MultiHeadDotProductAttention"):
        if cls_name == "SelfAttention":  # deprecated, as in flax: every call warns
            with pytest.warns(DeprecationWarning, match="SelfAttention will be deprecated soon"):
                ours = wrap(nn, cls_name).init(jax.random.PRNGKey(0), x)
        else:
            ours = wrap(nn, cls_name).init(jax.random.PRNGKey(0), x)
        theirs = wrap(fnn, cls_name).init(jax.random.PRNGKey(0), x)
        _same_tree(ours, theirs)


def test_mhdpa_dropout_and_sow_match_flax():
    x = _inputs.normal(1, (2, 4, 8))
    kw = dict(num_heads=2, dropout_rate=0.3)
    variables = fnn.MultiHeadDotProductAttention(**kw).init(jax.random.PRNGKey(0), x,
                                                            deterministic=True)
    rngs = {"dropout": jax.random.PRNGKey(5)}

    def run(lib):
        return lib.MultiHeadDotProductAttention(**kw).apply(
            variables, x, deterministic=False, sow_weights=True, rngs=rngs,
            mutable=["intermediates"])

    (o1, s1), (o2, s2) = run(nn), run(fnn)
    np.testing.assert_array_equal(o1, o2)
    _same_tree(s1, s2)


def test_mhdpa_normalize_qk_matches_flax():
    pytest.importorskip("flaxen.linen.normalization")
    x = _inputs.normal(1, (2, 4, 8))
    kw = dict(num_heads=2, normalize_qk=True)
    ours = nn.MultiHeadDotProductAttention(**kw).init(jax.random.PRNGKey(0), x)
    theirs = fnn.MultiHeadDotProductAttention(**kw).init(jax.random.PRNGKey(0), x)
    _same_tree(ours, theirs)
    _close(nn.MultiHeadDotProductAttention(**kw).apply(theirs, x),
           fnn.MultiHeadDotProductAttention(**kw).apply(theirs, x))


def test_mhdpa_decode_matches_flax_step_by_step():
    x = _inputs.normal(1, (2, 4, 8))
    kw = dict(num_heads=2, decode=True)
    ours_vars = nn.MultiHeadDotProductAttention(**kw).init(jax.random.PRNGKey(0), x)
    theirs_vars = fnn.MultiHeadDotProductAttention(**kw).init(jax.random.PRNGKey(0), x)
    _same_tree(ours_vars, theirs_vars)

    def stepper(lib):
        layer = lib.MultiHeadDotProductAttention(**kw)
        return jax.jit(lambda v, xs: layer.apply(v, xs, mutable=["cache"]))

    ours_step, theirs_step = stepper(nn), stepper(fnn)
    for i in range(x.shape[1]):
        o1, m1 = ours_step(ours_vars, x[:, i:i + 1])
        o2, m2 = theirs_step(theirs_vars, x[:, i:i + 1])
        _close(o1, o2)
        _same_tree(m1, m2)
        ours_vars = {**ours_vars, **m1}
        theirs_vars = {**theirs_vars, **m2}


def test_mhdpa_custom_matmul_classes_match_flax():
    x = _inputs.normal(1, (2, 4, 8))

    class DotGeneral:
        def __call__(self, *args, **kwargs):
            return jax.lax.dot_general(*args, **kwargs)

    class Einsum:
        def __call__(self, spec, *args, **kwargs):
            return jnp.einsum(spec, *args, **kwargs)

    kw = dict(num_heads=2, qkv_dot_general_cls=DotGeneral, out_dot_general_cls=DotGeneral,
              qk_attn_weights_einsum_cls=Einsum, attn_weights_value_einsum_cls=Einsum)
    variables = fnn.MultiHeadDotProductAttention(**kw).init(jax.random.PRNGKey(0), x)
    _same_tree(nn.MultiHeadDotProductAttention(**kw).init(jax.random.PRNGKey(0), x), variables)
    _close(nn.MultiHeadDotProductAttention(**kw).apply(variables, x),
           fnn.MultiHeadDotProductAttention(**kw).apply(variables, x))
