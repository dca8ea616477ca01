"""flaxen.core.spmd: the logical axis rules Linen and NNX share, and the sharding helpers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import flaxen.linen as nn
from flaxen.core import spmd


def test_context_sets_and_restores_rules_and_linen_sees_them():
    assert spmd.get_logical_axis_rules() == ()
    with spmd.logical_axis_rules([("batch", "data")]):
        assert spmd.get_logical_axis_rules() == [("batch", "data")]
        assert nn.get_logical_axis_rules() == (("batch", "data"),)
        with nn.logical_axis_rules((("embed", "model"),)):
            assert spmd.get_logical_axis_rules() == (("embed", "model"),)
        assert nn.logical_to_mesh_axes(("batch", None)) == PartitionSpec("data", None)
    assert spmd.get_logical_axis_rules() == ()


def test_set_inside_a_context_is_undone_when_it_exits():
    with spmd.logical_axis_rules((("a", "x"),)):
        spmd.set_logical_axis_rules((("b", "y"),))
        assert spmd.get_logical_axis_rules() == (("b", "y"),)
    assert spmd.get_logical_axis_rules() == ()


def test_malformed_rule_names_its_index():
    with pytest.raises(TypeError, match="rule #1"):
        spmd.set_logical_axis_rules((("a", "x"), "oops"))


def test_composite_rules_merge_and_conflict():
    assert spmd.composite_rules((), ()) == ()
    assert spmd.composite_rules((("a", "x"),), ()) == (("a", "x"),)
    assert spmd.composite_rules((), (("b", "y"),)) == (("b", "y"),)
    assert spmd.composite_rules((("a", "x"),), (("a", "x"), ("b", "y"))) == (
        ("a", "x"), ("b", "y"))
    with pytest.raises(ValueError, match="Inconsistent logical axis annotations for a"):
        spmd.composite_rules((("a", "x"),), (("a", "z"),))


def test_apply_rules_uses_context_and_local_rules():
    assert spmd.apply_rules(("embed", "mlp"), None) == PartitionSpec("embed", "mlp")
    with spmd.logical_axis_rules((("embed", "model"),)):
        spec = spmd.get_pspec(("embed", "mlp"), (("mlp", "data"),))
    assert spec == PartitionSpec("model", "data")
    assert spmd.from_sharding_rules(("a", None, "b"), (("b", "y"),)) == ("a", None, "y")


def test_named_sharding_keeps_its_mesh():
    mesh = jax.make_mesh((1,), ("model",))
    named = NamedSharding(mesh, PartitionSpec("model", None))
    out = spmd.map_sharding(lambda a: None if a == "model" else a, named)
    assert isinstance(out, NamedSharding) and out.spec == PartitionSpec(None, None)
    assert spmd.get_mesh(out) is mesh
    assert spmd.get_mesh(PartitionSpec("a")) is None


def test_shard_value_places_on_mesh_and_requires_one():
    x = jnp.arange(4.0)
    assert spmd.shard_value(x, None, None, None) is x
    with pytest.raises(ValueError, match="mesh context"):
        spmd.shard_value(x, ("embed",), None, None)
    mesh = jax.make_mesh((1,), ("model",), axis_types=(jax.sharding.AxisType.Auto,))
    y = jax.jit(lambda v: spmd.shard_value(v, ("embed",), (("embed", "model"),), mesh))(x)
    np.testing.assert_array_equal(y, x)
