"""Differential tests: where flaxen applies sharding constraints and builds shardings
from partitioning boxes, against flax (8 host devices, see conftest.py)."""

import warnings

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import flaxen.linen as xnn

RULES = (("batch", "data"), ("embed", "model"))


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))


def _outcome(fn):
    try:
        return repr(fn()).replace("flaxen", "flax")
    except Exception as e:  # noqa: BLE001 - compared by class
        return type(e).__name__


def _constrained(nn, mesh, legacy):
    def body(x):
        return (nn.with_logical_constraint(x, ("batch", None)) + 0,
                nn.LogicallyPartitioned(x, ("batch", None)).unbox() + 0,
                nn.Partitioned(x, ("data", None)).unbox() + 0)

    with nn.logical_axis_rules(RULES), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # `with mesh:` is deprecated
        with (mesh if legacy else jax.set_mesh(mesh)):
            return [repr(y.sharding) for y in jax.jit(body)(jnp.ones((4, 4)))]


@pytest.mark.parametrize("legacy", [True, False])
def test_constraints_under_legacy_and_set_mesh_match_flax(mesh, legacy):
    assert _constrained(xnn, mesh, legacy) == _constrained(fnn, mesh, legacy)


@pytest.mark.parametrize("names", [("embed", None), ("data", None)])
def test_get_sharding_of_logically_partitioned_matches_flax(mesh, names):
    def run(nn):
        box = nn.LogicallyPartitioned(jnp.ones((4, 4)), names, rules=(("data", "model"),
                                                                       ("embed", "model")))
        return _outcome(lambda: nn.get_sharding({"w": box}, mesh))

    assert run(xnn) == run(fnn)
