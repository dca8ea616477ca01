"""Differential tests: ``Variable.to_state`` (Flax 0.12.8's alias of ``copy``) and
``update_from_state``, flaxen.nnx next to flax.nnx 0.12.8 on the same inputs."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _to_state(lib):
    w = lib.Param(jnp.arange(3.0), tag="w")
    s = w.to_state(tag="s")
    t = w.to_state(jnp.zeros(2))
    return (type(s).__name__, s is w, s.get_metadata()["tag"], w.get_metadata()["tag"],
            s[...].tolist(), t[...].tolist(), t.get_metadata()["tag"],
            jax.tree.structure(s).num_leaves)


def _to_state_of_a_ref(lib):
    w = lib.Param(jnp.ones(2), ref=True)
    s = w.to_state()
    raw = w.to_state(_copy_ref=False)
    return (s.ref, isinstance(s.get_raw_value(), jax.Ref), s.get_raw_value() is w.get_raw_value(),
            raw.get_raw_value() is w.get_raw_value())


def _update_from_state(lib):
    w = lib.Param(jnp.ones(2), tag="old")
    src = lib.Param(jnp.zeros(2), tag="new")
    w.update_from_state(src)
    return w[...].tolist(), w.get_metadata()["tag"], w.get_metadata()["ref"]


@pytest.mark.parametrize("case", [_to_state, _to_state_of_a_ref, _update_from_state])
def test_same_outcome_as_flax(case):
    assert case(nnx) == case(fnnx)


def test_flat_state_is_a_sequence_of_pairs_as_in_flax():
    def pairs(lib):
        class Net(lib.Module):
            def __init__(self, rngs):
                self.layers = lib.List([lib.Linear(1, 1, rngs=rngs) for _ in range(2)])

        fs = lib.state(Net(lib.Rngs(0))).flat_state()
        return type(fs).__name__, [tuple(p) for p, _ in fs], [type(v).__name__ for v in fs.leaves]

    assert pairs(nnx) == pairs(fnnx)
