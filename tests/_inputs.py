"""Random test inputs drawn on the host with NumPy.

``jax.random.normal`` and friends compile an XLA program for every new shape and dtype, which
costs seconds per call on a busy CPU; tests that only need *some* random array (not JAX's
random stream itself) take their inputs from here instead.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def normal(seed, shape, dtype=jnp.float32):
    """Standard normal samples of ``shape`` as a JAX array of ``dtype``."""
    draws = np.random.default_rng(seed).standard_normal(shape)
    return jnp.asarray(draws.astype(np.dtype(dtype)))


def bernoulli(seed, p, shape):
    """Booleans of ``shape``, each True with probability ``p``."""
    return jnp.asarray(np.random.default_rng(seed).random(shape) < p)
