"""Tests for flaxen.training.train_state.TrainState."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import serialization
from flaxen.core.frozen_dict import FrozenDict
from flaxen.training.train_state import OVERWRITE_WITH_GRADIENT, TrainState


def _apply(params, x):
    return x @ params["w"] + params["b"]


def make_state(tx=None):
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    return TrainState.create(apply_fn=_apply, params=params, tx=tx or optax.sgd(0.1))


def test_create_sets_step_and_opt_state():
    tx = optax.adam(1e-3)
    state = make_state(tx)
    assert state.step == 0 and state.apply_fn is _apply and state.tx is tx
    expected = tx.init(state.params)
    assert jax.tree.structure(state.opt_state) == jax.tree.structure(expected)


def test_apply_gradients_matches_manual_optax():
    tx = optax.adam(0.05)
    state = make_state(tx)
    grads = {"w": jnp.full((3, 2), 0.5), "b": jnp.ones(2)}
    new = state.apply_gradients(grads=grads)
    updates, opt_state = tx.update(grads, tx.init(state.params), state.params)
    expected = optax.apply_updates(state.params, updates)
    assert new.step == 1
    np.testing.assert_allclose(new.params["w"], expected["w"])
    np.testing.assert_allclose(new.opt_state[0].mu["b"], opt_state[0].mu["b"])
    assert new.apply_fn is _apply  # static fields carry over


def test_apply_gradients_under_jit_and_grad():
    state = make_state()
    x, y = jnp.ones((4, 3)), jnp.zeros((4, 2))

    @jax.jit
    def step(state):
        loss_fn = lambda p: jnp.mean((state.apply_fn(p, x) - y) ** 2)
        return state.apply_gradients(grads=jax.grad(loss_fn)(state.params))

    losses = []
    for _ in range(3):
        state = step(state)
        losses.append(float(jnp.mean((_apply(state.params, x) - y) ** 2)))
    assert int(state.step) == 3 and losses[0] > losses[-1]


def test_pytree_leaves_exclude_static_fields():
    state = make_state()
    leaves = jax.tree.leaves(state)
    assert len(leaves) == 1 + 2  # step + two params (sgd has an empty state)
    assert "apply_fn" not in serialization.to_state_dict(state)


def test_subclass_with_extra_fields_and_kwargs():
    class State(TrainState):
        batch_stats: Any = None

    state = State.create(apply_fn=None, params={"w": jnp.ones(1)}, tx=optax.sgd(1.0),
                         batch_stats={"mean": jnp.zeros(1)})
    new = state.apply_gradients(grads={"w": jnp.ones(1)}, batch_stats={"mean": jnp.ones(1)})
    assert isinstance(new, State)
    assert float(new.batch_stats["mean"][0]) == 1.0 and float(new.params["w"][0]) == 0.0


def test_frozen_dict_params():
    params = FrozenDict({"w": jnp.ones(2)})
    state = TrainState.create(apply_fn=None, params=params, tx=optax.sgd(1.0))
    new = state.apply_gradients(grads=FrozenDict({"w": jnp.ones(2)}))
    assert isinstance(new.params, FrozenDict)


def test_overwrite_with_gradient_collection():
    params = {"params": {"w": jnp.ones(2)}, OVERWRITE_WITH_GRADIENT: {"s": jnp.zeros(1)}}
    state = TrainState.create(apply_fn=None, params=params, tx=optax.sgd(0.1))
    grads = {"params": {"w": jnp.ones(2)}, OVERWRITE_WITH_GRADIENT: {"s": jnp.full(1, 7.0)}}
    new = state.apply_gradients(grads=grads)
    np.testing.assert_allclose(new.params["params"]["w"], [0.9, 0.9])
    assert float(new.params[OVERWRITE_WITH_GRADIENT]["s"][0]) == 7.0


def test_grads_of_other_structure_name_first_differing_path():
    state = make_state()
    with pytest.raises(ValueError, match=r"parameter at /w has no gradient.*jax.grad"):
        state.apply_gradients(grads={"b": jnp.zeros(2), "v": jnp.zeros((3, 2))})
    with pytest.raises(ValueError, match=r"gradient at /extra has no parameter"):
        state.apply_gradients(grads={"b": jnp.zeros(2), "w": jnp.zeros((3, 2)),
                                     "extra": jnp.zeros(1)})
    with pytest.raises(TypeError, match=r"gradient at /b has shape \(3,\).*shape \(2,\)"):
        state.apply_gradients(grads={"b": jnp.zeros(3), "w": jnp.zeros((3, 2))})


def test_grads_mismatch_is_reported_under_jit():
    state = make_state()
    with pytest.raises(ValueError, match="/w has no gradient"):
        jax.jit(lambda s, g: s.apply_gradients(grads=g))(state, {"b": jnp.zeros(2)})
