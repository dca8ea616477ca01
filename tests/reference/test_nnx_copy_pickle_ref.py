"""Differential tests: ``copy.copy`` and a pickle round trip of NNX objects keep their data
leaves and their data/static split, flaxen.nnx next to flax.nnx 0.12.8."""

import copy
import pickle

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _block_class(lib):
    class Block(lib.Module):
        def __init__(self, rngs):
            self.dense = lib.Linear(2, 3, rngs=rngs)
            self.count = lib.data(jnp.zeros(()))
            self.label = "b"

    return Block


# module-level classes, as pickle finds a class by its qualified name
Block, FlaxBlock = _block_class(nnx), _block_class(fnnx)
Block.__qualname__, FlaxBlock.__qualname__ = "Block", "FlaxBlock"


def _roundtrip(make):
    def case(lib):
        block = (Block if lib is nnx else FlaxBlock)(lib.Rngs(1))
        out = []
        for obj in (lib.Linear(2, 3, rngs=lib.Rngs(0)), block, lib.Rngs(2)):
            other = make(obj)
            out.append(([x.shape for x in jax.tree.leaves(other)],
                        str(jax.tree.structure(other)) == str(jax.tree.structure(obj))))
        return out

    return case


@pytest.mark.parametrize("case", [_roundtrip(copy.copy),
                                  _roundtrip(lambda x: pickle.loads(pickle.dumps(x)))],
                         ids=["copy", "pickle"])
def test_same_outcome_as_flax(case):
    assert case(nnx) == case(fnnx)
