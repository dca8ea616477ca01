"""Tests of the legacy ``flaxen.linen.partitioning`` API (``*_axes`` metadata collections)."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec

import flaxen.linen as nn
from flaxen.linen import partitioning as P

KEY = jax.random.PRNGKey(0)


class Layer(nn.Module):
    @nn.compact
    def __call__(self, x):
        w = P.param_with_axes("w", nn.initializers.ones, (x.shape[-1], 3), axes=("embed", "mlp"))
        s = P.variable_with_axes("stats", "s", jnp.zeros, (3,), axes=("mlp",))
        s.value = s.value + 1
        return x @ w


class Body(nn.Module):
    @nn.compact
    def __call__(self, c, _):
        w = P.param_with_axes("w", nn.initializers.ones, (4, 4), axes=("embed", "mlp"))
        return c @ w, None


def test_param_and_variable_with_axes_record_metadata():
    v = Layer().init(KEY, jnp.ones((2, 4)))
    assert v["params"]["w"].shape == (4, 3)
    assert v["params_axes"]["w_axes"] == P.AxisMetadata(("embed", "mlp"))
    assert v["stats_axes"]["s_axes"].names == ("mlp",)
    assert jax.tree_util.tree_leaves(v["params_axes"]) == []  # metadata has no leaves
    names = P.get_axis_names(v["params_axes"])
    assert names["w"] == PartitionSpec("embed", "mlp")
    # apply needs no *_axes collections (sow is a no-op there)
    y, state = Layer().apply({"params": v["params"], "stats": v["stats"]}, jnp.ones((2, 4)),
                             mutable=["stats"])
    assert y.shape == (2, 3) and float(state["stats"]["s"][0]) == 2.0


def test_partitioned_variable_is_a_variable():
    class M(nn.Module):
        @nn.compact
        def __call__(self):
            v = P.variable_with_axes("c", "x", jnp.ones, (2,), axes=("a",))
            assert isinstance(v, nn.Variable) and isinstance(v, P.PartitionedVariable)
            return v.value

    assert M().init_with_output(KEY)[0].shape == (2,)


def test_axis_count_mismatch_is_an_error():
    class Bad(nn.Module):
        @nn.compact
        def __call__(self, x):
            return P.param_with_axes("w", nn.initializers.ones, (2, 3), axes=("a",))

    with pytest.raises(ValueError, match="params/w.*2 dimensions.*1 axis names"):
        Bad().init(KEY, 1.0)


def test_param_with_axes_outside_a_module_is_an_error():
    with pytest.raises(ValueError, match="inside a Module"):
        P.param_with_axes("w", nn.initializers.ones, (2,), axes=("a",))


@pytest.mark.parametrize("axis_name", ["layers", "stack"])
def test_scan_with_axes_inserts_axis_name(axis_name):
    S = P.scan_with_axes(Body, variable_axes={"params": 0}, split_rngs={"params": True},
                         length=5, axis_name=axis_name)
    assert S.__name__ == "Map_variablesScanBody"
    v = S().init(KEY, jnp.ones((2, 4)), None)
    assert v["params"]["w"].shape == (5, 4, 4)
    assert v["params_axes"]["w_axes"].names == (axis_name, "embed", "mlp")
    out, _ = S().apply({"params": v["params"]}, jnp.ones((2, 4)), None)
    assert out.shape == (2, 4)


@pytest.mark.parametrize("axis, expected", [(0, ("ens", "embed", "mlp")),
                                            (1, ("embed", "ens", "mlp"))])
def test_vmap_with_axes_inserts_axis_name(axis, expected):
    class VB(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x @ P.param_with_axes("w", nn.initializers.ones, (4, 4),
                                         axes=("embed", "mlp"))

    V = P.vmap_with_axes(VB, variable_axes={"params": axis}, split_rngs={"params": True},
                         partitioning_axis_names={"params": "ens"})
    assert V.__name__ == "Map_variablesVmapVB"  # as in Flax
    v = V().init(KEY, jnp.ones((3, 2, 4)))
    assert v["params_axes"]["w_axes"].names == expected


def test_rule_helpers_are_the_spmd_ones():
    assert P.get_axis_rules() == ()
    with P.axis_rules([("embed", "data")]):
        assert nn.get_logical_axis_rules() == P.get_axis_rules()
        assert P.logical_to_mesh_axes(("embed", "mlp")) == PartitionSpec("data", None)
    x = jnp.ones(3)
    assert P.with_sharding_constraint(x, ("embed",)) is x  # no mesh: unchanged


def test_legacy_remat_name_and_static_args():
    class Flag(nn.Module):
        @nn.compact
        def __call__(self, x, double):
            y = nn.Dense(2)(x)
            return y * 2 if double else y

    R = P.remat(Flag, static_argnums=(2,))
    assert R.__name__ == "Core_remat_staticFlag"
    v = R().init(KEY, jnp.ones((1, 2)), True)
    assert R().apply(v, jnp.ones((1, 2)), False).shape == (1, 2)
    with pytest.raises(ValueError, match="argument 0"):
        P.remat(Flag, static_argnums=0)


@pytest.mark.parametrize("axes", [None, ()])
def test_no_axes_or_empty_axes_are_accepted(axes):
    class M(nn.Module):
        @nn.compact
        def __call__(self, x):
            w = P.param_with_axes("w", nn.initializers.zeros, (2, 2), axes=axes)
            v = P.variable_with_axes("stats", "s", jnp.zeros, (2, 2), axes=axes)
            return x + w + v.value

    variables = M().init(KEY, jnp.ones((2, 2)))
    assert ("params_axes" in variables) == (axes is not None)
    if axes is not None:  # an empty tuple is recorded: the variable is replicated
        assert dict(P.get_axis_names(variables["stats_axes"])) == {"s": PartitionSpec()}


def test_pytree_param_axes_are_recorded_and_converted_leaf_by_leaf():
    axes = {"a": ("x", "y"), "b": (("x", "y"), ("y", "x"))}

    def init(key, shape, dtype=jnp.float32):
        return {"a": jnp.zeros(shape), "b": (jnp.zeros(shape), jnp.ones(shape))}

    class M(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + P.param_with_axes("w", init, (2, 2), axes=axes)["b"][1]

    with P.axis_rules((("x", "model"), ("y", "data"))):
        variables = M().init(KEY, jnp.ones((2, 2)))
    assert variables["params_axes"]["w_axes"] == P.AxisMetadata(names=axes)
    assert P.get_axis_names(variables["params_axes"]) == {"w": {
        "a": PartitionSpec("x", "y"), "b": (PartitionSpec("x", "y"), PartitionSpec("y", "x"))}}


def test_pytree_axes_must_follow_the_value():
    class M(nn.Module):
        @nn.compact
        def __call__(self, x):
            return P.param_with_axes("w", lambda k, s: {"a": jnp.zeros(s)}, (2,),
                                     axes={"a": ("x",), "c": ("x",)})

    with pytest.raises(ValueError, match=r"params/w.*\['c'\].*same structure"):
        M().init(KEY, 1.0)


def test_scan_axis_markers_are_the_lift_in_out_classes():
    from flaxen.core import lift

    assert P.ScanIn is lift.In and P.ScanOut is lift.Out
    assert P.ScanIn(0).axis == 0
