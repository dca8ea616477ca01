"""Logical axis rules, logical constraints and LogicallyPartitioned boxes (flaxen.linen.spmd)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from flaxen.linen import spmd

RULES = (("batch", "data"), ("embed", "model"), ("mlp", "model"))


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))


def test_rule_precedence_first_free_mesh_axis_wins():
    rules = (("batch", "X"), ("features", "X"), ("heads", "Y"), ("batch", "Z"))
    spec = spmd.logical_to_mesh_axes(("batch", "length", "heads", "features"), rules)
    assert spec == P("X", None, "Y", None)


def test_later_rule_used_when_earlier_mesh_axis_taken():
    rules = (("a", "X"), ("b", "X"), ("b", "Y"))
    assert spmd.logical_to_mesh_axes(("a", "b"), rules) == P("X", "Y")


def test_explicit_none_rule_leaves_dimension_unsharded_and_blocks_later_rules():
    rules = (("embed", None), ("embed", "model"))
    assert spmd.logical_to_mesh_axes(("embed",), rules) == P(None)


def test_tuple_mesh_axes_and_none_names():
    rules = (("batch", ("data", "model")), ("embed", "model"))
    assert spmd.logical_to_mesh_axes(("batch", None, "embed"), rules) == P(
        ("data", "model"), None, None)


def test_unknown_names_are_unsharded_and_none_spec_passes_through():
    assert spmd.logical_to_mesh_axes(("foo", "batch"), RULES) == P(None, "data")
    assert spmd.logical_to_mesh_axes(None, RULES) is None


def test_duplicate_dimension_names_rejected():
    with pytest.raises(ValueError, match="more than once"):
        spmd.logical_to_mesh_axes(("batch", "batch"), RULES)


def test_malformed_rule_names_the_rule():
    with pytest.raises(TypeError, match="rule #1"):
        spmd.logical_to_mesh_axes(("batch",), (("batch", "data"), "oops"))


def test_context_rules_nest_and_restore():
    spmd.set_logical_axis_rules((("batch", "g"),))
    try:
        assert spmd.get_logical_axis_rules() == (("batch", "g"),)
        with spmd.logical_axis_rules(RULES):
            assert spmd.logical_to_mesh_axes(("batch",)) == P("data")
            with spmd.logical_axis_rules((("batch", "inner"),)):
                assert spmd.logical_to_mesh_axes(("batch",)) == P("inner")
            assert spmd.get_logical_axis_rules() == RULES
        assert spmd.logical_to_mesh_axes(("batch",)) == P("g")
    finally:
        spmd.set_logical_axis_rules(())
    assert spmd.get_logical_axis_rules() == ()


def test_logical_to_mesh_tree_and_sharding(mesh):
    tree = {"w": P("embed", "mlp"), "b": P("mlp"), "s": P()}
    # embed takes 'model' first, so mlp finds it used and stays unsharded
    assert spmd.logical_to_mesh(tree, RULES) == {"w": P("model", None), "b": P("model"), "s": P()}
    shardings = spmd.logical_to_mesh_sharding(tree, mesh, RULES)
    assert shardings["w"] == NamedSharding(mesh, P("model", None))


def test_sharding_with_unknown_mesh_axis_is_a_clear_error(mesh):
    with pytest.raises(ValueError, match="'nope'.*does not have"):
        spmd.logical_to_mesh_sharding({"w": P("batch")}, mesh, (("batch", "nope"),))


def test_constraint_is_identity_without_mesh():
    x = jnp.ones((4, 2))
    assert spmd.with_logical_constraint(x, ("batch", "embed"), rules=RULES) is x


def test_constraint_shards_under_jit(mesh):
    x = jnp.arange(32.0).reshape(8, 4)
    f = jax.jit(
        lambda x: spmd.with_logical_constraint(x, ("batch", "embed"), rules=RULES, mesh=mesh) * 2)
    y = f(x)
    np.testing.assert_array_equal(y, x * 2)
    assert y.sharding.spec == P("data", "model")


def test_constraint_fallbacks(mesh):
    x = jnp.ones((8, 4))
    names = ("batch", "unknown")
    f = jax.jit(lambda x: spmd.with_logical_constraint(x, names, rules=RULES, mesh=mesh))
    assert f(x).sharding.is_equivalent_to(NamedSharding(mesh, P("data", None)), 2)
    g = jax.jit(
        lambda x: spmd.with_logical_constraint(
            x, names, rules=RULES, mesh=mesh, fallback=spmd.RulesFallback.RAISE_ERROR
        )
    )
    with pytest.raises(ValueError, match="did not match a rule.*'unknown'"):
        g(x)
    h = jax.jit(
        lambda x: spmd.with_logical_constraint(
            x, names, rules=RULES, mesh=mesh, fallback=spmd.RulesFallback.NO_CONSTRAINT
        )
    )
    np.testing.assert_array_equal(h(x), x)


def test_constraint_rank_mismatch_is_clear(mesh):
    with pytest.raises(ValueError, match="2 dimensions.*3 logical names"):
        jax.jit(lambda x: spmd.with_logical_constraint(
            x, ("batch", "embed", "mlp"), rules=RULES, mesh=mesh))(jnp.ones((8, 4)))


def test_fewer_names_than_dimensions_leave_the_rest_replicated(mesh):
    # as in jax.lax.with_sharding_constraint: a short spec says nothing of the last axes
    y = jax.jit(lambda x: spmd.with_logical_constraint(x, ("batch",), rules=RULES, mesh=mesh))(
        jnp.ones((8, 4, 2)))
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, P("data")), 3)


def test_constraint_is_a_no_op_without_rules_or_names(monkeypatch, mesh):
    calls = []
    monkeypatch.setattr(spmd, "_with_sharding_constraint", lambda *a, **k: calls.append(a))
    x = jnp.ones((8, 4))
    assert spmd.with_logical_constraint(x, ("batch", "embed"), mesh=mesh) is x  # no rules
    assert spmd.with_logical_constraint(x, None, rules=RULES, mesh=mesh) is x
    assert not calls
    spmd.with_logical_constraint(x, ("batch", "unknown"), rules=RULES)
    assert calls == [(x, P("data", None))]


def test_mesh_axis_that_does_not_divide_the_dimension_errors(mesh):
    # 'model' has 4 devices; a dimension of 3 cannot be split over it
    x = jnp.ones((8, 3))
    with pytest.raises(ValueError):
        jax.device_put(x, spmd.logical_to_mesh_sharding(P("batch", "embed"), mesh, RULES))


def test_logically_partitioned_box(mesh):
    init = spmd.with_logical_partitioning(jax.nn.initializers.ones, ("embed", "mlp"), rules=RULES)
    box = init(jax.random.key(0), (4, 8))
    assert isinstance(box, spmd.LogicallyPartitioned)
    assert box.get_partition_spec() == P("embed", "mlp")
    # get_sharding takes the names as mesh axes (Flax's); logical_to_mesh_sharding translates
    with pytest.raises(ValueError, match="embed"):
        box.get_sharding(mesh)
    assert spmd.logical_to_mesh_sharding(box.get_partition_spec(), mesh, RULES) == (
        NamedSharding(mesh, P("model", None)))
    # boxes pass through tree_map with their metadata
    doubled = jax.tree_util.tree_map(lambda v: v * 2, box)
    assert isinstance(doubled, spmd.LogicallyPartitioned) and doubled.rules == RULES
    np.testing.assert_array_equal(doubled.value, 2 * np.ones((4, 8)))
    assert box.unbox() is box.value  # no mesh anywhere: no constraint
    sharded = jax.jit(lambda b: b.unbox() + 0)(box.replace(mesh=mesh))
    assert sharded.sharding.is_equivalent_to(NamedSharding(mesh, P("model", None)), 2)


def test_unconstrained_passes_through_logical_to_mesh_axes():
    unc = P.UNCONSTRAINED
    rules = (("batch", "data"), ("embed", unc), ("mlp", "data"))
    assert spmd.logical_to_mesh_axes(("batch", unc, None), rules) == P("data", unc, None)
    # UNCONSTRAINED as a rule's target claims no mesh axis: 'mlp' may still take 'data'
    assert spmd.logical_to_mesh_axes(("embed", "mlp"), rules) == P(unc, "data")
    # UNCONSTRAINED may repeat (only string names must be unique)
    assert spmd.logical_to_mesh_axes((unc, unc, "batch"), rules) == P(unc, unc, "data")
    with spmd.logical_axis_rules(rules):
        assert spmd.logical_to_mesh_axes(("batch", unc)) == P("data", unc)


def test_with_logical_constraint_accepts_unconstrained_names():
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    x = jnp.ones((2, 3))
    rules = (("batch", "data"),)

    @jax.jit
    def f(x):
        return spmd.with_logical_constraint(x, ("batch", P.UNCONSTRAINED), rules=rules,
                                            mesh=mesh)

    np.testing.assert_array_equal(f(x), x)


def test_legacy_with_mesh_block_applies_no_constraint(mesh):
    """As in Flax 0.12.8, only jax.set_mesh's mesh counts, not a legacy `with mesh:`."""
    x = jnp.ones((4, 8))

    def both(v):
        return (spmd.with_logical_constraint(v, ("batch", None)) + 0,
                spmd.LogicallyPartitioned(v, ("batch", None)).unbox() + 0)

    with spmd.logical_axis_rules(RULES):
        with pytest.warns(DeprecationWarning, match="with mesh"), mesh:
            for out in jax.jit(both)(x):
                assert out.sharding.is_fully_replicated
        with jax.set_mesh(mesh):
            for out in jax.jit(both)(x):
                assert out.sharding.is_equivalent_to(NamedSharding(mesh, P("data", None)), 2)
