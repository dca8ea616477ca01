"""Tests for flaxen.linen.attention: masks, attention functions, the blockwise path, Modules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.layer_math import attention as fns
from flaxen.linen.attention import (
    combine_masks,
    dot_product_attention,
    dot_product_attention_weights,
    make_attention_mask,
    make_causal_mask,
)
from tests import _inputs


def _qkv(shape_q, kv_len, seed=0, dtype=jnp.float32, v_depth=None):
    shape_k = shape_q[:-3] + (kv_len,) + shape_q[-2:]
    shape_v = shape_k[:-1] + (v_depth or shape_q[-1],)
    return tuple(_inputs.normal((seed, i), s, dtype)
                 for i, s in enumerate((shape_q, shape_k, shape_v)))


@pytest.fixture
def force_blockwise(monkeypatch):
    """Makes tiny inputs take the blockwise path, with a block that does not divide q_len."""
    monkeypatch.setattr(fns, "_BLOCKWISE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(fns, "_Q_BLOCK", 4)


def _reference_attention(q, k, v, mask=None, bias=None):
    """Attention written out from its definition, in float64 numpy."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    logits = np.einsum("...qhd,...khd->...hqk", q / np.sqrt(q.shape[-1]), k)
    if bias is not None:
        logits = logits + np.asarray(bias, np.float64)
    if mask is not None:
        logits = np.where(np.asarray(mask) != 0, logits, -1e30)
    logits = logits - logits.max(-1, keepdims=True)
    w = np.exp(logits)
    w = w / w.sum(-1, keepdims=True)
    return np.einsum("...hqk,...khd->...qhd", w, v), w


# --- masks ------------------------------------------------------------------------------


def test_make_attention_mask_padding_shape_and_values():
    q_tokens = jnp.array([[3, 4, 0], [1, 0, 0]])
    k_tokens = jnp.array([[1, 0], [2, 2]])
    mask = make_attention_mask(q_tokens > 0, k_tokens > 0)
    assert mask.shape == (2, 1, 3, 2)
    assert mask.dtype == jnp.float32
    expected = (np.asarray(q_tokens > 0)[:, :, None] & np.asarray(k_tokens > 0)[:, None, :])
    np.testing.assert_array_equal(mask[:, 0], expected.astype(np.float32))


def test_make_attention_mask_pairwise_fn_extra_dims_and_dtype():
    q = jnp.array([[0, 2]])
    k = jnp.array([[1, 2, 3]])
    mask = make_attention_mask(q, k, pairwise_fn=jnp.greater_equal, extra_batch_dims=2,
                               dtype=jnp.bool_)
    assert mask.shape == (1, 1, 1, 1, 2, 3)
    assert mask.dtype == jnp.bool_
    np.testing.assert_array_equal(mask[0, 0, 0, 0], [[False, False, False], [True, True, False]])


def test_make_causal_mask_is_lower_triangular():
    mask = make_causal_mask(jnp.zeros((3, 5)), extra_batch_dims=1)
    assert mask.shape == (1, 3, 1, 5, 5)
    np.testing.assert_array_equal(mask[0, 1, 0], np.tril(np.ones((5, 5), np.float32)))


def test_combine_masks_ands_and_skips_none():
    a = jnp.array([[1, 1, 0, 1]])
    b = jnp.array([[1, 0, 0, 1]])
    out = combine_masks(a, None, b, dtype=jnp.int32)
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(out, [[1, 0, 0, 1]])
    assert combine_masks(None, None) is None
    np.testing.assert_array_equal(combine_masks(None, a), a.astype(jnp.float32))


def test_combine_masks_rank_mismatch_names_the_shapes():
    with pytest.raises(ValueError, match=r"same rank.*\(1, 2\).*\(2,\)") as info:
        combine_masks(jnp.ones((1, 2)), jnp.ones((2,)))
    assert isinstance(info.value, AssertionError)  # what Flax raises, still catchable


# --- attention weights ------------------------------------------------------------------


def test_weights_match_definition_with_bias_and_mask():
    q, k, _ = _qkv((2, 3, 4, 8), 5)
    bias = _inputs.normal(9, (2, 4, 3, 5))
    mask = _inputs.bernoulli(7, 0.6, (2, 1, 3, 5)).at[..., 0].set(True)
    w = dot_product_attention_weights(q, k, bias=bias, mask=mask)
    assert w.shape == (2, 4, 3, 5)
    _, expected = _reference_attention(q, k, k, mask=mask, bias=bias)
    np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-6)
    assert float(jnp.max(jnp.where(mask, 0.0, w))) == 0.0


def test_fully_masked_row_gives_uniform_weights():
    q, k, _ = _qkv((1, 2, 1, 4), 4)
    mask = jnp.array([[[[1, 1, 0, 0], [0, 0, 0, 0]]]])
    w = dot_product_attention_weights(q, k, mask=mask)
    np.testing.assert_allclose(w[0, 0, 1], np.full(4, 0.25), rtol=1e-6)


def test_weights_without_batch_dims_and_dtype_inference():
    q, k, _ = _qkv((3, 2, 4), 5)
    assert dot_product_attention_weights(q, k).shape == (2, 3, 5)
    qi = jnp.ones((3, 2, 4), jnp.int32)
    assert dot_product_attention_weights(qi, qi).dtype == jnp.float32
    qb = q.astype(jnp.bfloat16)
    assert dot_product_attention_weights(qb, k.astype(jnp.bfloat16)).dtype == jnp.bfloat16
    assert dot_product_attention_weights(qb, k).dtype == jnp.float32
    assert dot_product_attention_weights(q, k, dtype=jnp.bfloat16).dtype == jnp.bfloat16
    forced = dot_product_attention_weights(qb, qb, force_fp32_for_softmax=True)
    assert forced.dtype == jnp.float32


def test_weights_sown_into_module_before_dropout():
    class Recorder:
        def __init__(self):
            self.calls = []

        def sow(self, col, name, value):
            self.calls.append((col, name, value))

    q, k, _ = _qkv((2, 3, 2, 4), 5)
    rec = Recorder()
    dot_product_attention_weights(q, k, module=rec, dropout_rate=0.5,
                                  dropout_rng=jax.random.PRNGKey(0))
    [(col, name, value)] = rec.calls
    assert (col, name, value.shape) == ("intermediates", "attention_weights", (2, 2, 3, 5))
    np.testing.assert_allclose(value.sum(-1), 1.0, rtol=1e-6)


def test_dropout_broadcast_pattern_and_rescale():
    q, k, _ = _qkv((2, 3, 4, 8), 5)
    plain = dot_product_attention_weights(q, k)
    rng = jax.random.PRNGKey(3)
    dropped = dot_product_attention_weights(q, k, dropout_rng=rng, dropout_rate=0.5)
    kept = dropped != 0
    # One (q, kv) pattern shared by every batch element and head.
    np.testing.assert_array_equal(kept, jnp.broadcast_to(kept[:1, :1], kept.shape))
    np.testing.assert_allclose(jnp.where(kept, dropped, 0), jnp.where(kept, plain * 2, 0),
                               rtol=1e-6)
    assert 0 < int(kept[0, 0].sum()) < kept[0, 0].size
    per_elem = dot_product_attention_weights(q, k, dropout_rng=rng, dropout_rate=0.5,
                                             broadcast_dropout=False)
    k2 = np.asarray(per_elem != 0)
    assert not (k2 == k2[:1, :1]).all()


def test_dropout_off_when_deterministic_or_rate_zero():
    q, k, _ = _qkv((2, 3, 4, 8), 5)
    plain = dot_product_attention_weights(q, k)
    rng = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(
        dot_product_attention_weights(q, k, dropout_rng=rng, dropout_rate=0.5,
                                      deterministic=True), plain)
    np.testing.assert_array_equal(dot_product_attention_weights(q, k, dropout_rate=0.0), plain)


def test_dropout_without_rng_says_how_to_fix():
    q, k, _ = _qkv((2, 3, 4, 8), 5)
    with pytest.raises(TypeError, match="dropout_rng"):
        dot_product_attention_weights(q, k, dropout_rate=0.1)


# --- dot_product_attention --------------------------------------------------------------


@pytest.mark.parametrize("shape_q,kv_len", [((2, 3, 4, 8), 5), ((3, 2, 4), 6),
                                            ((2, 1, 3, 1, 4), 2)])
def test_attention_matches_definition(shape_q, kv_len):
    q, k, v = _qkv(shape_q, kv_len, v_depth=3)
    out = dot_product_attention(q, k, v)
    assert out.shape == shape_q[:-1] + (3,)
    expected, _ = _reference_attention(q, k, v)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_attention_custom_einsums_are_used():
    q, k, v = _qkv((2, 3, 4, 8), 5)
    calls = []

    def qk(spec, a, b, **kw):
        calls.append(("qk", spec))
        return jnp.einsum(spec, a, b, **kw)

    def wv(spec, a, b, **kw):
        calls.append(("wv", spec))
        return jnp.einsum(spec, a, b, **kw)

    out = dot_product_attention(q, k, v, qk_attn_weights_einsum=qk, attn_weights_value_einsum=wv)
    assert [c[0] for c in calls] == ["qk", "wv"]
    np.testing.assert_allclose(out, dot_product_attention(q, k, v), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(k_shape=(2, 5, 4, 7)), r"depths must match.*depth 8.*depth 7"),
        (dict(k_shape=(2, 5, 3, 8)), r"num_heads must match.*4 heads.*3"),
        (dict(k_shape=(5, 4, 8)), r"same rank"),
        (dict(v_shape=(2, 6, 4, 8)), r"lengths must match.*length 5.*length 6"),
        (dict(k_shape=(3, 5, 4, 8), v_shape=(3, 5, 4, 8)), r"batch dims must match"),
        (dict(q_shape=(4, 8), k_shape=(4, 8), v_shape=(4, 8)), r"rank >= 3"),
    ],
)
def test_attention_bad_shapes(bad, match):
    q = jnp.ones(bad.get("q_shape", (2, 3, 4, 8)))
    k = jnp.ones(bad.get("k_shape", (2, 5, 4, 8)))
    v = jnp.ones(bad.get("v_shape", k.shape))
    with pytest.raises(ValueError, match=match) as info:
        dot_product_attention(q, k, v)
    assert isinstance(info.value, AssertionError)


@pytest.mark.parametrize("arg", ["mask", "bias"])
def test_attention_mask_or_bias_of_wrong_shape(arg):
    q, k, v = _qkv((2, 3, 4, 8), 5)
    bad = jnp.ones((2, 4, 3, 7))
    with pytest.raises(ValueError, match=rf"{arg} of shape \(2, 4, 3, 7\).*\(2, 4, 3, 5\)"):
        dot_product_attention(q, k, v, **{arg: bad})


# --- the blockwise (memory-lean) path ---------------------------------------------------


def _plain_attention(q, k, v, **kwargs):
    """The unblocked computation: the weights, then one einsum with the values."""
    precision = kwargs.get("precision")
    weights = dot_product_attention_weights(q, k, **kwargs)
    return jnp.einsum("...hqk,...khd->...qhd", weights, v, precision=precision)


@pytest.mark.parametrize(
    "shape_q,kv_len,mask_shape,bias_shape",
    [
        ((2, 10, 3, 4), 7, (2, 1, 10, 7), (3, 10, 7)),
        ((10, 2, 4), 10, (10, 10), None),
        ((2, 1, 9, 2, 4), 6, (2, 1, 1, 9, 1), (2, 1, 2, 1, 6)),  # whole rows masked
    ],
)
def test_blockwise_matches_plain_path_values_and_grads(force_blockwise, shape_q, kv_len,
                                                       mask_shape, bias_shape):
    q, k, v = _qkv(shape_q, kv_len, v_depth=5)
    mask = _inputs.bernoulli(5, 0.7, mask_shape)
    bias = None
    if bias_shape is not None:
        bias = _inputs.normal(7, bias_shape)
    cot = _inputs.normal(6, shape_q[:-1] + (5,))

    def loss(q, k, v, bias, blockwise):
        attend = dot_product_attention if blockwise else _plain_attention
        out = attend(q, k, v, mask=mask, bias=bias)
        return jnp.sum(out * cot), out

    vg = jax.jit(jax.value_and_grad(loss, (0, 1, 2, 3), has_aux=True), static_argnums=4)
    (_, out_b), grads_b = vg(q, k, v, bias, True)
    (_, out_p), grads_p = vg(q, k, v, bias, False)
    np.testing.assert_allclose(out_b, out_p, rtol=1e-5, atol=1e-6)
    for gb, gp in zip(jax.tree.leaves(grads_b), jax.tree.leaves(grads_p)):
        np.testing.assert_allclose(gb, gp, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype,force_fp32", [(jnp.bfloat16, False), (jnp.float16, True)])
def test_blockwise_low_precision(force_blockwise, dtype, force_fp32):
    q, k, v = _qkv((2, 9, 2, 4), 6, dtype=dtype)
    mask = make_causal_mask(jnp.ones((2, 9)))[..., :6]
    out_b = jax.jit(dot_product_attention, static_argnames="force_fp32_for_softmax")(
        q, k, v, mask=mask, force_fp32_for_softmax=force_fp32)
    out_p = _plain_attention(q, k, v, mask=mask, force_fp32_for_softmax=force_fp32)
    assert out_b.dtype == out_p.dtype == (jnp.float32 if force_fp32 else dtype)
    np.testing.assert_allclose(np.asarray(out_b, np.float32), np.asarray(out_p, np.float32),
                               rtol=2e-2, atol=2e-2)
    g = jax.jit(jax.grad(
        lambda q: dot_product_attention(q, k, v, mask=mask).astype(jnp.float32).sum()))
    assert g(q).dtype == dtype


def test_blockwise_supports_forward_mode_and_vmap(force_blockwise):
    q, k, v = _qkv((2, 9, 2, 4), 6)
    mask = _inputs.bernoulli(5, 0.7, (2, 1, 9, 6))
    tangents = _qkv((2, 9, 2, 4), 6, seed=1)

    def lean(q, k, v):
        return dot_product_attention(q, k, v, mask=mask)

    def plain(q, k, v):
        return _plain_attention(q, k, v, mask=mask)

    _, t_lean = jax.jit(lambda *a: jax.jvp(lean, a, tangents))(q, k, v)
    _, t_plain = jax.jit(lambda *a: jax.jvp(plain, a, tangents))(q, k, v)
    np.testing.assert_allclose(t_lean, t_plain, rtol=1e-4, atol=1e-5)
    per_example = jax.jit(jax.vmap(lambda q, k, v, m: dot_product_attention(q, k, v, mask=m)))
    np.testing.assert_allclose(per_example(q, k, v, mask), plain(q, k, v), rtol=1e-5, atol=1e-6)


def test_blockwise_needs_less_memory_for_gradients():
    q, k, v = _qkv((1, 1024, 2, 8), 1024)
    bias = jnp.zeros((2, 1, 1024))  # per-head, per-key bias: stays on the lean path

    def temp_bytes(attend):
        def loss(q, k, v):
            return attend(q, k, v, bias=bias).sum()

        compiled = jax.jit(jax.grad(loss, (0, 1, 2))).lower(q, k, v).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    lean, plain = temp_bytes(dot_product_attention), temp_bytes(_plain_attention)
    assert lean * 2 < plain, (lean, plain)


# --- Modules ----------------------------------------------------------------------------

import warnings  # noqa: E402

import flaxen.linen as nn  # noqa: E402
from flaxen import errors  # noqa: E402


def test_mhdpa_param_tree_and_call_forms():
    xq = _inputs.normal(1, (2, 3, 6))
    xkv = _inputs.normal(2, (2, 5, 4))
    layer = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8, out_features=3)
    variables = layer.init(jax.random.PRNGKey(0), xq, xkv)
    shapes = jax.tree.map(jnp.shape, variables["params"])
    assert shapes == {
        "query": {"kernel": (6, 2, 4), "bias": (2, 4)},
        "key": {"kernel": (4, 2, 4), "bias": (2, 4)},
        "value": {"kernel": (4, 2, 4), "bias": (2, 4)},
        "out": {"kernel": (2, 4, 3), "bias": (3,)},
    }
    out = layer.apply(variables, xq, xkv)
    assert out.shape == (2, 3, 3)
    with pytest.warns(DeprecationWarning, match="inputs_kv arg will be deprecated"):
        np.testing.assert_array_equal(layer.apply(variables, xq, inputs_kv=xkv), out)
    np.testing.assert_array_equal(layer.apply(variables, xq, xkv, xkv), out)
    # The pre-0.7.4 positional form (inputs_q, inputs_kv, mask) is gone, as in Flax: the
    # mask is taken as inputs_v, whose projection then does not fit the value kernel.
    mask = make_attention_mask(jnp.ones((2, 3)), jnp.arange(5)[None] < jnp.array([[5], [2]]))
    with pytest.raises(errors.ScopeParamShapeError, match=r'"kernel" in "/value"'):
        layer.apply(variables, xq, xkv, mask)


def test_self_attention_equals_mhdpa_on_same_input():
    x = _inputs.normal(1, (2, 4, 8))
    mask = make_causal_mask(x[..., 0])
    with pytest.warns(DeprecationWarning, match="SelfAttention will be deprecated soon"):
        variables = nn.SelfAttention(num_heads=4).init(jax.random.PRNGKey(0), x)
    with pytest.warns(DeprecationWarning, match="SelfAttention will be deprecated soon"):
        a = nn.SelfAttention(num_heads=4).apply(variables, x, mask)
    b = nn.MultiHeadDotProductAttention(num_heads=4).apply(variables, x, mask=mask)
    np.testing.assert_array_equal(a, b)
    assert nn.MultiHeadAttention(num_heads=4).apply(variables, x).shape == x.shape


def test_mhdpa_decode_matches_full_causal():
    length = 5
    x = _inputs.normal(1, (2, length, 8))
    full_layer = nn.MultiHeadDotProductAttention(num_heads=2)
    params = full_layer.init(jax.random.PRNGKey(0), x)["params"]
    full = full_layer.apply({"params": params}, x, mask=make_causal_mask(x[..., 0]))
    dec = nn.MultiHeadDotProductAttention(num_heads=2, decode=True)
    cache = dec.init(jax.random.PRNGKey(0), x)["cache"]
    assert cache["cached_key"].shape == (2, length, 2, 4)
    step = jax.jit(lambda c, xs: dec.apply({"params": params, "cache": c}, xs, mutable=["cache"]))
    outs = []
    for i in range(length):
        out, mutated = step(cache, x[:, i:i + 1])
        cache = mutated["cache"]
        outs.append(out)
    assert int(cache["cache_index"]) == length
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, rtol=1e-5, atol=1e-6)


def test_mhdpa_dropout_needs_deterministic_and_uses_dropout_rng():
    x = _inputs.normal(1, (2, 4, 8))
    layer = nn.MultiHeadDotProductAttention(num_heads=2, dropout_rate=0.5)
    with pytest.raises(ValueError, match="deterministic"):
        layer.init(jax.random.PRNGKey(0), x)
    variables = layer.init(jax.random.PRNGKey(0), x, deterministic=True)
    plain = layer.apply(variables, x, deterministic=True)
    a = layer.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(3)})
    b = layer.apply(variables, x, deterministic=False, dropout_rng=jax.random.PRNGKey(3))
    b2 = layer.apply(variables, x, deterministic=False, dropout_rng=jax.random.PRNGKey(3))
    c = layer.apply(variables, x, deterministic=False, dropout_rng=jax.random.PRNGKey(4))
    np.testing.assert_array_equal(b, b2)
    assert not np.allclose(a, plain) and not np.allclose(b, plain) and not np.allclose(b, c)
    det = nn.MultiHeadDotProductAttention(num_heads=2, dropout_rate=0.5, deterministic=True)
    np.testing.assert_array_equal(det.apply(variables, x), plain)


def test_mhdpa_sow_weights():
    x = _inputs.normal(1, (2, 4, 8))
    layer = nn.MultiHeadDotProductAttention(num_heads=2)
    variables = layer.init(jax.random.PRNGKey(0), x)
    _, state = layer.apply(variables, x, sow_weights=True, mutable=["intermediates"])
    (weights,) = state["intermediates"]["attention_weights"]
    assert weights.shape == (2, 2, 4, 4)
    _, state = layer.apply(variables, x, mutable=["intermediates"])
    assert "intermediates" not in state or not state["intermediates"]


def test_mhdpa_custom_attention_fn_gets_only_standard_arguments():
    seen = {}

    def my_attention(query, key, value, **kwargs):
        seen.update(kwargs)
        return dot_product_attention(query, key, value, **kwargs)

    x = jnp.ones((1, 3, 4))
    nn.MultiHeadDotProductAttention(num_heads=2, attention_fn=my_attention).init(
        jax.random.PRNGKey(0), x)
    assert set(seen) == {"mask", "dropout_rng", "dropout_rate", "broadcast_dropout",
                         "deterministic", "dtype", "precision"}


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_mhdpa_dtypes(dtype):
    x = jnp.ones((1, 3, 4), dtype)
    layer = nn.MultiHeadDotProductAttention(num_heads=2, dtype=dtype)
    out, variables = layer.init_with_output(jax.random.PRNGKey(0), x)
    assert out.dtype == dtype
    assert variables["params"]["query"]["kernel"].dtype == jnp.float32
    out = nn.MultiHeadDotProductAttention(num_heads=2).apply(variables, x)
    assert out.dtype == jnp.float32  # inputs promoted with float32 params


def test_mhdpa_heads_not_dividing_features():
    x = jnp.ones((1, 3, 8))
    with pytest.raises(ValueError, match=r"MultiHeadDotProductAttention.*\(8\).*heads \(3\)"):
        nn.MultiHeadDotProductAttention(num_heads=3).init(jax.random.PRNGKey(0), x)
    with pytest.raises(AssertionError, match=r"qkv_features=10.*num_heads=4"):
        nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=10).init(
            jax.random.PRNGKey(0), x)


def test_mhdpa_mask_of_wrong_shape_names_expected_shape():
    x = jnp.ones((2, 3, 8))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 3, 4\).*\(2, 2, 3, 3\)"):
        nn.MultiHeadDotProductAttention(num_heads=2).init(
            jax.random.PRNGKey(0), x, mask=jnp.ones((2, 1, 3, 4)))


def test_mhdpa_kv_features_differ_from_params():
    layer = nn.MultiHeadDotProductAttention(num_heads=2)
    variables = layer.init(jax.random.PRNGKey(0), jnp.ones((1, 3, 8)), jnp.ones((1, 4, 6)))
    with pytest.raises(errors.ScopeParamShapeError, match=r'"kernel" in "/key".*\(6, 2, 4\)'):
        layer.apply(variables, jnp.ones((1, 3, 8)), jnp.ones((1, 4, 5)))


def test_mhdpa_inputs_rank_and_argument_conflicts():
    layer = nn.MultiHeadDotProductAttention(num_heads=2)
    with pytest.raises(ValueError, match=r"inputs_q of shape \(8,\).*at least 2"):
        layer.init(jax.random.PRNGKey(0), jnp.ones((8,)))
    x = jnp.ones((1, 3, 8))
    with pytest.raises(ValueError, match="inputs_kv"):
        layer.init(jax.random.PRNGKey(0), x, x, inputs_kv=x)
    with pytest.raises(ValueError, match="`inputs_k` cannot be None"):
        layer.init(jax.random.PRNGKey(0), x, inputs_v=x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer.init(jax.random.PRNGKey(0), x, x, jnp.ones((1, 3, 3)))
    assert any("signature of MultiHeadDotProductAttention's `__call__` method has changed"
               in str(w.message) and w.category is DeprecationWarning for w in caught)


def test_mhdpa_decode_without_cache_collection():
    x = jnp.ones((1, 4, 8))
    layer = nn.MultiHeadDotProductAttention(num_heads=2, decode=True)
    params = layer.init(jax.random.PRNGKey(0), x)["params"]
    with pytest.raises(errors.ScopeCollectionNotFound, match=r"decode=True.*mutable=\['cache'\]"):
        layer.apply({"params": params}, x[:, :1])
    variables = layer.init(jax.random.PRNGKey(0), x)
    with pytest.raises(ValueError, match=r"expected query shape \(1, 1, 2, 4\).*one position"):
        layer.apply(variables, x[:, :2], mutable=["cache"])


def test_einsum_dot_general_replaces_both_matmuls():
    q, k, v = _qkv((2, 3, 4, 8), 5)
    seen = []

    def scaled_dot_general(*args, **kwargs):  # a fresh function: jnp.einsum caches per callee
        seen.append(1)
        return jax.lax.dot_general(*args, **kwargs) * 2.0

    out = dot_product_attention(q, k, v, einsum_dot_general=scaled_dot_general)
    assert len(seen) == 2
    # logits doubled, then the weighted sum doubled
    weights = jax.nn.softmax(2.0 * jnp.einsum("...qhd,...khd->...hqk", q / jnp.sqrt(8.0), k))
    expected = 2.0 * jnp.einsum("...hqk,...khd->...qhd", weights, v)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_mha_einsum_classes_and_fp32_softmax_fields():
    calls = []

    class Einsum:
        def __init__(self, *args, **kwargs):
            calls.append("make")

        def __call__(self, spec, a, b, **kwargs):
            calls.append(spec)
            return jnp.einsum(spec, a, b, **kwargs)

    x = jnp.ones((2, 3, 8))
    layer = nn.MultiHeadDotProductAttention(
        num_heads=2, qk_attn_weights_einsum_cls=Einsum, attn_weights_value_einsum_cls=Einsum)
    v = layer.init(jax.random.key(0), x)
    calls.clear()
    y = layer.apply(v, x)
    assert calls.count("make") == 2 and len(calls) == 4
    np.testing.assert_allclose(
        y, nn.MultiHeadDotProductAttention(num_heads=2).apply(v, x), rtol=1e-6)
    half = nn.MultiHeadDotProductAttention(num_heads=2, dtype=jnp.bfloat16,
                                           force_fp32_for_softmax=True)
    hv = half.init(jax.random.key(0), x)
    assert half.apply(hv, x).dtype == jnp.bfloat16  # output projection in the layer dtype
