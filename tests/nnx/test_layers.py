"""Today's (Flax 0.12.8) NNX layers at ``flaxen.nnx``: signatures, new layers, Linen parity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import linen, nnx
from flaxen.experimental import nnx as legacy_nnx
from tests import _inputs


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_linear_preferred_element_type_and_tuple_promote_dtype():
    seen = []

    def promote(args, /, *, dtype=None, inexact=True):
        seen.append(len(args))
        return nnx.nn.dtypes.promote_dtype(args, dtype=dtype, inexact=inexact)

    layer = nnx.Linear(2, 3, param_dtype=jnp.float16, promote_dtype=promote,
                       preferred_element_type=jnp.float32, rngs=nnx.Rngs(0))
    y = layer(jnp.ones((1, 2), jnp.float16))
    assert y.dtype == jnp.float32 and seen == [3]
    with pytest.raises(TypeError, match="one tuple"):
        nnx.nn.dtypes.promote_dtype(jnp.ones(2))


def test_initializers_are_not_part_of_the_graphdef():
    zeros, ones = nnx.initializers.zeros, nnx.initializers.ones
    for cls, args in [(nnx.Linear, (2, 3)), (nnx.Conv, (2, 4, 3)), (nnx.GRUCell, (2, 3))]:
        kw = {"kernel_init": zeros}
        kw2 = {"kernel_init": ones}
        a = cls(*args, **kw, rngs=nnx.Rngs(0))
        b = cls(*args, **kw2, rngs=nnx.Rngs(0))
        assert nnx.graphdef(a) == nnx.graphdef(b)


def test_metadata_arguments_reach_the_variables():
    layer = nnx.Linear(2, 3, kernel_metadata={"my_tag": "k"}, bias_metadata={"my_tag": "b"},
                       rngs=nnx.Rngs(0))
    assert layer.kernel.my_tag == "k" and layer.bias.my_tag == "b"
    with pytest.raises(TypeError, match="kernel_metadata must be a mapping"):
        nnx.Linear(2, 3, kernel_metadata=3, rngs=nnx.Rngs(0))


def test_einsum_op_is_called():
    calls = []

    def op(spec, x, k, **kw):
        calls.append(spec)
        return jnp.einsum(spec, x, k, **kw)

    layer = nnx.Einsum("ab,bc->ac", (3, 4), einsum_op=op, rngs=nnx.Rngs(0))
    assert layer(jnp.ones((2, 3))).shape == (2, 4) and calls == ["ab,bc->ac"]


def test_conv_mask_and_conv_transpose_match_linen():
    x = jax.random.normal(jax.random.key(0), (2, 6, 5, 3))
    mask = jnp.tril(jnp.ones((3, 2, 3, 4)))
    model = linen.Conv(4, (3, 2), mask=mask)
    v = model.init(jax.random.key(1), x)
    conv = nnx.Conv(3, 4, (3, 2), mask=mask, rngs=nnx.Rngs(0))
    conv.kernel.value = v["params"]["kernel"]
    _same(conv(x), model.apply(v, x))
    with pytest.raises(ValueError, match="same shape as weights"):
        nnx.Conv(3, 4, (3, 2), mask=jnp.ones((2, 2)), rngs=nnx.Rngs(0))(x)

    tmodel = linen.ConvTranspose(4, (3, 2), strides=(2, 1), padding="CIRCULAR")
    tv = tmodel.init(jax.random.key(1), x)
    tconv = nnx.ConvTranspose(3, 4, (3, 2), strides=(2, 1), padding="CIRCULAR",
                              rngs=nnx.Rngs(0))
    assert tconv.kernel.value.shape == (3, 2, 3, 4)
    tconv.kernel.value = tv["params"]["kernel"]
    _same(tconv(x), tmodel.apply(tv, x))


def test_instance_norm_matches_linen_and_checks_the_batch_axis():
    x = jax.random.normal(jax.random.key(0), (2, 5, 3))
    want = linen.InstanceNorm().apply(linen.InstanceNorm().init(jax.random.key(1), x), x)
    _same(nnx.InstanceNorm(3, rngs=nnx.Rngs(0))(x), want)
    with pytest.raises(ValueError, match="leading dimension"):
        nnx.InstanceNorm(2, feature_axes=0, rngs=nnx.Rngs(0))(x)


def test_weight_norm_matches_linen_and_leaves_the_normalized_weight():
    x = jax.random.normal(jax.random.key(0), (4, 3))
    model = linen.WeightNorm(linen.Dense(2))
    v = model.init(jax.random.key(1), x)
    dense = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    dense.kernel.value = v["params"]["layer_instance"]["kernel"]
    layer = nnx.WeightNorm(dense, rngs=nnx.Rngs(1))
    assert list(layer.scales) == [("kernel",)]
    raw = dense.kernel.value
    _same(layer(x), model.apply(v, x))
    # as in Flax, the normalised weight stays in the layer (the scales are ones)
    np.testing.assert_allclose(dense.kernel.value, raw / jnp.linalg.norm(raw, axis=0),
                               rtol=1e-6)


def test_spectral_norm_updates_its_statistics_only_when_asked():
    dense = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    layer = nnx.SpectralNorm(dense, update_stats=False, rngs=nnx.Rngs(1))
    u0 = layer.batch_stats[("kernel", "u")].value
    layer(jnp.ones((1, 3)))
    _same(layer.batch_stats[("kernel", "u")].value, u0)
    y = layer(jnp.ones((1, 3)), update_stats=True)
    assert y.shape == (1, 2)
    assert not np.array_equal(layer.batch_stats[("kernel", "u")].value, u0)
    s = float(layer.batch_stats[("kernel", "sigma")].value)
    assert s == pytest.approx(float(np.linalg.svd(np.asarray(dense.kernel.value))[1][0]), 0.1)


def test_prelu_matches_linen():
    x = jnp.linspace(-3, 3, 7)
    v = linen.PReLU(negative_slope_init=0.2).init(jax.random.key(0), x)
    _same(nnx.PReLU(0.2)(x), linen.PReLU(negative_slope_init=0.2).apply(v, x))


def test_lora_and_lora_linear():
    base = nnx.Linear(3, 4, use_bias=False, rngs=nnx.Rngs(0))
    lora = nnx.LoRA(3, 2, 4, base_module=base, rngs=nnx.Rngs(1))
    assert isinstance(lora.lora_a, nnx.LoRAParam) and isinstance(lora.lora_a, nnx.Param)
    x = jnp.ones((1, 3))
    want = x @ base.kernel.value + x @ lora.lora_a.value @ lora.lora_b.value
    np.testing.assert_allclose(lora(x), want, rtol=1e-6)
    ll = nnx.LoRALinear(3, 4, lora_rank=2, rngs=nnx.Rngs(0))
    plain = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    _same(ll.kernel.value, plain.kernel.value)  # same keys, same kernel
    _same(ll(x), plain(x))  # lora_b starts at zero


def test_lstm_cell_and_rnn_match_linen():
    x = jax.random.normal(jax.random.key(0), (2, 5, 3))
    rnn_l = linen.RNN(linen.LSTMCell(4))
    v = rnn_l.init(jax.random.key(1), x)
    cell = nnx.LSTMCell(3, 4, rngs=nnx.Rngs(0))
    for name in ("ii", "if", "ig", "io", "hi", "hf", "hg", "ho"):
        layer = getattr(cell, "if_" if name == "if" else name)
        layer.kernel.value = v["params"]["cell"][name]["kernel"]
        if layer.use_bias:
            layer.bias.value = v["params"]["cell"][name]["bias"]
    np.testing.assert_allclose(nnx.RNN(cell)(x), rnn_l.apply(v, x), atol=1e-5)


def test_rnn_reverse_keep_order_and_seq_lengths():
    cell = nnx.SimpleCell(1, 1, kernel_init=nnx.initializers.ones,
                          recurrent_kernel_init=nnx.initializers.ones,
                          activation_fn=lambda h: h, rngs=nnx.Rngs(0))
    x = jnp.arange(1.0, 5.0).reshape(1, 4, 1)  # a running sum
    _same(nnx.RNN(cell)(x)[0, :, 0], [1, 3, 6, 10])
    _same(nnx.RNN(cell, reverse=True, keep_order=True)(x)[0, :, 0], [10, 9, 7, 4])
    carry, ys = nnx.RNN(cell, return_carry=True)(x, seq_lengths=jnp.array([2]))
    _same(carry[0], [3.0])


def test_rnn_broadcast_rngs_advance_once_per_call():
    class Cell(nnx.GRUCell):
        def __init__(self, rngs):
            super().__init__(2, 3, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rng_collection="rec", rngs=rngs)

        def __call__(self, carry, x):
            carry, y = super().__call__(carry, x)
            return carry, self.drop(jnp.ones_like(y))

    rnn = nnx.RNN(Cell(nnx.Rngs(0, rec=1)), broadcast_rngs="rec")
    ys = rnn(jnp.ones((1, 6, 2)))
    assert int(rnn.cell.drop.rngs.count.value) == 1
    for t in range(1, 6):  # the same mask at every step
        _same(ys[:, t], ys[:, 0])


def test_dropout_keeps_a_forked_stream_and_the_legacy_face_keeps_rngs():
    m = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=0))
    assert isinstance(m.rngs, nnx.RngStream)
    y1 = m(jnp.ones(16))
    y2 = nnx.Dropout(0.5)(jnp.ones(16), rngs=nnx.Rngs(dropout=0).fork())
    _same(y1, y2)
    with pytest.raises(ValueError, match="no `rngs` argument was provided"):
        nnx.Dropout(0.5)(jnp.ones(2))
    old = legacy_nnx.Dropout(0.5, rngs=legacy_nnx.Rngs(dropout=0))
    assert isinstance(old.rngs, nnx.Rngs)


def test_dot_product_attention_gqa_and_is_causal():
    q = _inputs.normal(1, (2, 4, 6, 8))
    k = _inputs.normal(2, (2, 4, 3, 8))
    v = _inputs.normal(3, (2, 4, 3, 8))
    # without dropout or a sow, JAX's fused function computes it (as in Flax); grouped
    # heads then equal repeated ones up to rounding, and the plain path's to rounding too
    _same(nnx.dot_product_attention(q, k, v), jax.nn.dot_product_attention(q, k, v))
    want = nnx.dot_product_attention(q, jnp.repeat(k, 2, -2), jnp.repeat(v, 2, -2))
    np.testing.assert_allclose(nnx.dot_product_attention(q, k, v), want, atol=1e-6)
    plain = legacy_nnx.dot_product_attention(q, jnp.repeat(k, 2, -2), jnp.repeat(v, 2, -2))
    np.testing.assert_allclose(plain, want, atol=1e-6)
    causal = jnp.tril(jnp.ones((4, 4), bool))[None, None]
    np.testing.assert_allclose(
        nnx.dot_product_attention(q, k, v, is_causal=True),
        nnx.dot_product_attention(q, k, v, mask=causal), atol=1e-6,
    )
    with pytest.raises(ValueError, match="must be a multiple"):
        nnx.dot_product_attention(q, jnp.ones((2, 4, 4, 8)), jnp.ones((2, 4, 4, 8)))


def test_multi_head_attention_grouped_kv_heads_and_decode():
    mha = nnx.MultiHeadAttention(4, 8, num_kv_heads=2, in_kv_features=5, decode=False,
                                 rngs=nnx.Rngs(0))
    assert mha.key.kernel.value.shape == (5, 2, 2)
    assert mha(jnp.ones((1, 3, 8)), jnp.ones((1, 6, 5))).shape == (1, 3, 8)
    with pytest.raises(ValueError, match="num_kv_heads"):
        nnx.MultiHeadAttention(4, 8, num_kv_heads=3, rngs=nnx.Rngs(0))
    self_attn = nnx.MultiHeadAttention(2, 4, num_kv_heads=1, rngs=nnx.Rngs(0))
    self_attn.init_cache((1, 3, 4))
    assert self_attn.cached_key.value.shape == (1, 3, 1, 2)
    assert self_attn(jnp.ones((1, 1, 4)), decode=True).shape == (1, 1, 4)
    assert int(self_attn.cache_index.value) == 1
    drop = nnx.MultiHeadAttention(2, 4, dropout_rate=0.5, rngs=nnx.Rngs(0))
    assert isinstance(drop.rngs, nnx.RngStream)
    assert nnx.MultiHeadAttention(2, 4, dropout_rate=0.5, keep_rngs=False,
                                  rngs=nnx.Rngs(0)).rngs is None


def test_legacy_norms_do_not_promote():
    x = jax.random.normal(jax.random.key(0), (4, 3)) * 3
    want = linen.LayerNorm(dtype=jnp.float16).apply(
        linen.LayerNorm(dtype=jnp.float16).init(jax.random.key(0), x), x)
    _same(legacy_nnx.LayerNorm(3, dtype=jnp.float16, rngs=legacy_nnx.Rngs(0))(x), want)
    same = nnx.LayerNorm(3, dtype=jnp.float16, promote_dtype=lambda t, **kw: t,
                         rngs=nnx.Rngs(0))
    _same(same(x), want)


def test_out_sharding_on_an_explicit_mesh():
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((1,), ("X",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        emb = nnx.Embed(8, 4, rngs=nnx.Rngs(0))
        ids = jax.sharding.reshard(jnp.arange(4), P("X"))
        assert emb(ids, out_sharding=P("X")).shape == (4, 4)
        q = jax.sharding.reshard(jnp.ones((2, 4)), P("X", None))
        assert emb.attend(q, out_sharding=P("X", None)).shape == (2, 8)
        y = nnx.Dropout(0.5, rngs=nnx.Rngs(0))(q)
        assert "X" in str(jax.typeof(y))
        kv = jax.sharding.reshard(jnp.ones((2, 3, 1, 4)), P("X"))
        qq = jax.sharding.reshard(jnp.ones((2, 3, 2, 4)), P("X"))
        assert nnx.dot_product_attention(qq, kv, kv).shape == (2, 3, 2, 4)
