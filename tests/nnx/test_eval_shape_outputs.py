"""nnx.eval_shape's outputs: fresh abstract objects even where the function returns (part
of) an input, and, under a mesh, the sharding each Variable's annotation asks for."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from flaxen import nnx


def _abstract(v):
    return v.get_raw_value()


def test_returning_an_input_gives_an_abstract_copy_and_leaves_the_input():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    out = nnx.eval_shape(lambda m: m, m)
    assert out is not m and out.kernel is not m.kernel
    assert isinstance(_abstract(out.kernel), jax.ShapeDtypeStruct)
    assert _abstract(out.kernel).shape == (2, 3)
    assert isinstance(m.kernel[...], jax.Array)  # the input keeps its arrays


def test_outputs_holding_inputs_keep_their_sharing():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))

    class Pair(nnx.Module):
        def __init__(self, a):
            self.a = a
            self.b = a

    kernel, pair, y = nnx.eval_shape(lambda m: (m.kernel, Pair(m), m(jnp.ones((4, 2)))), m)
    assert pair.a is pair.b and pair.a is not m
    assert _abstract(kernel).shape == (2, 3) and y.shape == (4, 3)


def _make():
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
    return nnx.Linear(2, 4, kernel_init=init, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_abstract_variables_carry_their_sharding_under_a_mesh(axis_type):
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((1, 1), ("data", "model"), axis_types=(kind, kind))
    with jax.set_mesh(mesh):
        m = nnx.eval_shape(_make)
    for var, spec in ((m.kernel, PartitionSpec(None, "model")), (m.bias, PartitionSpec())):
        sharding = _abstract(var).sharding
        assert isinstance(sharding, NamedSharding)
        assert sharding.spec in (spec, PartitionSpec(*([None] * var.ndim)))
        assert tuple(sharding.mesh.axis_names) == ("data", "model")


def test_no_mesh_no_sharding_and_functional_modes_untouched():
    m = nnx.eval_shape(lambda: nnx.Linear(2, 4, rngs=nnx.Rngs(0)))
    assert _abstract(m.bias).sharding is None
    mesh = jax.make_mesh((1,), ("model",), axis_types=(jax.sharding.AxisType.Auto,))
    with jax.set_mesh(mesh):  # Flax adds shardings in graph-updates mode only
        f = nnx.eval_shape(_make, graph_updates=False)
    assert _abstract(f.bias).sharding is None


def test_jit_eval_shape_of_a_function_returning_its_input():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    out = nnx.jit(lambda m: m).eval_shape(m)
    assert out is not m and isinstance(_abstract(out.kernel), jax.ShapeDtypeStruct)
    assert isinstance(m.kernel[...], jax.Array)
