"""The names Flax 0.12.8's ``flax.experimental.nnx`` has beyond Flax 0.8.3's face.

In Flax 0.12.8 the path re-exports today's ``flax.nnx``; flaxen keeps the 0.8.3 face for every
name 0.8.3 had and serves the rest as today's objects from ``flaxen.nnx``.
"""

import types

import jax
import jax.numpy as jnp
import optax
import pytest

import flaxen.nnx as today
from flaxen.experimental import nnx


def test_every_added_name_is_todays_object():
    for name in sorted(nnx._TODAY_NAMES):
        assert getattr(nnx, name) is getattr(today, name), name


def test_added_submodules_are_modules_at_their_paths():
    for name in ("compat", "graphlib", "optimizer", "traversals", "wrappers"):
        value = getattr(nnx, name)
        assert isinstance(value, types.ModuleType), name
        assert value is getattr(today, name)


def test_added_names_show_in_dir():
    listed = dir(nnx)
    for name in ("StateAxes", "cond", "wrappers", "Module", "TrainState"):
        assert name in listed


def test_variables_is_the_function():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert callable(nnx.variables) and not isinstance(nnx.variables, types.ModuleType)
    params = nnx.variables(model, nnx.Param)
    assert set(params.keys()) == {"kernel", "bias"}


def test_083_names_keep_their_083_objects():
    # the 0.8.3 face differs from today's for these: the added names must not replace them
    for name in ("Module", "Optimizer", "split", "merge", "state", "Rngs", "RngStream",
                 "GraphDef", "vmap", "scan", "grad", "jit", "Dropout", "BatchNorm", "Dict"):
        assert getattr(nnx, name) is not getattr(today, name), name
    assert nnx.Module.__module__ == "flaxen.experimental.nnx._legacy_module"
    assert nnx.Optimizer.__module__ == "flaxen.experimental.nnx._optimizer"
    # and names both faces share stay shared
    for name in ("Linear", "Param", "Variable", "State", "Metric"):
        assert getattr(nnx, name) is getattr(today, name), name


def test_083_optimizer_still_takes_model_and_tx_only():
    model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1))
    assert optimizer.model is model


def test_unknown_name_is_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        nnx.not_a_name  # noqa: B018


def test_program_using_added_names_runs():
    class Block(nnx.Pytree):
        def __init__(self, rngs):
            self.lin = today.Linear(3, 3, rngs=rngs)

        def __call__(self, x):
            return nnx.cond(x.sum() > 0, lambda m, x: m.lin(x), lambda m, x: -x, self, x)

    block = Block(nnx.Rngs(0))
    x = jnp.ones((2, 3))
    y = block(x)
    assert y.shape == (2, 3)
    flat = nnx.to_flat_state(nnx.state(block))
    assert len(flat) == 2
    pure = nnx.to_pure_dict(today.state(block))
    assert set(pure["lin"]) == {"kernel", "bias"}
    total = nnx.fori_loop(0, 3, lambda i, c: c + 1.0, jnp.zeros(()))
    assert float(total) == 3.0
    assert isinstance(nnx.StateAxes({...: 0}), nnx.StateAxes)
    cell = nnx.LSTMCell(3, 4, rngs=nnx.Rngs(1))
    carry = cell.initialize_carry((2, 3), nnx.Rngs(2))
    new_carry, out = cell(carry, x)
    assert out.shape == (2, 4)
    assert jax.tree.structure(new_carry) == jax.tree.structure(carry)
