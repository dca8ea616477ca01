"""The "Using pack" example of the lifting design note, run in flax and flaxen alike."""

import flax.core as fcore
import flax.core.lift as flift
import flax.core.nn as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.core as xcore
import flaxen.core.lift as xlift
import flaxen.core.nn as xnn
from tests import _inputs


def _lift_transpose(lift, fn, target="params", variables=True, rngs=True):
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        target, rest = variable_groups

        def trans(x):
            return x.T if x.ndim == 2 else x

        target = jax.tree_util.tree_map(trans, target)
        scope = scope_fn((target, rest), rng_groups)
        y = fn(scope, *args)
        return y, repack_fn(scope)

    return lift.pack(wrapper, in_variable_filters=(target, variables),
                     out_variable_filters=(variables,), rng_filters=(rngs,))


def test_pack_example_matches_flax():
    x = jnp.ones((3, 2))
    key = jax.random.PRNGKey(0)
    ref_y, ref_p = fcore.init(_lift_transpose(flift, fnn.dense))(key, x, 4)
    got_y, got_p = xcore.init(_lift_transpose(xlift, xnn.dense))(key, x, 4)
    for a, b in zip(jax.tree_util.tree_leaves((got_y, got_p)),
                    jax.tree_util.tree_leaves((ref_y, ref_p))):
        np.testing.assert_array_equal(a, b)
    assert got_p["params"]["kernel"].shape == (2, 4)
    # Applying reads the stored kernel transposed, so a (4, 2)-shaped kernel is expected.
    v = {"params": {"kernel": jnp.ones((4, 2)), "bias": jnp.zeros(4)}}
    np.testing.assert_array_equal(
        xcore.apply(_lift_transpose(xlift, xnn.dense))(v, x, 4),
        fcore.apply(_lift_transpose(flift, fnn.dense))(v, x, 4))


def test_functional_layers_match_flax():
    x = jnp.arange(24.0).reshape(2, 3, 4) / 7
    key = jax.random.PRNGKey(1)

    def model(nn):
        def f(scope, x):
            h = nn.dense(scope.push("dense"), x, 5)
            h = nn.layer_norm(scope.push("ln"), h)
            return nn.batch_norm(scope.push("bn"), h)
        return f

    ref = fcore.init(model(fnn))(key, x)
    got = xcore.init(model(xnn))(key, x)
    assert jax.tree_util.tree_structure(got[1]) == jax.tree_util.tree_structure(ref[1])
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- per-layer differential tests: same key -> bit-identical params, same outputs ----------

KEY = jax.random.PRNGKey(3)


def _leaves(tree):
    return jax.tree_util.tree_leaves(tree)


def _both(layer, *args, rngs=None, mutable=False, **kwargs):
    """init (and, with ``mutable``, apply) ``layer`` from flax and flaxen with one key."""
    rngs = KEY if rngs is None else rngs
    ref_y, ref_v = fcore.init(getattr(fnn, layer))(rngs, *args, **kwargs)
    got_y, got_v = xcore.init(getattr(xnn, layer))(rngs, *args, **kwargs)
    return (ref_y, ref_v), (got_y, got_v)


def _assert_same_params(got_v, ref_v):
    assert jax.tree_util.tree_structure(got_v) == jax.tree_util.tree_structure(ref_v)
    for a, b in zip(_leaves(got_v), _leaves(ref_v)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def _assert_close(got, ref, rtol=1e-5, atol=1e-6):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(ref)
    for a, b in zip(_leaves(got), _leaves(ref)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _x(*shape, seed=0):
    return _inputs.normal(100 + seed, shape)


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(bias=False),
    dict(dtype=jnp.float16),
    dict(precision=jax.lax.Precision.HIGHEST),
])
def test_dense_matches_flax(kwargs):
    x = _x(2, 3, 5)
    (ry, rv), (gy, gv) = _both("dense", x, 4, **kwargs)
    _assert_same_params(gv, rv)
    _assert_close(gy, ry, rtol=1e-3 if kwargs.get("dtype") == jnp.float16 else 1e-5)


@pytest.mark.parametrize("kwargs", [
    dict(features=4),
    dict(features=(2, 3), axis=(-2, -1)),
    dict(features=3, axis=2, batch_dims=0),
    dict(features=(2, 2), axis=-1, batch_dims=(0, 1), bias_init=jax.nn.initializers.normal()),
    dict(features=4, bias=False, dtype=jnp.bfloat16),
])
def test_dense_general_matches_flax(kwargs):
    x = _x(2, 3, 5)
    (ry, rv), (gy, gv) = _both("dense_general", x, **kwargs)
    _assert_same_params(gv, rv)
    tol = 2e-2 if kwargs.get("dtype") == jnp.bfloat16 else 1e-5
    _assert_close(gy, ry, rtol=tol, atol=tol)


@pytest.mark.parametrize("kwargs, spec", [
    (dict(features=3, axis=1, batch_dims=0), "bjk,bjf->bkf"),
    (dict(features=4, axis=0), "ijk,if->jkf"),
])
def test_dense_general_bias_lands_on_feature_axes(kwargs, spec):
    # Flax mis-places the bias when a free axis follows a contracted one (it raises or
    # broadcasts it along the wrong axis); flaxen adds it along (*batch, *features).
    x = _x(2, 3, 5)
    init = jax.nn.initializers.normal()
    y, v = xcore.init(xnn.dense_general)(KEY, x, bias_init=init, **kwargs)
    p = v["params"]
    b = p["bias"]
    want = jnp.einsum(spec, x, p["kernel"])
    want = want + (b[:, None, :] if "batch_dims" in kwargs else b)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_dense_general_rejects_non_leading_batch_dims():
    with pytest.raises(ValueError, match="consecutive leading"):
        xcore.init(xnn.dense_general)(KEY, _x(2, 3, 5), 4, axis=-1, batch_dims=(1,))


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=(3,)),
    dict(kernel_size=(3, 3), strides=(2, 1), padding="VALID"),
    dict(kernel_size=(2, 2), kernel_dilation=(2, 2)),
    dict(kernel_size=(3, 2), input_dilation=(2, 1), padding=((1, 1), (0, 1))),
    dict(kernel_size=(3, 3), feature_group_count=2, bias=False),
    dict(kernel_size=(2, 2), dtype=jnp.bfloat16, precision="highest"),
])
def test_conv_matches_flax(kwargs):
    x = _x(2, 6, 4) if len(kwargs["kernel_size"]) == 1 else _x(2, 6, 5, 4)
    (ry, rv), (gy, gv) = _both("conv", x, 6, **kwargs)
    _assert_same_params(gv, rv)
    tol = 2e-2 if kwargs.get("dtype") == jnp.bfloat16 else 1e-5
    _assert_close(gy, ry, rtol=tol, atol=tol)
    if "feature_group_count" in kwargs:
        assert gv["params"]["kernel"].shape == (3, 3, 2, 6)


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=(3,)),
    dict(kernel_size=(3, 3), strides=(2, 2)),
    dict(kernel_size=(2, 3), strides=(2, 1), padding="VALID", kernel_dilation=(1, 2)),
    dict(kernel_size=(3, 3), padding=((1, 2), (0, 0)), bias=False),
])
def test_conv_transpose_matches_flax(kwargs):
    x = _x(2, 5, 3) if len(kwargs["kernel_size"]) == 1 else _x(2, 5, 4, 3)
    (ry, rv), (gy, gv) = _both("conv_transpose", x, 4, **kwargs)
    _assert_same_params(gv, rv)
    _assert_close(gy, ry)


def test_embedding_matches_flax():
    def model(nn):
        def f(scope, ids, q):
            emb = nn.embedding(scope, 7, 4)
            return emb.lookup(ids), emb.attend(q)
        return f

    ids = jnp.array([[0, 3, 6], [2, 2, 1]])
    q = _x(2, 4)
    ref_y, ref_v = fcore.init(model(fnn))(KEY, ids, q)
    got_y, got_v = xcore.init(model(xnn))(KEY, ids, q)
    _assert_same_params(got_v, ref_v)
    _assert_close(got_y, ref_y)
    assert got_y[0].shape == (2, 3, 4) and got_y[1].shape == (2, 7)
    # The table is a pytree (a struct dataclass) in both.
    emb = xnn.Embedding(got_v["params"]["table"])
    assert len(jax.tree_util.tree_leaves(emb)) == 1
    with pytest.raises(ValueError, match="integer"):
        emb.lookup(jnp.zeros((2,), jnp.float32))


@pytest.mark.parametrize("kwargs", [
    dict(num_groups=2),
    dict(num_groups=None, group_size=3),
    dict(num_groups=3, bias=False, epsilon=1e-3),
    dict(num_groups=1, scale=False, dtype=jnp.bfloat16),
    dict(num_groups=2, scale_init=jax.nn.initializers.normal(),
         bias_init=jax.nn.initializers.normal()),
])
def test_group_norm_matches_flax(kwargs):
    x = _x(2, 4, 3, 6) * 3 + 1
    (ry, rv), (gy, gv) = _both("group_norm", x, **kwargs)
    _assert_same_params(gv, rv)
    for leaf in _leaves(gv):
        assert leaf.shape == (1, 1, 1, 6)
    tol = 2e-2 if kwargs.get("dtype") == jnp.bfloat16 else 1e-5
    _assert_close(gy, ry, rtol=tol, atol=tol)


def test_group_norm_argument_errors():
    x = _x(2, 6)
    with pytest.raises(ValueError):
        xcore.init(xnn.group_norm)(KEY, x, num_groups=2, group_size=3)
    with pytest.raises(ValueError):
        xcore.init(xnn.group_norm)(KEY, x, num_groups=None, group_size=4)
    with pytest.raises(ValueError):
        xcore.init(xnn.group_norm)(KEY, x, num_groups=None)


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(dtype=jnp.bfloat16, bias=False),
    dict(scale_init=jax.nn.initializers.normal(), bias_init=jax.nn.initializers.normal()),
])
def test_layer_norm_matches_flax(kwargs):
    x = _x(3, 5) * 2 + 0.5
    (ry, rv), (gy, gv) = _both("layer_norm", x, **kwargs)
    _assert_same_params(gv, rv)
    tol = 2e-2 if kwargs.get("dtype") == jnp.bfloat16 else 1e-5
    _assert_close(gy, ry, rtol=tol, atol=tol)


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(axis=1, momentum=0.5, kind="stats"),
    dict(axis=(1, 2), dtype=jnp.bfloat16),
    dict(scale_init=jax.nn.initializers.normal(), bias_init=jax.nn.initializers.normal()),
])
def test_batch_norm_matches_flax_init_and_updates(kwargs):
    x = _x(4, 3, 2) * 2 + 1
    (ry, rv), (gy, gv) = _both("batch_norm", x, **kwargs)
    _assert_same_params(gv, rv)
    tol = 2e-2 if kwargs.get("dtype") == jnp.bfloat16 else 1e-5
    _assert_close(gy, ry, rtol=tol, atol=tol)
    kind = kwargs.get("kind", "batch_stats")
    # A training step moves the running statistics the same way in both.
    x2 = _x(4, 3, 2, seed=1) * 3 - 1
    ref = fcore.apply(fnn.batch_norm, mutable=[kind])(rv, x2, **kwargs)
    got = xcore.apply(xnn.batch_norm, mutable=[kind])(gv, x2, **kwargs)
    _assert_close(got, ref, rtol=tol, atol=tol)
    assert not np.allclose(got[1][kind]["mean"], gv[kind]["mean"])
    # And the running averages are what inference uses.
    ref = fcore.apply(fnn.batch_norm)(ref[1] | {"params": rv["params"]}, x2,
                                      use_running_average=True, **kwargs)
    got = xcore.apply(xnn.batch_norm)(got[1] | {"params": gv["params"]}, x2,
                                      use_running_average=True, **kwargs)
    _assert_close(got, ref, rtol=tol, atol=tol)


def test_batch_norm_axis_name_matches_flax():
    x = _x(2, 3, 4)

    def run(core, nn):
        def f(scope, x):
            return nn.batch_norm(scope, x, axis_name="b")
        return jax.vmap(lambda x: core.init(f)(KEY, x), axis_name="b")(x)

    got, ref = run(xcore, xnn), run(fcore, fnn)
    _assert_close(got, ref)
    # The statistics are shared over the mapped axis: the same as one unmapped batch.
    whole = xcore.init(xnn.batch_norm)(KEY, x.reshape(6, 4))[0]
    np.testing.assert_allclose(got[0].reshape(6, 4), whole, rtol=1e-5, atol=1e-6)


def test_batch_norm_axis_index_groups_matches_flax():
    x = _x(4, 3, 2)

    def run(core, nn):
        def f(scope, x):
            return nn.batch_norm(scope, x, axis_name="d", axis_index_groups=[[0, 1], [2, 3]])
        return jax.pmap(lambda x: core.init(f)(KEY, x), axis_name="d",
                        devices=jax.devices()[:4])(x)

    got, ref = run(xcore, xnn), run(fcore, fnn)
    _assert_close(got, ref)
    first = xcore.init(xnn.batch_norm)(KEY, x[:2].reshape(6, 2))[0]
    np.testing.assert_allclose(got[0][:2].reshape(6, 2), first, rtol=1e-5, atol=1e-6)


def test_batch_norm_update_needs_mutable_stats():
    _, v = xcore.init(xnn.batch_norm)(KEY, _x(4, 3))
    with pytest.raises(Exception, match="batch_stats"):
        xcore.apply(xnn.batch_norm)(v, _x(4, 3))


@pytest.mark.parametrize("kwargs", [dict(rate=0.5), dict(rate=0.0), dict(rate=0.3,
                                                                         deterministic=True)])
def test_dropout_matches_flax(kwargs):
    x = _x(3, 8)
    rngs = {"dropout": jax.random.PRNGKey(9)}
    ref = fcore.apply(fnn.dropout)({}, x, rngs=rngs, **kwargs)
    got = xcore.apply(xnn.dropout)({}, x, rngs=rngs, **kwargs)
    _assert_close(got, ref)
    # An explicit rng is used in place of the 'dropout' stream.
    rng = jax.random.PRNGKey(4)
    np.testing.assert_array_equal(xcore.apply(xnn.dropout)({}, inputs=x, rng=rng, **kwargs),
                                  fcore.apply(fnn.dropout)({}, inputs=x, rng=rng, **kwargs))


def test_dropout_masks_and_rescales():
    x = jnp.ones((1000,))
    y = xcore.apply(xnn.dropout)({}, x, 0.25, rngs={"dropout": KEY})
    kept = np.asarray(y != 0)
    assert 0.6 < kept.mean() < 0.9
    np.testing.assert_allclose(np.asarray(y)[kept], 1 / 0.75)


@pytest.mark.parametrize("shape, kwargs", [
    ((2, 6, 5, 3), dict(window_shape=(2, 2))),
    ((2, 6, 5, 3), dict(window_shape=(3, 2), strides=(2, 1), padding="SAME")),
    ((6, 5, 3), dict(window_shape=(2, 2), padding=((1, 0), (0, 1)))),
    ((2, 2, 7, 3), dict(window_shape=(3,), strides=(2,))),
])
@pytest.mark.parametrize("pool", ["max_pool", "avg_pool"])
def test_pooling_matches_flax(pool, shape, kwargs):
    x = _x(*shape)
    np.testing.assert_allclose(getattr(xnn, pool)(x, **kwargs), getattr(fnn, pool)(x, **kwargs),
                               rtol=1e-5, atol=1e-6)
    if pool == "avg_pool" and kwargs.get("padding", "VALID") != "VALID":
        np.testing.assert_allclose(xnn.avg_pool(x, count_include_pad=False, **kwargs),
                                   fnn.avg_pool(x, count_include_pad=False, **kwargs),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(dropout_rate=0.4),
    dict(dropout_rate=0.4, broadcast_dropout=False),
    dict(dropout_rate=0.4, deterministic=True),
])
def test_dot_product_attention_matches_flax(kwargs):
    q, k, v = _x(2, 3, 2, 4), _x(2, 5, 2, 4, seed=1), _x(2, 5, 2, 3, seed=2)
    bias = _x(2, 2, 3, 5, seed=3)
    rngs = {"dropout": jax.random.PRNGKey(5)}
    ref = fcore.apply(fnn.dot_product_attention)({}, q, k, v, bias=bias, rngs=rngs, **kwargs)
    got = xcore.apply(xnn.dot_product_attention)({}, q, k, v, bias=bias, rngs=rngs, **kwargs)
    assert got.shape == (2, 3, 2, 3)
    _assert_close(got, ref)


def test_dot_product_attention_two_axes_matches_flax():
    q, k, v = _x(1, 2, 3, 2, 4), _x(1, 2, 3, 2, 4, seed=1), _x(1, 2, 3, 2, 4, seed=2)
    ref = fcore.apply(fnn.dot_product_attention)({}, q, k, v)
    got = xcore.apply(xnn.dot_product_attention)({}, q, k, v)
    _assert_close(got, ref)
    ref = fcore.apply(fnn.dot_product_attention)({}, q, k, v, axis=2)
    got = xcore.apply(xnn.dot_product_attention)({}, q, k, v, axis=2)
    _assert_close(got, ref)
    with pytest.raises(ValueError, match="Attention axis"):
        xcore.apply(xnn.dot_product_attention)({}, q, k, v, axis=3)


@pytest.mark.parametrize("kwargs", [
    dict(num_heads=2),
    dict(num_heads=2, qkv_features=8, out_features=3, causal_mask=True),
    dict(num_heads=1, bias=False, dropout_rate=0.3),
    dict(num_heads=2, padding_mask=jnp.array([[1, 1, 1, 0], [1, 1, 0, 0]])[..., None] > 0),
    dict(num_heads=2, segmentation=jnp.array([[0, 0, 1, 1], [0, 1, 1, 1]])[..., None],
         causal_mask=True),
])
def test_multi_head_attention_matches_flax(kwargs):
    xq, xkv = _x(2, 4, 6), _x(2, 4, 6, seed=1)
    rngs = {"params": KEY, "dropout": jax.random.PRNGKey(6)}
    ref_y, ref_v = fcore.init(fnn.multi_head_dot_product_attention)(rngs, xq, xkv, **kwargs)
    got_y, got_v = xcore.init(xnn.multi_head_dot_product_attention)(rngs, xq, xkv, **kwargs)
    _assert_same_params(got_v, ref_v)
    _assert_close(got_y, ref_y)
    assert set(got_v["params"]) == {"query", "key", "value", "out"}


def test_multi_head_attention_self_attention_matches_flax():
    x = _x(2, 3, 4)
    kw = dict(num_heads=2, causal_mask=True)
    ref_y, ref_v = fcore.init(fnn.multi_head_dot_product_attention)(KEY, x, None, **kw)
    got_y, got_v = xcore.init(xnn.multi_head_dot_product_attention)(KEY, x, None, **kw)
    _assert_same_params(got_v, ref_v)
    _assert_close(got_y, ref_y)
    # Causal: the first position ignores later ones.
    x2 = x.at[:, 1:].set(0.0)
    y2 = xcore.apply(xnn.multi_head_dot_product_attention)(got_v, x2, None, **kw)
    np.testing.assert_allclose(y2[:, 0], got_y[:, 0], rtol=1e-5, atol=1e-6)


def test_multi_head_attention_cache_decoding_reproduces_causal_pass():
    # Flax 0.12.8's cache path raises on this JAX (it mixes uint32 and int32 indices in
    # dynamic_update_slice), so this checks flaxen against its own full causal pass.
    x = _x(2, 3, 4)
    kw = dict(num_heads=2, causal_mask=True)
    mha = xnn.multi_head_dot_product_attention
    _, v = xcore.init(mha)(KEY, x, None, **kw)
    full = xcore.apply(mha)(v, x, None, **kw)
    _, cache = xcore.apply(mha, mutable=["cache"])(v, x[:, :1], None, cache=True, **kw)
    cache = {"cache": {"entry": cache["cache"]["entry"]((2, 3))}}
    assert int(cache["cache"]["entry"].i) == 0
    steps = []
    for t in range(3):
        y, cache = xcore.apply(mha, mutable=["cache"])(
            {**v, **cache}, x[:, t:t + 1], None, cache=True, **kw)
        steps.append(y)
    assert int(cache["cache"]["entry"].i) == 3
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="Invalid shape"):
        xcore.apply(mha, mutable=["cache"])({**v, **cache}, x[:, :2], None, cache=True, **kw)
    with pytest.raises(ValueError, match="causal"):
        xcore.init(mha)(KEY, x, None, num_heads=2, cache=True)
