"""Activation functions for Linen models, plus the learnable ``PReLU`` Module.

The element-wise functions live in :mod:`flaxen.layer_math.activations` (shared with NNX)
and are JAX's own (``jax.nn`` and ``jnp.tanh``): ``flaxen.linen.relu is jax.nn.relu``, as
in Flax. ``PReLU`` needs the Module system, so it is loaded on first access.

>>> import jax.numpy as jnp
>>> from flaxen.linen import activation
>>> activation.relu(jnp.array([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from flaxen.layer_math.activations import (
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
    normalize,
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
    tanh,
)

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
    # PReLU subclasses Module; loading it lazily keeps the module free of Linen's machinery.
    if name == "PReLU":
        from flaxen.linen._prelu import PReLU

        globals()["PReLU"] = PReLU
        return PReLU
    raise AttributeError(f"module 'flaxen.linen.activation' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"PReLU"})

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import Array, Dtype  # noqa: E402, F401
