"""Linear regression with one Dense layer: the "Flax Basics" walkthrough as a script.

Steps, as in the guide: build ``nn.Dense(features=5)``, initialise it, fit noisy synthetic data
by plain gradient descent and then with Optax's Adam, and round-trip the parameters through
``serialization.to_bytes`` / ``from_bytes``.

The guide's printed numbers were drawn with JAX's older PRNG layout, so this script switches
``jax_threefry_partitionable`` off to print the very same values (pass ``--new-rng`` to keep
JAX's current default).

    python examples/linear_regression.py
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import optax
from jax import random

import flaxen.linen as nn
from flaxen import serialization
from flaxen.core import freeze

N_SAMPLES, X_DIM, Y_DIM = 20, 10, 5


def make_data():
    """Noisy samples of ``y = x W + b`` with random ground-truth ``W`` and ``b``."""
    k1, k2 = random.split(random.PRNGKey(0))
    W = random.normal(k1, (X_DIM, Y_DIM))
    b = random.normal(k2, (Y_DIM,))
    true_params = freeze({"params": {"bias": b, "kernel": W}})
    key_sample, key_noise = random.split(k1)
    x = random.normal(key_sample, (N_SAMPLES, X_DIM))
    y = jnp.dot(x, W) + b + 0.1 * random.normal(key_noise, (N_SAMPLES, Y_DIM))
    return true_params, x, y


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-rng", action="store_true",
                        help="keep JAX's current PRNG layout (numbers then differ from the guide)")
    parser.add_argument("--steps", type=int, default=101, help="steps per optimizer (default 101)")
    args = parser.parse_args(argv)
    if not args.new_rng:
        jax.config.update("jax_threefry_partitionable", False)

    model = nn.Dense(features=5)
    key1, key2 = random.split(random.PRNGKey(0))
    x = random.normal(key1, (10,))
    params = model.init(key2, x)
    print("parameter shapes:", jax.tree_util.tree_map(jnp.shape, params))
    print("forward pass:", model.apply(params, x))

    true_params, x_samples, y_samples = make_data()
    print("x shape:", x_samples.shape, "; y shape:", y_samples.shape)

    @jax.jit
    def mse(params, x_batched, y_batched):
        def squared_error(x, y):
            pred = model.apply(params, x)
            return jnp.inner(y - pred, y - pred) / 2.0

        return jnp.mean(jax.vmap(squared_error)(x_batched, y_batched), axis=0)

    learning_rate = 0.3
    true_loss = float(mse(true_params, x_samples, y_samples))
    print('Loss for "true" W,b: ', true_loss)
    loss_grad_fn = jax.value_and_grad(mse)

    @jax.jit
    def update_params(params, grads):
        return jax.tree_util.tree_map(lambda p, g: p - learning_rate * g, params, grads)

    sgd_losses = []
    for i in range(args.steps):
        loss_val, grads = loss_grad_fn(params, x_samples, y_samples)
        params = update_params(params, grads)
        if i % 10 == 0:
            sgd_losses.append(float(loss_val))
            print(f"Loss step {i}: ", loss_val)

    tx = optax.adam(learning_rate=learning_rate)
    opt_state = tx.init(params)
    adam_losses = []
    for i in range(args.steps):
        loss_val, grads = loss_grad_fn(params, x_samples, y_samples)
        updates, opt_state = tx.update(grads, opt_state)
        params = optax.apply_updates(params, updates)
        if i % 10 == 0:
            adam_losses.append(float(loss_val))
            print(f"Loss step {i}: ", loss_val)

    bytes_output = serialization.to_bytes(params)
    restored = serialization.from_bytes(params, bytes_output)
    same = all(bool(jnp.array_equal(a, b)) for a, b in
               zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(restored)))
    print(f"serialized {len(bytes_output)} bytes; restored parameters identical: {same}")
    return {"true_loss": true_loss, "sgd_losses": sgd_losses, "adam_losses": adam_losses,
            "roundtrip_ok": same, "bytes": bytes_output}


if __name__ == "__main__":
    main(sys.argv[1:])
