"""Pooling over spatial windows (``flax.linen.pooling``): ``pool``, ``max_pool``,
``avg_pool``, ``min_pool``. They live in :mod:`flaxen.layer_math.pooling` (shared with NNX).

>>> import jax.numpy as jnp
>>> from flaxen.linen.pooling import max_pool
>>> max_pool(jnp.arange(16.0).reshape(1, 4, 4, 1), (2, 2), strides=(2, 2))[0, :, :, 0].tolist()
[[5.0, 7.0], [13.0, 15.0]]
"""

from flaxen.layer_math.pooling import avg_pool, max_pool, min_pool, pool

__all__ = ["avg_pool", "max_pool", "min_pool", "pool"]
