"""Linear layers: shapes, parameter names, math against NumPy, padding modes, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen.errors import ScopeParamShapeError
from flaxen.linen import linear
from flaxen.linen._conv_math import canonicalize_padding

KEY = jax.random.key(0)
R = np.random.RandomState(0)


def _init(layer, *args, **kw):
    return layer.init_with_output(KEY, *args, **kw)


def test_dense_is_x_at_kernel_plus_bias():
    x = R.randn(3, 4).astype(np.float32)
    y, v = _init(nn.Dense(2, bias_init=nn.initializers.normal(1.0)), x)
    p = v["params"]
    assert list(p) == ["kernel", "bias"]  # creation order
    np.testing.assert_allclose(y, x @ p["kernel"] + p["bias"], rtol=1e-5, atol=1e-6)
    y, v = _init(nn.Dense(2, use_bias=False), x[None])
    assert set(v["params"]) == {"kernel"} and y.shape == (1, 3, 2)


def test_default_inits():
    v = nn.Dense(64).init(KEY, jnp.ones((1, 256)))["params"]
    assert float(jnp.abs(v["bias"]).max()) == 0.0
    np.testing.assert_allclose(float(v["kernel"].std()), (1 / 256) ** 0.5, rtol=0.1)
    assert linear.default_kernel_init is not None and linear.default_embed_init is not None


def test_dense_dtype_rules():
    x16 = jnp.ones((2, 3), jnp.bfloat16)
    y, v = _init(nn.Dense(4), x16)
    assert v["params"]["kernel"].dtype == jnp.float32 and y.dtype == jnp.float32
    y, v = _init(nn.Dense(4, dtype=jnp.bfloat16), jnp.ones((2, 3)))
    assert y.dtype == jnp.bfloat16 and v["params"]["kernel"].dtype == jnp.float32
    y, v = _init(nn.Dense(4, param_dtype=jnp.bfloat16), x16)
    assert y.dtype == jnp.bfloat16 and v["params"]["kernel"].dtype == jnp.bfloat16
    y, _ = _init(nn.Dense(4), jnp.ones((2, 3), jnp.int32))
    assert y.dtype == jnp.float32


def test_dense_custom_dot_general_is_used():
    calls = []

    def dot(a, b, dims, precision=None):
        calls.append(dims)
        return jax.lax.dot_general(a, b, dims, precision=precision)

    _init(nn.Dense(2, dot_general=dot), jnp.ones((1, 3)))
    assert calls == [(((1,), (0,)), ((), ()))]


def test_dense_general_batch_dims_give_separate_weights():
    x = R.randn(2, 3, 4).astype(np.float32)
    y, v = _init(nn.DenseGeneral(5, axis=-1, batch_dims=(0,)), x)
    k, b = v["params"]["kernel"], v["params"]["bias"]
    assert k.shape == (2, 4, 5) and b.shape == (2, 5) and y.shape == (2, 3, 5)
    np.testing.assert_allclose(y[1], x[1] @ k[1] + b[1], rtol=1e-5, atol=1e-6)


def test_dense_general_multiple_axes_and_features():
    x = R.randn(2, 3, 4).astype(np.float32)
    y, v = _init(nn.DenseGeneral((5, 6), axis=(1, 2)), x)
    k = v["params"]["kernel"]
    assert k.shape == (3, 4, 5, 6) and y.shape == (2, 5, 6)
    np.testing.assert_allclose(y, np.einsum("bij,ijkl->bkl", x, k), rtol=1e-5, atol=1e-5)


def test_dense_general_errors():
    x = jnp.ones((2, 3, 4))
    with pytest.raises(ValueError, match="consecutive leading"):
        nn.DenseGeneral(2, batch_dims=(1,)).init(KEY, x)
    with pytest.raises(IndexError, match=r"axis 5.*3 dimensions"):
        nn.DenseGeneral(2, axis=5).init(KEY, x)
    with pytest.raises(TypeError, match="overlap"):
        nn.DenseGeneral(2, axis=0, batch_dims=(0,)).init(KEY, x)


def test_feature_size_mismatch_names_the_parameter_path():
    v = nn.Dense(3).init(KEY, jnp.ones((2, 4)))
    with pytest.raises(ScopeParamShapeError) as info:
        nn.Dense(3).apply(v, jnp.ones((2, 5)))
    assert "kernel" in str(info.value) and "(4, 3)" in str(info.value)


def test_dense_rejects_scalars():
    with pytest.raises(ValueError, match=r"Dense: inputs of shape \(\)"):
        nn.Dense(3).init(KEY, jnp.float32(1.0))


def test_einsum_bias_follows_kernel_letters_in_output():
    x = R.randn(6, 2).astype(np.float32)
    layer = nn.Einsum((2, 4, 5), "ab,bcd->dac", bias_init=nn.initializers.normal(1.0))
    y, v = _init(layer, x)
    k, b = v["params"]["kernel"], v["params"]["bias"]
    assert b.shape == (5, 4)
    want = np.einsum("ab,bcd->dac", x, k) + np.asarray(b)[:, None, :]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_einsum_string_errors():
    x = jnp.ones((2, 3))
    with pytest.raises(ValueError, match="->"):
        nn.Einsum((3, 4), "ab,bc").init(KEY, x)
    with pytest.raises(ValueError, match="exactly two operands"):
        nn.Einsum((3, 4), "ab,bc,cd->ad").init(KEY, x)
    with pytest.raises(ValueError, match="constructor or at call time"):
        nn.Einsum((3, 4)).init(KEY, x)
    with pytest.raises(ValueError, match="just once"):
        nn.Einsum((3, 4), "ab,bc->ac").init(KEY, x, einsum_str="ab,bc->ac")


def test_embed_lookup_attend_and_errors():
    layer = nn.Embed(5, 3)
    idx = jnp.array([[0, 4], [2, -1]])
    y, v = _init(layer, idx)
    table = v["params"]["embedding"]
    assert table.shape == (5, 3) and y.shape == (2, 2, 3)
    np.testing.assert_array_equal(y[1, 0], table[2])
    np.testing.assert_array_equal(y[1, 1], table[4])  # negative indices count from the end
    assert bool(jnp.isnan(layer.apply(v, jnp.array([7]))).all())
    q = jnp.ones((2, 3))
    np.testing.assert_allclose(layer.apply(v, q, method="attend"), q @ table.T, rtol=1e-6)
    with pytest.raises(ValueError, match="integer") as info:
        layer.apply(v, jnp.ones((2,)))
    assert "astype" in str(info.value)


def test_embed_single_row_broadcasts():
    layer = nn.Embed(1, 4)
    y, v = _init(layer, jnp.array([0, 0, 0]))
    np.testing.assert_array_equal(y, jnp.broadcast_to(v["params"]["embedding"], (3, 4)))


# ------------------------------------------------------------------------------ convolutions
def _np_conv1d(x, k, pad):
    """x (L, C), k (K, C, F), pad (lo, hi) -> (L', F); stride 1, no dilation."""
    xp = np.pad(x, [pad, (0, 0)])
    n = xp.shape[0] - k.shape[0] + 1
    return np.stack([np.einsum("kc,kcf->f", xp[i : i + k.shape[0]], k) for i in range(n)])


@pytest.mark.parametrize(
    "padding, pad",
    [("SAME", (1, 1)), ("VALID", (0, 0)), ("CAUSAL", (2, 0)), (2, (2, 2)), ([(0, 3)], (0, 3))],
)
def test_conv1d_padding_modes_against_numpy(padding, pad):
    x = R.randn(7, 2).astype(np.float32)
    y, v = _init(nn.Conv(3, (3,), padding=padding, use_bias=False), x[None])
    np.testing.assert_allclose(y[0], _np_conv1d(x, np.asarray(v["params"]["kernel"]), pad),
                               rtol=1e-5, atol=1e-5)


def test_conv_circular_wraps_around():
    x = R.randn(6, 2).astype(np.float32)
    y, v = _init(nn.Conv(3, (3,), padding="CIRCULAR", use_bias=False), x[None])
    wrapped = np.concatenate([x[-1:], x, x[:1]])
    np.testing.assert_allclose(
        y[0], _np_conv1d(wrapped, np.asarray(v["params"]["kernel"]), (0, 0)), rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("padding", ["REFLECT", "reflect"])
def test_conv_reflect_mirrors_the_edges(padding):
    x = R.randn(6, 2).astype(np.float32)
    y, v = _init(nn.Conv(3, (4,), padding=padding, use_bias=False), x[None])
    # kernel 4: one row mirrored before, two after (the 'SAME' split), edge not repeated
    mirrored = np.concatenate([x[1:2], x, x[-2:-1], x[-3:-2]])
    np.testing.assert_allclose(
        y[0], _np_conv1d(mirrored, np.asarray(v["params"]["kernel"]), (0, 0)), rtol=1e-5,
        atol=1e-5,
    )
    assert y.shape == (1, 6, 3)


def test_conv_local_reflect_keeps_the_input_size():
    y, _ = _init(nn.ConvLocal(2, (3, 3), padding="REFLECT"), jnp.ones((1, 5, 5, 1)))
    assert y.shape == (1, 5, 5, 2)


def test_conv_batch_dims_none_one_many():
    layer = nn.Conv(4, (3, 3))
    x = R.randn(2, 3, 5, 5, 2).astype(np.float32)
    y, v = _init(layer, x)
    assert y.shape == (2, 3, 5, 5, 4)
    np.testing.assert_allclose(layer.apply(v, x[1, 2]), y[1, 2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.apply(v, x[0]), y[0], rtol=1e-5, atol=1e-6)


def test_conv_groups_mask_and_input_dilation():
    y, v = _init(nn.Conv(6, (3, 3), feature_group_count=2), jnp.ones((1, 5, 5, 4)))
    assert v["params"]["kernel"].shape == (3, 3, 2, 6)
    mask = np.zeros((3, 3, 2, 4), np.float32)
    mask[1, 1] = 1
    y, v = _init(nn.Conv(4, (3, 3), mask=mask, use_bias=False), jnp.ones((1, 4, 4, 2)))
    center = np.asarray(v["params"]["kernel"])[1, 1]
    np.testing.assert_allclose(y[0, 2, 2], center.sum(0), rtol=1e-5)
    y, _ = _init(nn.Conv(3, (3,), input_dilation=2), jnp.ones((1, 4, 2)))
    assert y.shape == (1, 7, 3)  # 'SAME' on the dilated input (Flax raises here)


def test_conv_transpose_shapes_and_circular_period():
    y, v = _init(nn.ConvTranspose(3, (3, 3), strides=(2, 2)), jnp.ones((1, 4, 4, 2)))
    assert y.shape == (1, 8, 8, 3) and v["params"]["kernel"].shape == (3, 3, 2, 3)
    _, v = _init(nn.ConvTranspose(3, (3, 3), transpose_kernel=True), jnp.ones((1, 4, 4, 2)))
    assert v["params"]["kernel"].shape == (3, 3, 3, 2)
    x = R.randn(1, 5, 2).astype(np.float32)
    layer = nn.ConvTranspose(2, (4,), strides=(2,), padding="CIRCULAR")
    y, v = _init(layer, x)
    assert y.shape == (1, 10, 2)
    # Periodic: rolling the input by one step rolls the output by one stride.
    np.testing.assert_allclose(layer.apply(v, np.roll(x, 1, axis=1)), np.roll(y, 2, axis=1),
                               rtol=1e-5, atol=1e-5)


def test_conv_local_has_per_position_weights():
    y, v = _init(nn.ConvLocal(4, (3,)), jnp.ones((2, 6, 2)))
    assert v["params"]["kernel"].shape == (6, 6, 4) and v["params"]["bias"].shape == (6, 4)
    assert y.shape == (2, 6, 4)


def test_canonicalize_padding():
    assert canonicalize_padding("SAME", 2) == "SAME"
    assert canonicalize_padding(1, 2) == [(1, 1), (1, 1)]
    assert canonicalize_padding([1, (2, 3)], 2) == [(1, 1), (2, 3)]
    with pytest.raises(ValueError, match="Invalid padding format"):
        canonicalize_padding(((1, 2),), 2)
    assert nn.linear.canonicalize_padding is canonicalize_padding


# ------------------------------------------------------------------------------ bad input
def test_int_kernel_size_on_a_2d_input_is_a_type_error():
    with pytest.raises(TypeError) as info:
        nn.Conv(4, 3).init(KEY, jnp.ones((1, 8, 8, 3)))
    msg = str(info.value)
    assert "Conv" in msg and "kernel_size=3" in msg and "(3, 3)" in msg
    y, _ = _init(nn.Conv(4, 3), jnp.ones((1, 8, 3)))  # fine for 1-D
    assert y.shape == (1, 8, 4)


@pytest.mark.parametrize("padding", ["BOGUS", "circle"])
def test_unknown_padding_string(padding):
    with pytest.raises(RuntimeError) as info:  # Flax's class (from lax); also a ValueError
        nn.Conv(4, (3, 3), padding=padding).init(KEY, jnp.ones((1, 5, 5, 3)))
    assert isinstance(info.value, ValueError)
    assert "Conv" in str(info.value) and repr(padding) in str(info.value)


def test_causal_padding_needs_1d():
    with pytest.raises(ValueError, match="only implemented for 1D"):
        nn.Conv(4, (3, 3), padding="CAUSAL").init(KEY, jnp.ones((1, 5, 5, 3)))


def test_wrong_rank_input():
    with pytest.raises(ValueError) as info:
        nn.Conv(4, (3, 3)).init(KEY, jnp.ones((5, 3)))
    assert "(5, 3)" in str(info.value) and "channels-last" in str(info.value)


def test_mask_of_the_wrong_shape_names_layer_and_shape():
    with pytest.raises(ValueError) as info:
        nn.Conv(4, (3, 3), mask=np.ones((3, 3))).init(KEY, jnp.ones((1, 5, 5, 2)))
    assert "(3, 3, 2, 4)" in str(info.value) and "Conv" in str(info.value)
    with pytest.raises(ValueError, match="ConvTranspose"):
        nn.ConvTranspose(4, (3, 3), mask=np.ones((3, 3))).init(KEY, jnp.ones((1, 5, 5, 2)))


def test_groups_must_divide_features_and_strides_must_match():
    with pytest.raises(ValueError, match="feature_group_count=2"):
        nn.Conv(4, (3, 3), feature_group_count=2).init(KEY, jnp.ones((1, 5, 5, 3)))
    with pytest.raises(ValueError, match=r"strides=\(1,\)"):
        nn.Conv(4, (3, 3), strides=(1,)).init(KEY, jnp.ones((1, 5, 5, 3)))


def test_embed_attend_query_of_wrong_size_names_expected_shape():
    layer = nn.Embed(5, 3)
    _, v = _init(layer, jnp.array([0, 1]))
    with pytest.raises(ValueError, match=r"Embed.attend: query must have shape \(\.\.\., "
                       r"features\) with features=3.*\(5, 3\).*got shape \(2, 4\)") as info:
        layer.apply(v, jnp.ones((2, 4)), method="attend")
    assert isinstance(info.value, TypeError)  # what Flax's failing dot raises
