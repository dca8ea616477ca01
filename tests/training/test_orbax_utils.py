"""Tests for flaxen.training.orbax_utils (skipped without orbax-checkpoint)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ocp = pytest.importorskip("orbax.checkpoint")

from flaxen.training import orbax_utils  # noqa: E402


def test_save_args_one_per_leaf():
    args = orbax_utils.save_args_from_target({"a": np.ones(2), "b": [1, None]})
    assert isinstance(args["a"], ocp.SaveArgs) and isinstance(args["b"][0], ocp.SaveArgs)
    assert args["b"][1] is None


def test_restore_args_follow_leaf_kinds():
    args = orbax_utils.restore_args_from_target({"np": np.ones(2), "jx": jnp.ones(2), "i": 3})
    assert args["np"].restore_type is np.ndarray
    assert isinstance(args["jx"], ocp.ArrayRestoreArgs)
    assert args["jx"].sharding == jnp.ones(2).sharding
    assert args["i"].restore_type is int


def test_restore_args_rebuild_named_sharding_on_mesh():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = np.asarray(jax.devices())
    if devices.size < 2:
        pytest.skip("needs 2 devices")
    mesh = Mesh(devices[:2], ("x",))
    x = jax.device_put(np.arange(4.0), NamedSharding(mesh, PartitionSpec("x")))
    other = Mesh(devices[:2][::-1], ("x",))
    args = orbax_utils.restore_args_from_target({"x": x}, mesh=other)
    assert args["x"].sharding.mesh == other
    assert orbax_utils.is_multi_device_array(x) and not orbax_utils.is_multi_device_array(
        jnp.ones(1))


def test_maybe_construct_transformations():
    assert orbax_utils.maybe_construct_transformations({"a": 1}, None) == {}
    assert orbax_utils.maybe_construct_transformations({"a": 1}, {"x": 1}) == {"x": 1}
    fallback = orbax_utils.maybe_construct_transformations(None, None)
    assert fallback[""].use_fallback
