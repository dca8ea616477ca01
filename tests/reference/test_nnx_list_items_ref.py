"""Differential test: which ``nnx.List`` items are pytree leaves, flaxen.nnx next to
flax.nnx 0.12.8 on the same items."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _leaves(lib):
    rngs = lib.Rngs(0)
    lst = lib.List([1, "a", jnp.ones(2), lib.Linear(2, 2, rngs=rngs), None, jax.nn.relu])
    seq = lib.Sequential(lib.Linear(2, 3, rngs=rngs), jax.nn.relu)
    out = jax.jit(lambda m, x: m(x))(seq, jnp.ones((1, 2)))
    return ([x.shape for x in jax.tree.leaves(lst)], len(jax.tree.leaves(seq)), out.shape,
            len(jax.tree.leaves(lib.state(lst))))


def test_same_leaves_as_flax():
    assert _leaves(nnx) == _leaves(fnnx)
