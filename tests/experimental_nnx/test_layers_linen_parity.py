"""NNX layers compute exactly what their Linen twins compute with the same parameters.

Both run the shared math in flaxen.layer_math, so outputs must be bit-identical: linear
layers, einsum with an ellipsis and a bias, convolutions with dilation and groups, embedding
lookups (NaN for out-of-range ids), and norms with masks and both variance formulas.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import linen
from flaxen.experimental import nnx


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("dtype", [None, jnp.float16])
def test_linear_matches_dense(dtype):
    x = jax.random.normal(jax.random.key(0), (3, 4))
    dense = linen.Dense(5, dtype=dtype, param_dtype=jnp.float16)
    v = dense.init(jax.random.key(1), x)
    layer = nnx.Linear(4, 5, dtype=dtype, param_dtype=jnp.float16, rngs=nnx.Rngs(0))
    layer.kernel.value = v["params"]["kernel"]
    layer.bias.value = v["params"]["bias"]
    _same(layer(x), dense.apply(v, x))


@pytest.mark.parametrize(
    "spec,bias_shape",
    [("defab,bcef->adefc", (6, 7, 5)), ("d...ab,bc...->ad...c", (6, 7, 5)), ("ab,bc->ca", (5,))],
)
def test_einsum_bias_follows_output_axes_like_linen(spec, bias_shape):
    if spec == "ab,bc->ca":
        x, kernel_shape = jnp.ones((3, 4)), (4, 5)
    else:
        x, kernel_shape = jax.random.normal(jax.random.key(0), (8, 6, 7, 3, 4)), (4, 5, 6, 7)
    layer = nnx.Einsum(spec, kernel_shape, bias_shape, rngs=nnx.Rngs(0))
    layer.bias.value = jax.random.normal(jax.random.key(2), bias_shape)
    model = linen.Einsum(kernel_shape, spec)
    v = model.init(jax.random.key(1), x)
    assert v["params"]["bias"].shape == bias_shape
    v["params"]["kernel"] = layer.kernel.value
    v["params"]["bias"] = layer.bias.value
    _same(layer(x), model.apply(v, x))


def test_einsum_wrong_bias_shape_names_the_right_one():
    layer = nnx.Einsum("ab,bc->ac", (4, 5), (4,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"bias_shape=\(5,\)"):
        layer(jnp.ones((2, 4)))


@pytest.mark.parametrize("padding", ["VALID", (4, 2), "CIRCULAR", "SAME"])
def test_conv_matches_linen(padding):
    x = jax.random.normal(jax.random.key(0), (2, 12, 9, 3))
    kw = dict(strides=(2, 1), kernel_dilation=(2, 1), feature_group_count=3, padding=padding)
    if padding == (4, 2):
        kw["input_dilation"] = (2, 3)
    model = linen.Conv(6, (3, 2), **kw)
    v = model.init(jax.random.key(1), x)
    layer = nnx.Conv(3, 6, (3, 2), rngs=nnx.Rngs(0), **kw)
    layer.kernel.value = v["params"]["kernel"]
    layer.bias.value = v["params"]["bias"]
    _same(layer(x), model.apply(v, x))
    # an unbatched input is treated as a batch of one
    _same(layer(x[0]), layer(x[:1])[0])


@pytest.mark.parametrize("num", [1, 4])
def test_embed_out_of_range_ids_are_nan_in_both(num):
    layer = nnx.Embed(num, 3, rngs=nnx.Rngs(0))
    model = linen.Embed(num, 3)
    ids = jnp.array([0, num, num + 5])
    v = model.init(jax.random.key(0), ids)
    layer.embedding.value = v["params"]["embedding"]
    out = layer(ids)
    _same(out, model.apply(v, ids))
    assert not jnp.isnan(out[0]).any() and jnp.isnan(out[1:]).all()
    with pytest.raises(ValueError, match="integer"):
        layer(jnp.ones(2))
    with pytest.raises(ValueError, match="features=3"):
        layer.attend(jnp.ones((2, 4)))


MASK = jnp.array([True, False, True, False, True])


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("mask", [None, MASK])
@pytest.mark.parametrize("name", ["BatchNorm", "LayerNorm", "RMSNorm"])
def test_norms_match_linen_with_mask_and_variance_formula(name, mask, fast):
    x = jax.random.normal(jax.random.key(0), (10, 5)) * 3 + 1
    kwargs = dict(dtype=jnp.float16, use_fast_variance=fast)
    if name == "BatchNorm":
        kwargs["use_running_average"] = False
    model = getattr(linen, name)(**kwargs)
    v = model.init(jax.random.key(1), x)
    want, _ = model.apply(v, x, mask=mask, mutable=["batch_stats"])
    layer = getattr(nnx, name)(5, rngs=nnx.Rngs(0), **kwargs)
    _same(layer(x, mask=mask), want)


def test_batchnorm_running_stats_match_linen_updates():
    x = jax.random.normal(jax.random.key(0), (6, 3))
    model = linen.BatchNorm(use_running_average=False, momentum=0.9)
    v = model.init(jax.random.key(1), x)
    _, upd = model.apply(v, x, mutable=["batch_stats"])
    bn = nnx.BatchNorm(3, momentum=0.9, rngs=nnx.Rngs(0))
    bn(x)
    _same(bn.mean.value, upd["batch_stats"]["mean"])
    _same(bn.var.value, upd["batch_stats"]["var"])
    bn.eval()
    y = bn(x)
    v2 = {"params": v["params"], "batch_stats": upd["batch_stats"]}
    _same(y, linen.BatchNorm(use_running_average=True, momentum=0.9).apply(v2, x))


def test_norm_bad_mask_is_a_clear_error():
    with pytest.raises(ValueError, match="does not broadcast"):
        nnx.LayerNorm(5, rngs=nnx.Rngs(0))(jnp.ones((2, 5)), mask=jnp.ones((3,), bool))


@pytest.mark.parametrize("groups,size", [(2, None), (None, 2)])
def test_groupnorm_matches_linen(groups, size):
    x = jax.random.normal(jax.random.key(0), (2, 3, 4))
    model = linen.GroupNorm(num_groups=groups, group_size=size)
    v = model.init(jax.random.key(1), x)
    layer = nnx.GroupNorm(4, num_groups=groups, group_size=size, rngs=nnx.Rngs(0))
    _same(layer(x), model.apply(v, x))
    with pytest.raises(ValueError, match="num_groups"):
        nnx.GroupNorm(4, num_groups=None, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="does not divide"):
        nnx.GroupNorm(6, num_groups=4, rngs=nnx.Rngs(0))


def test_attention_matches_linen_and_sows_weights_through_attention_fn():
    x = jax.random.normal(jax.random.key(0), (2, 4, 6))
    model = linen.MultiHeadDotProductAttention(num_heads=2, qkv_features=4, out_features=5)
    v = model.init(jax.random.key(1), x)
    mha = nnx.MultiHeadAttention(2, 6, 4, 5, decode=False, rngs=nnx.Rngs(0))
    for name in ("query", "key", "value", "out"):
        getattr(mha, name).kernel.value = v["params"][name]["kernel"]
        getattr(mha, name).bias.value = v["params"][name]["bias"]
    _same(mha(x), model.apply(v, x))
    seen = []

    def attention_fn(q, k, vv, **kw):
        seen.append("module" in kw)
        return nnx.dot_product_attention(q, k, vv, **kw)

    mha.attention_fn = attention_fn
    y = mha(x, sow_weights=True)
    assert seen == [True]
    assert mha.attention_weights.value[0].shape == (2, 2, 4, 4)
    _same(y, model.apply(v, x))


def test_attention_decode_cache_matches_full_causal_attention():
    x = jax.random.normal(jax.random.key(0), (1, 3, 4))
    mha = nnx.MultiHeadAttention(2, 4, rngs=nnx.Rngs(0))
    full = mha(x, mask=nnx.make_causal_mask(x[..., 0]), decode=False)
    mha.init_cache(x.shape)
    assert mha.cached_key.value.shape == (1, 3, 2, 2)
    steps = [mha(x[:, i : i + 1], decode=True) for i in range(3)]
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-6)
    with pytest.raises(ValueError, match="one step"):
        mha(x, decode=True)


def test_dropout_without_rngs_names_the_missing_argument():
    with pytest.raises(ValueError, match="no `rngs` argument was provided to Dropout"):
        nnx.Dropout(0.5)(jnp.ones(3))
