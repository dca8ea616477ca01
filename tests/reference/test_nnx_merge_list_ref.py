"""Differential test: ``nnx.merge`` of a plain list of leaves and the order of the deprecated
``Module.iter_modules()``, flaxen.nnx next to flax.nnx 0.12.8."""

import warnings

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _merge_list(lib, graph):
    model = lib.Sequential(lib.Linear(2, 3, rngs=lib.Rngs(0)), lib.BatchNorm(3, rngs=lib.Rngs(0)))
    gd, st = lib.split(model, graph=graph)
    raw = jax.tree.leaves(st)
    out = jax.jit(lambda leaves, x: lib.merge(gd, leaves)(x))(raw, jnp.ones((2, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        order = [p for p, _ in model.iter_modules()]
    return out.round(4).tolist(), order


@pytest.mark.parametrize("graph", [True, False])
def test_same_as_flax(graph):
    assert _merge_list(nnx, graph) == _merge_list(fnnx, graph)
