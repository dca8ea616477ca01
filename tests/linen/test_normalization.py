"""Normalisation layers: statistics against NumPy, running averages, dtypes, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn

KEY = jax.random.key(0)
X = np.random.RandomState(0).randn(4, 3, 6).astype(np.float32) * 3 + 1


def _norm(x, axes, eps):
    m = x.mean(axes, keepdims=True)
    return (x - m) / np.sqrt(x.var(axes, keepdims=True) + eps)


def test_layer_norm_against_numpy_and_param_order():
    y, v = nn.LayerNorm().init_with_output(KEY, X)
    assert list(v["params"]) == ["scale", "bias"]
    np.testing.assert_allclose(y, _norm(X, -1, 1e-6), rtol=1e-4, atol=1e-4)
    y, v = nn.LayerNorm(reduction_axes=(1, 2), feature_axes=(1, 2)).init_with_output(KEY, X)
    assert v["params"]["scale"].shape == (3, 6)
    np.testing.assert_allclose(y, _norm(X, (1, 2), 1e-6), rtol=1e-4, atol=1e-4)


def test_rms_norm_against_numpy():
    y, v = nn.RMSNorm().init_with_output(KEY, X)
    assert list(v["params"]) == ["scale"]
    np.testing.assert_allclose(y, X / np.sqrt((X**2).mean(-1, keepdims=True) + 1e-6),
                               rtol=1e-4, atol=1e-5)


def test_group_norm_against_numpy():
    y, _ = nn.GroupNorm(num_groups=2).init_with_output(KEY, X)
    g = X.reshape(4, 3, 2, 3)
    np.testing.assert_allclose(y, _norm(g, (1, 3), 1e-6).reshape(X.shape), rtol=1e-4,
                               atol=1e-4)
    y2, _ = nn.GroupNorm(num_groups=None, group_size=3).init_with_output(KEY, X)
    np.testing.assert_allclose(y2, y, rtol=1e-6)


def test_instance_norm_against_numpy():
    y, _ = nn.InstanceNorm().init_with_output(KEY, X)
    np.testing.assert_allclose(y, _norm(X, (1,), 1e-6), rtol=1e-4, atol=1e-4)


def test_batch_norm_training_updates_running_stats():
    bn = nn.BatchNorm(use_running_average=False, momentum=0.9)
    v = bn.init(KEY, X)
    # No update while initialising.
    np.testing.assert_array_equal(v["batch_stats"]["mean"], np.zeros(6))
    np.testing.assert_array_equal(v["batch_stats"]["var"], np.ones(6))
    y, upd = bn.apply(v, X, mutable=["batch_stats"])
    np.testing.assert_allclose(y, _norm(X, (0, 1), 1e-5), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(upd["batch_stats"]["mean"], 0.1 * X.mean((0, 1)), rtol=1e-5)
    np.testing.assert_allclose(upd["batch_stats"]["var"], 0.9 + 0.1 * X.var((0, 1)), rtol=1e-5)
    # Evaluation uses the stored statistics and changes nothing.
    ev = nn.BatchNorm(use_running_average=True)
    out = ev.apply(dict(v, **upd), X)
    m, var = upd["batch_stats"]["mean"], upd["batch_stats"]["var"]
    np.testing.assert_allclose(out, (X - m) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)


def test_batch_norm_use_running_average_exactly_once():
    with pytest.raises(ValueError, match="use_running_average"):
        nn.BatchNorm().init(KEY, X)
    with pytest.raises(ValueError, match="just once"):
        nn.BatchNorm(use_running_average=True).init(KEY, X, use_running_average=True)
    v = nn.BatchNorm().init(KEY, X, use_running_average=True)
    assert set(v) == {"params", "batch_stats"}


def test_batch_norm_axis_name_under_vmap_averages_over_devices():
    bn = nn.BatchNorm(use_running_average=False, axis_name="batch")
    v = bn.init(KEY, X[0])  # no mapped axis while initialising: allowed

    def step(x):
        return bn.apply(v, x, mutable=["batch_stats"])

    y, upd = jax.vmap(step, axis_name="batch")(X)
    np.testing.assert_allclose(y, _norm(X, (0, 1), 1e-5), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(upd["batch_stats"]["mean"][0], 0.01 * X.mean((0, 1)), rtol=1e-4)


def test_fast_and_two_pass_variance_agree():
    x = X + 1000.0
    a = nn.LayerNorm(use_fast_variance=False).init_with_output(KEY, x)[0]
    np.testing.assert_allclose(a, _norm(x.astype(np.float64), -1, 1e-6), rtol=1e-3, atol=1e-3)


def test_stats_in_float32_for_bfloat16_inputs():
    x = jnp.asarray(X, jnp.bfloat16)
    y, v = nn.LayerNorm().init_with_output(KEY, x)
    assert y.dtype == jnp.float32  # promoted with the float32 scale/bias
    y, v = nn.LayerNorm(dtype=jnp.bfloat16).init_with_output(KEY, x)
    assert y.dtype == jnp.bfloat16 and v["params"]["scale"].dtype == jnp.float32
    _, v = nn.BatchNorm(use_running_average=False).init_with_output(KEY, x)
    assert v["batch_stats"]["mean"].dtype == jnp.float32


def test_mask_limits_statistics():
    mask = np.ones(X.shape, bool)
    mask[..., 3:] = False
    y = nn.LayerNorm().init_with_output(KEY, X, mask=mask)[0]
    m = X[..., :3].mean(-1, keepdims=True)
    s = X[..., :3].var(-1, keepdims=True)
    np.testing.assert_allclose(y, (X - m) / np.sqrt(s + 1e-6), rtol=1e-4, atol=1e-4)


def test_group_norm_errors():
    x = jnp.ones((2, 3, 8))
    with pytest.raises(ValueError, match="does not divide"):
        nn.GroupNorm().init(KEY, x)  # 32 groups, 8 channels
    with pytest.raises(ValueError, match="group size"):
        nn.GroupNorm(num_groups=None, group_size=3).init(KEY, x)
    with pytest.raises(ValueError, match="Either `num_groups` or `group_size`"):
        nn.GroupNorm(num_groups=2, group_size=4).init(KEY, x)
    with pytest.raises(ValueError, match="final dimension"):
        nn.GroupNorm(num_groups=2, reduction_axes=(1,)).init(KEY, x)


def test_instance_norm_rejects_batch_axis_and_bad_axes():
    with pytest.raises(ValueError, match="leading dimension"):
        nn.InstanceNorm(feature_axes=(0, -1)).init(KEY, X)
    with pytest.raises(IndexError, match=r"axis 5.*3 dimensions"):
        nn.LayerNorm(reduction_axes=5).init(KEY, X)


def test_spectral_norm_bounds_the_largest_singular_value():
    layer = nn.SpectralNorm(nn.Dense(6, kernel_init=nn.initializers.normal(3.0)), n_steps=20)
    x = jnp.ones((2, 5))
    v = layer.init(KEY, x, update_stats=True)
    _, upd = layer.apply(v, x, update_stats=True, mutable=["batch_stats"])
    kernel = np.asarray(v["params"]["layer_instance"]["kernel"])
    sigma = float(upd["batch_stats"]["layer_instance/kernel/sigma"])
    np.testing.assert_allclose(sigma, np.linalg.svd(kernel, compute_uv=False)[0], rtol=1e-3)
    # With the stats frozen nothing is written back.
    _, same = layer.apply(v, x, update_stats=False, mutable=["batch_stats"])
    np.testing.assert_array_equal(same["batch_stats"]["layer_instance/kernel/u"],
                                  v["batch_stats"]["layer_instance/kernel/u"])


def test_spectral_norm_rejects_non_matrices_when_asked():
    layer = nn.SpectralNorm(nn.Conv(3, (2, 2)), error_on_non_matrix=True)
    with pytest.raises(ValueError, match="layer_instance/kernel"):
        layer.init(KEY, jnp.ones((1, 4, 4, 2)), update_stats=True)


def test_weight_norm_gives_unit_columns_times_scale():
    layer = nn.WeightNorm(nn.Dense(3, use_bias=False), scale_init=nn.initializers.constant(2.0))
    x = jnp.eye(4)
    y, v = layer.init_with_output(KEY, x)
    assert v["params"]["layer_instance/kernel/scale"].shape == (3,)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(y), axis=0), 2.0, rtol=1e-5)
    _, v2 = nn.WeightNorm(nn.Dense(3), use_scale=False).init_with_output(KEY, x)
    assert set(v2["params"]) == {"layer_instance"}


@pytest.mark.parametrize("name", ["LayerNorm", "RMSNorm", "InstanceNorm", "GroupNorm"])
def test_mask_of_the_wrong_shape_names_layer_and_expected_shape(name):
    layer = nn.GroupNorm(num_groups=2) if name == "GroupNorm" else getattr(nn, name)()
    with pytest.raises(ValueError) as info:
        layer.init(KEY, X, mask=np.ones((4, 3, 5), bool))
    assert name in str(info.value) and "(4, 3, 6)" in str(info.value)
    with pytest.raises(ValueError, match="BatchNorm"):
        nn.BatchNorm(use_running_average=False).init(KEY, X, mask=np.ones((2, 6), bool))
