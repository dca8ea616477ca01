"""Parameter initializers (shared by Linen and NNX).

``init(key, shape, dtype) -> Array`` functions and their builders.

Every builder here is JAX's own (``jax.nn.initializers``), exactly as Flax re-exports them,
so the same key gives bit-identical arrays. Flax adds two zero-argument builders,
``zeros_init()`` and ``ones_init()``, which return the ``zeros``/``ones`` initializers;
they exist so that every ``*_init`` field of a layer can be written as a call.

>>> import jax, jax.numpy as jnp
>>> from flaxen.layer_math import initializers
>>> init = initializers.lecun_normal()
>>> init(jax.random.key(0), (3, 2), jnp.float32).shape
(3, 2)
>>> initializers.zeros_init()(jax.random.key(0), (2,), jnp.float32).tolist()
[0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jax.nn.initializers import (
    Initializer,
    constant,
    delta_orthogonal,
    glorot_normal,
    glorot_uniform,
    he_normal,
    he_uniform,
    kaiming_normal,
    kaiming_uniform,
    lecun_normal,
    lecun_uniform,
    normal,
    ones,
    orthogonal,
    truncated_normal,
    uniform,
    variance_scaling,
    xavier_normal,
    xavier_uniform,
    zeros,
)

__all__ = [
    "Initializer",
    "constant",
    "delta_orthogonal",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "lecun_normal",
    "lecun_uniform",
    "normal",
    "ones",
    "ones_init",
    "orthogonal",
    "truncated_normal",
    "uniform",
    "variance_scaling",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
    "zeros_init",
]


def zeros_init() -> Initializer | Callable[..., Any]:
    """Builds an initializer that returns an array of zeros (the key is ignored).

    >>> import jax, jax.numpy as jnp
    >>> zeros_init()(jax.random.key(42), (2, 3), jnp.float32).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    return zeros


def ones_init() -> Initializer | Callable[..., Any]:
    """Builds an initializer that returns an array of ones (the key is ignored).

    >>> import jax, jax.numpy as jnp
    >>> ones_init()(jax.random.key(42), (2,), jnp.float32).tolist()
    [1.0, 1.0]
    """
    return ones
