"""Differential test: an Optimizer whose wrt filter selects nothing, flaxen.nnx next to
flax.nnx 0.12.8 (its state, and an update that changes only the step)."""

import jax
import jax.numpy as jnp
import optax
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _run(lib, tx):
    model = lib.Linear(2, 2, rngs=lib.Rngs(0))
    opt = lib.Optimizer(model, tx, wrt=lib.LoRAParam)
    grads = lib.grad(lambda m: jnp.sum(m(jnp.ones(2))))(model)
    before = model.kernel[...]
    opt.update(model, grads)
    return (str(jax.tree.structure(opt.opt_state)).replace("flax.", ""),
            bool((model.kernel[...] == before).all()), int(opt.step[...]))


@pytest.mark.parametrize("make_tx", [lambda: optax.sgd(0.1), lambda: optax.adam(1e-3)])
def test_optimizer_over_nothing_as_flax(make_tx):
    assert _run(nnx, make_tx()) == _run(fnnx, make_tx())
