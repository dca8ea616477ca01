"""Element-wise activation functions, shared by Linen and NNX.

They are JAX's own functions (``jax.nn`` and ``jnp.tanh``), the same objects Flax
re-exports, so ``flaxen.linen.relu is jax.nn.relu`` holds and jitted code is identical.
``flaxen.linen.activation`` adds the learnable ``PReLU`` Module on top of them.

>>> import jax.numpy as jnp
>>> from flaxen.layer_math import activations
>>> activations.relu(jnp.array([-1.0, 2.0])).tolist()
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
