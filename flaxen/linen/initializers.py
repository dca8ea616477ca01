"""Parameter initializers (``flax.linen.initializers``): ``init(key, shape, dtype) -> Array``.

The functions live in :mod:`flaxen.layer_math.initializers`, shared with NNX; this module
re-exports the same objects under Flax's path. Every builder is JAX's own
(``jax.nn.initializers``), so the same key gives bit-identical arrays; ``zeros_init()`` and
``ones_init()`` are Flax's zero-argument builders of ``zeros``/``ones``.

>>> import jax, jax.numpy as jnp
>>> from flaxen.linen import initializers
>>> initializers.lecun_normal()(jax.random.key(0), (3, 2), jnp.float32).shape
(3, 2)
>>> initializers.zeros_init()(jax.random.key(0), (2,), jnp.float32).tolist()
[0.0, 0.0]
"""

from collections.abc import Callable
from typing import Any, Union

import jax

from flaxen.layer_math.initializers import (
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
    ones_init,
    orthogonal,
    truncated_normal,
    uniform,
    variance_scaling,
    xavier_normal,
    xavier_uniform,
    zeros,
    zeros_init,
)

# Flax's annotation for "an initializer": JAX's protocol or any callable with its signature
Initializer = Union[jax.nn.initializers.Initializer, Callable[..., Any]]  # noqa: UP007

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
