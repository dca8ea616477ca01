"""Differential tests: flaxen.training.lr_schedule against flax's, to the bit."""

import flax.training.lr_schedule as F
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.training.lr_schedule as X

STEPS = [0, 1, 3, 4, 5, 10, 11, 20, 25, 35, 100, jnp.int32(20), jnp.float32(20.5),
         jnp.arange(0, 40, 7)]


def _values(make, lib):
    out = []
    for step in STEPS:
        try:
            v = make(lib)(step)
        except Exception as e:  # noqa: BLE001 - compared by class
            out.append(type(e))
        else:
            out.append((np.asarray(v).dtype, np.asarray(v).tobytes()))
    return out


@pytest.mark.parametrize("make", [
    lambda L: L.create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.1], [2, 0.01]]),
    lambda L: L.create_stepped_learning_rate_schedule(1.0, 10, [[0.35, 0.1]]),
    lambda L: L.create_stepped_learning_rate_schedule(1.0, 10, [[3, 0.5], [1, 0.1]]),
    lambda L: L.create_stepped_learning_rate_schedule(0.3, 7, [[1, 0.1], [2.5, 0.01]], 1.5),
    lambda L: L.create_stepped_learning_rate_schedule(0.1, 0, [[1, 0.1]]),
    lambda L: L.create_constant_learning_rate_schedule(0.1, 10, warmup_length=3),
    lambda L: L.create_constant_learning_rate_schedule(0.1, 10, warmup_length=-1),
    lambda L: L.create_cosine_learning_rate_schedule(0.1, 10, 3, warmup_length=0.5),
    lambda L: L.create_cosine_learning_rate_schedule(0.1, 10, 0),
])
def test_schedule_values_match_flax(make):
    assert _values(make, X) == _values(make, F)
