"""Activation functions for Linen models, plus the learnable ``PReLU`` Module.

The element-wise functions are JAX's own (``jax.nn`` and ``jnp.tanh``): Flax re-exports
the very same objects, so ``flaxen.linen.relu is jax.nn.relu`` holds here too and jitted
code is identical. ``PReLU`` needs the Module system, so it is loaded on first access;
importing this file therefore stays cheap and free of Linen's Module machinery (the NNX
and attention code import it).

>>> import jax.numpy as jnp
>>> from flaxen.linen import activation
>>> activation.relu(jnp.array([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from jax.nn import (
    celu,
    elu,
    gelu,
    glu,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    logsumexp,
    one_hot,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    standardize,
    swish,
)
from jax.numpy import tanh

# Flax keeps the old name `normalize` as an alias of `standardize`.
normalize = standardize

__all__ = [
    "PReLU",  # noqa: F822 - provided lazily by __getattr__
    "celu",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "normalize",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "standardize",
    "swish",
    "tanh",
]


def __getattr__(name: str):
    # PReLU subclasses Module; loading it lazily keeps this file usable without Linen.
    if name == "PReLU":
        from flaxen.linen._prelu import PReLU

        globals()["PReLU"] = PReLU
        return PReLU
    raise AttributeError(f"module 'flaxen.linen.activation' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"PReLU"})
