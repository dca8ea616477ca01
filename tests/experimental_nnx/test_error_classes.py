"""NNX user mistakes raise flaxen.errors classes (which keep the builtin base they had)."""

import jax.numpy as jnp
import optax
import pytest

from flaxen import errors
from flaxen.experimental import nnx


def test_optimizer_wrt_matching_nothing_is_a_filter_error():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with pytest.raises(errors.NNXFilterError, match="matches no Variable") as info:
        nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.BatchStat)
    assert isinstance(info.value, ValueError)


def test_variable_assigned_a_variable_is_an_invalid_value():
    p = nnx.Param(jnp.zeros(2))
    with pytest.raises(errors.InvalidNNXValueError, match="assign its .value instead"):
        p.value = nnx.Param(jnp.ones(2))


def test_metric_inputs_are_checked_with_flaxen_errors():
    acc = nnx.metrics.Accuracy()
    with pytest.raises(errors.InvalidNNXValueError, match="integer labels"):
        acc.update(logits=jnp.zeros((3, 4)), labels=jnp.zeros((3,), jnp.float32))
    avg = nnx.metrics.Average("loss")
    with pytest.raises(errors.NNXArgumentError, match="'loss'") as info:
        avg.update(values=jnp.ones(()))
    assert isinstance(info.value, TypeError)
