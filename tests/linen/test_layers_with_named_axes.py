"""Behaviour of ``flaxen.linen.experimental.layers_with_named_axes`` (Dense, Embed, LayerNorm)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from flaxen.linen import initializers
from flaxen.linen import partitioning as P
from flaxen.linen.experimental import layers_with_named_axes as nla

KEY = jax.random.PRNGKey(0)
RNG = np.random.RandomState(1)


def _names(collection):
    return {k: v.names for k, v in collection.items()}


# ----------------------------------------------------------------------------- Dense
def test_dense_parameters_axes_and_output():
    x = jnp.asarray(RNG.randn(2, 3), jnp.float32)
    layer = nla.Dense(4, kernel_axes=("embed", "mlp"), bias_init=initializers.ones_init())
    y, v = layer.init_with_output(KEY, x)
    assert set(v) == {"params", "params_axes"}
    assert v["params"]["kernel"].shape == (3, 4) and v["params"]["bias"].shape == (4,)
    assert _names(v["params_axes"]) == {"kernel_axes": ("embed", "mlp"), "bias_axes": ("mlp",)}
    expected = np.asarray(x) @ np.asarray(v["params"]["kernel"]) + 1.0
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    # default kernel init is LeCun normal on (in, out)
    key = _param_key(layer, x, "kernel")
    np.testing.assert_array_equal(
        v["params"]["kernel"], initializers.lecun_normal()(key, (3, 4), jnp.float32))


def _param_key(layer, x, name):
    """The key ``init`` hands to the initializer of ``name`` (captured by a spy initializer)."""
    seen = {}

    def spy(key, shape, dtype=jnp.float32):
        seen["key"] = key
        return jnp.zeros(shape, dtype)

    layer.clone(**{f"{name}_init": spy}).init(KEY, x)
    return seen["key"]


def test_dense_leading_axes_are_batch_axes_and_get_axis_names():
    x = jnp.ones((2, 5, 3))
    v = nla.Dense(6, kernel_axes=("embed", "mlp")).init(KEY, x)
    y = nla.Dense(6, kernel_axes=("embed", "mlp")).apply(v, x)
    assert y.shape == (2, 5, 6)
    specs = P.get_axis_names(v["params_axes"])
    assert specs["kernel"] == PartitionSpec("embed", "mlp")
    assert specs["bias"] == PartitionSpec("mlp")


def test_dense_without_bias_accepts_no_axis_names():
    v = nla.Dense(4, use_bias=False).init(KEY, jnp.ones((1, 3)))
    assert set(v["params"]) == {"kernel"}
    assert _names(v["params_axes"]) == {"kernel_axes": ()}


def test_dense_with_bias_needs_kernel_axes():
    with pytest.raises(IndexError, match="kernel_axes"):
        nla.Dense(4).init(KEY, jnp.ones((1, 3)))


def test_dense_dtypes():
    x = jnp.ones((2, 3), jnp.float32)
    layer = nla.Dense(4, kernel_axes=("a", "b"), dtype=jnp.bfloat16, param_dtype=jnp.float16)
    y, v = layer.init_with_output(KEY, x)
    assert v["params"]["kernel"].dtype == jnp.float16 and v["params"]["bias"].dtype == jnp.float16
    assert y.dtype == jnp.bfloat16


def test_dense_uses_the_given_dot_general():
    calls = []

    def my_dot(a, b, dims, precision=None):
        calls.append((a.shape, b.shape, dims, precision))
        return jax.lax.dot_general(a, b, dims, precision=precision)

    x = jnp.ones((2, 3))
    prec = jax.lax.Precision.HIGHEST
    nla.Dense(4, use_bias=False, dot_general=my_dot, precision=prec).init(KEY, x)
    assert calls == [((2, 3), (3, 4), (((1,), (0,)), ((), ())), prec)]
    calls.clear()
    # dot_general_cls wins over dot_general and is instantiated without arguments
    nla.Dense(4, use_bias=False, dot_general=None, dot_general_cls=lambda: my_dot).init(KEY, x)
    assert len(calls) == 1


def test_dense_fields_in_flax_order():
    names = [f for f in nla.Dense.__dataclass_fields__ if f not in ("parent", "name")]
    assert names == ["features", "use_bias", "dtype", "param_dtype", "precision", "kernel_init",
                     "bias_init", "kernel_axes", "dot_general", "dot_general_cls"]


# ----------------------------------------------------------------------------- Embed
def test_embed_lookup_parameters_and_axes():
    ids = jnp.array([[0, 4, 2]])
    y, v = nla.Embed(5, 3).init_with_output(KEY, ids)
    table = np.asarray(v["params"]["embedding"])
    assert table.shape == (5, 3)
    assert _names(v["params_axes"]) == {"embedding_axes": ("vocab", "embed")}
    np.testing.assert_array_equal(y, table[np.asarray(ids)])
    assert y.shape == (1, 3, 3)


def test_embed_one_hot_matches_indexing():
    ids = jnp.array([[1, 3], [0, 2]], jnp.uint8)
    v = nla.Embed(4, 2).init(KEY, ids)
    plain = nla.Embed(4, 2).apply(v, ids)
    hot = nla.Embed(4, 2, one_hot=True).apply(v, ids)
    np.testing.assert_allclose(hot, plain, rtol=1e-6)


def test_embed_dtypes_and_cast_input():
    ids = jnp.array([1.0, 2.0])
    with pytest.raises(ValueError, match="integer"):
        nla.Embed(4, 2).init(KEY, ids)
    layer = nla.Embed(4, 2, cast_input_dtype=jnp.int32, dtype=jnp.bfloat16,
                      param_dtype=jnp.float16)
    y, v = layer.init_with_output(KEY, ids)
    assert v["params"]["embedding"].dtype == jnp.float16 and y.dtype == jnp.bfloat16
    assert y.shape == (2, 2)


def test_embed_attend():
    v = nla.Embed(5, 3).init(KEY, jnp.array([0]))
    table = np.asarray(v["params"]["embedding"])
    q = jnp.asarray(RNG.randn(2, 3), jnp.float32)
    logits = nla.Embed(5, 3).apply(v, q, method="attend")
    assert logits.shape == (2, 5)
    np.testing.assert_allclose(logits, np.asarray(q) @ table.T, rtol=1e-5, atol=1e-6)
    half = nla.Embed(5, 3, dtype=jnp.float32, attend_dtype=jnp.bfloat16)
    assert half.apply(v, q.astype(jnp.bfloat16), method="attend").dtype == jnp.bfloat16
    # the query is not cast: float32 query with a bfloat16 table promotes to float32
    assert half.apply(v, q, method="attend").dtype == jnp.float32


def test_embed_embedding_is_not_a_constructor_argument():
    with pytest.raises(TypeError):
        nla.Embed(5, 3, embedding=jnp.zeros((5, 3)))  # type: ignore[call-arg]


# ----------------------------------------------------------------------------- LayerNorm
def _np_layer_norm(x, scale, bias, eps):
    x = np.asarray(x, np.float64)
    mean = x.mean(-1, keepdims=True)
    var = (x * x).mean(-1, keepdims=True) - mean * mean
    return (x - mean) / np.sqrt(np.maximum(var, 0.0) + eps) * scale + bias


def test_layer_norm_against_numpy():
    x = jnp.asarray(RNG.randn(2, 4, 5) * 3 + 1, jnp.float32)
    layer = nla.LayerNorm(epsilon=1e-3, scale_init=initializers.normal(1.0),
                          bias_init=initializers.normal(1.0))
    y, v = layer.init_with_output(KEY, x)
    p = v["params"]
    assert p["scale"].shape == (5,) and p["bias"].shape == (5,)
    assert _names(v["params_axes"]) == {"scale_axes": ("embed",), "bias_axes": ("embed",)}
    expected = _np_layer_norm(x, np.asarray(p["scale"]), np.asarray(p["bias"]), 1e-3)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    assert y.dtype == jnp.float32 and y.shape == x.shape


def test_layer_norm_defaults_and_switches():
    x = jnp.asarray(RNG.randn(3, 4), jnp.float32)
    y, v = nla.LayerNorm().init_with_output(KEY, x)
    np.testing.assert_array_equal(v["params"]["scale"], np.ones(4, np.float32))
    np.testing.assert_array_equal(v["params"]["bias"], np.zeros(4, np.float32))
    np.testing.assert_allclose(y, _np_layer_norm(x, 1.0, 0.0, 1e-6), rtol=1e-4, atol=1e-5)
    bare, v = nla.LayerNorm(use_scale=False, use_bias=False).init_with_output(KEY, x)
    assert v == {}
    np.testing.assert_allclose(bare, y, rtol=1e-6, atol=1e-6)
    _, v = nla.LayerNorm(use_bias=False).init_with_output(KEY, x)
    assert set(v["params"]) == {"scale"}


def test_layer_norm_dtypes():
    x = jnp.asarray(RNG.randn(2, 6), jnp.bfloat16)
    layer = nla.LayerNorm(dtype=jnp.bfloat16, param_dtype=jnp.float16)
    y, v = layer.init_with_output(KEY, x)
    assert y.dtype == jnp.bfloat16
    assert v["params"]["scale"].dtype == jnp.float16
    expected = _np_layer_norm(np.asarray(x, np.float32), 1.0, 0.0, 1e-6)
    np.testing.assert_allclose(np.asarray(y, np.float32), expected, rtol=2e-2, atol=2e-2)


def test_layer_norm_constant_row_is_finite():
    y, _ = nla.LayerNorm().init_with_output(KEY, jnp.full((1, 4), 7.0))
    np.testing.assert_array_equal(y, np.zeros((1, 4), np.float32))


# ----------------------------------------------------------------------------- helpers
def test_helpers():
    assert nla._canonicalize_axes(3, -1) == (2,)
    assert nla._canonicalize_axes(4, (-1, 1, 3)) == (1, 3)
    z = jnp.array([3 + 4j])
    np.testing.assert_allclose(nla._abs_sq(z), [25.0])
    mean, var = nla._compute_stats(jnp.array([[1.0, 3.0]], jnp.bfloat16), (-1,))
    assert mean.dtype == jnp.float32
    np.testing.assert_allclose(mean, [2.0])
    np.testing.assert_allclose(var, [1.0])


def test_module_level_names():
    for name in ("Activation", "Axes", "Array", "Dtype", "Initializer", "PrecisionLike",
                 "DotGeneralT", "param_with_axes", "with_sharding_constraint", "nn", "jnp",
                 "lax", "initializers"):
        assert hasattr(nla, name), name
    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(
        nla.default_embed_init(key, (4, 2)),
        jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)(key, (4, 2)))
