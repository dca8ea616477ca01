"""Recurrent: ``nn.RNN(nn.LSTMCell)`` forward+backward, flaxen vs flax vs pure JAX.

An LSTM with 64 hidden units over 512 steps (``--quick``: 128) of a batch of 16 inputs
with 32 features; jitted ``value_and_grad`` of a scalar loss with respect to the
parameters. The pure-JAX version is the same cell written as a ``jax.lax.scan`` over
eight matmuls per step, reading the parameters from the same tree.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from benchmarks._harness import Result, compare, have_flax

_BATCH, _IN, _HIDDEN = 16, 32, 64


def _pure_jax_loss(params: dict, x: jax.Array) -> jax.Array:
    p = params["params"]["cell"]

    def step(carry, xt):
        c, h = carry

        def gate(name):
            return (xt @ p["i" + name]["kernel"] + h @ p["h" + name]["kernel"]
                    + p["h" + name]["bias"])

        i, f = jax.nn.sigmoid(gate("i")), jax.nn.sigmoid(gate("f"))
        g, o = jnp.tanh(gate("g")), jax.nn.sigmoid(gate("o"))
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (c, h), h

    zeros = jnp.zeros((x.shape[0], _HIDDEN), x.dtype)
    _, ys = jax.lax.scan(step, (zeros, zeros), jnp.swapaxes(x, 0, 1))
    return jnp.mean(ys**2)


def _module_loss(nn: Any):
    layer = nn.RNN(nn.LSTMCell(features=_HIDDEN))

    def loss(params: dict, x: jax.Array) -> jax.Array:
        return jnp.mean(layer.apply(params, x) ** 2)

    return layer, loss


def run(quick: bool) -> list[Result]:
    import flaxen.linen as fnn

    steps = 128 if quick else 512
    x = jax.random.normal(jax.random.PRNGKey(1), (_BATCH, steps, _IN))
    layer, flaxen_loss = _module_loss(fnn)
    params = layer.init(jax.random.PRNGKey(0), x[:, :2])

    losses = {"flaxen": flaxen_loss, "jax": _pure_jax_loss}
    if have_flax():
        import flax.linen as nn

        losses["flax"] = _module_loss(nn)[1]
    impls = {}
    for name, loss in losses.items():
        step = jax.jit(jax.value_and_grad(loss))
        impls[name] = (lambda s: lambda: s(params, x))(step)
    return [compare("rnn", f"RNN(LSTMCell) fwd+bwd T={steps}", impls,
                    rounds=3 if quick else 7)]
