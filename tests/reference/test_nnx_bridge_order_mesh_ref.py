"""Differential tests, flaxen.nnx next to flax.nnx 0.12.8 on the same inputs: the attribute
order of a ``bridge.ToNNX`` wrapper (its repr), the metadata of a ``to_linen`` box, eager
sharding without a mesh, and ``nnx.remat`` with static arguments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen
from flaxen import linen as nn
from flaxen import nnx

flax = pytest.importorskip("flax")
from flax import linen as fnn  # noqa: E402
from flax import nnx as fnnx  # noqa: E402


def _net(linen):
    class Net(linen.Module):
        @linen.compact
        def __call__(self, x):
            x = linen.Dense(3, name="z_dense")(x)
            x = linen.BatchNorm(use_running_average=False, name="a_norm")(x)
            return linen.Dense(2)(x)

    return Net()


def _wrapper_layout(linen, lib):
    model = lib.bridge.ToNNX(_net(linen), rngs=lib.Rngs(0)).lazy_init(jnp.ones((4, 2)))
    names = [k for k in vars(model) if not k.startswith(("to_nnx__", "_pytree__"))]
    return {k: list(getattr(model, k)) if isinstance(getattr(model, k), dict) else k
            for k in names}, names


def test_tonnx_attributes_come_in_flax_order():
    assert _wrapper_layout(nn, nnx) == _wrapper_layout(fnn, fnnx)


def _boxed_metadata(lib):
    layer = lib.bridge.to_linen(lib.Linear, 2, 3, kernel_init=lib.with_partitioning(
        jax.nn.initializers.ones, ("in", "out")))
    with lib.use_eager_sharding(False):
        variables = layer.init(jax.random.key(0), jnp.ones((1, 2)))
    return variables["params"]["kernel"].metadata


def test_to_linen_box_keeps_the_whole_metadata():
    assert _boxed_metadata(nnx) == _boxed_metadata(fnnx)


MESHLESS = {
    "with_partitioning": lambda lib: lib.Linear(
        2, 4, kernel_init=lib.with_partitioning(lib.initializers.lecun_normal(), (None, "m")),
        rngs=lib.Rngs(0)),
    "out_sharding": lambda lib: lib.Param(jnp.ones((2, 2)), out_sharding=("a", None)),
    "all None": lambda lib: lib.Param(jnp.ones((2, 2)), out_sharding=(None, None)),
    "under jit": lambda lib: lib.jit(lambda: lib.Param(jnp.ones(2), out_sharding=("a",)))(),
    "eval_shape": lambda lib: lib.eval_shape(
        lambda: lib.Param(jnp.ones(2), out_sharding=("a",))),
    "empty spec": lambda lib: lib.Param(jnp.ones(2), out_sharding=()),
    "eager off": lambda lib: lib.Param(jnp.ones(2), out_sharding=("a",), eager_sharding=False),
}


def _outcome(lib, make):
    try:
        make(lib)
    except ValueError as e:
        return "ValueError", "An auto mesh context or metadata is required" in str(e)
    return "ok", None


@pytest.mark.parametrize("case", sorted(MESHLESS))
def test_eager_sharding_without_a_mesh_as_flax(case):
    assert _outcome(nnx, MESHLESS[case]) == _outcome(fnnx, MESHLESS[case])


def test_meshless_error_is_flaxens_own_class():
    with pytest.raises(flaxen.errors.MeshRequiredError):
        MESHLESS["with_partitioning"](nnx)


def _remat_grad(lib):
    m = lib.Linear(2, 2, rngs=lib.Rngs(0))
    f = lib.remat(lambda m, x, n: (m(x) ** n).sum(), static_argnums=(2,))
    g = lib.grad(f)(m, jnp.array([[0.3, -0.7]]), 3)
    return np.asarray(g["kernel"][...]), np.asarray(g["bias"][...])


def test_remat_static_argnums_same_gradient():
    ours, theirs = _remat_grad(nnx), _remat_grad(fnnx)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def _abstract_specs(lib, **modes):
    mesh = jax.make_mesh((1, 1), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def make():
        init = lib.with_partitioning(lib.initializers.lecun_normal(), (None, "model"))
        return lib.Linear(2, 4, kernel_init=init, rngs=lib.Rngs(0))

    with jax.set_mesh(mesh):
        m = lib.eval_shape(make, **modes)
    return [getattr(getattr(v.get_raw_value(), "sharding", None), "spec", None)
            for v in (m.kernel, m.bias)]


@pytest.mark.parametrize("modes", [{}, {"graph_updates": False}, {"graph": False}])
def test_eval_shape_shardings_as_flax(modes):
    assert _abstract_specs(nnx, **modes) == _abstract_specs(fnnx, **modes)


def test_eval_shape_of_an_input_as_flax():
    def run(lib):
        m = lib.Linear(2, 3, rngs=lib.Rngs(0))
        out = lib.eval_shape(lambda m: m, m)
        return out is m, type(out.kernel.get_raw_value()).__name__
    assert run(nnx) == run(fnnx)
