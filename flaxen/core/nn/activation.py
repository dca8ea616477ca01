"""Activation functions for the functional layers (the same callables as ``jax.nn``)."""

from jax.nn import (
    celu,
    elu,
    gelu,
    glu,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    relu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    swish,
)
from jax.numpy import tanh

__all__ = [
    "celu", "elu", "gelu", "glu", "leaky_relu", "log_sigmoid", "log_softmax", "relu",
    "sigmoid", "silu", "soft_sign", "softmax", "softplus", "swish", "tanh",
]
