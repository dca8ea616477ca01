"""Small helpers for data-parallel (``pmap``) training loops: sharding, stacking, one-hot.

>>> import numpy as np
>>> batch = shard({'x': np.zeros((jax.local_device_count() * 2, 3))})
>>> batch['x'].shape == (jax.local_device_count(), 2, 3)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax  # noqa: F401 - importable from here in Flax

PyTree = Any


def shard(xs: PyTree) -> PyTree:
    """Reshapes every leaf from ``(B, ...)`` to ``(local_device_count, B // count, ...)``.

    Leaves keep their type (numpy stays numpy), so the result can be fed to ``jax.pmap``.

    >>> import numpy as np
    >>> shard(np.arange(jax.local_device_count() * 3)).shape[1]
    3
    """
    n = jax.local_device_count()

    def split(path, x):
        if x.ndim == 0 or x.shape[0] % n:
            raise ValueError(
                f"shard: leaf at {jax.tree_util.keystr(path) or '<root>'} has shape "
                f"{tuple(x.shape)}, whose leading (batch) dimension is not divisible by the "
                f"{n} local devices. Use a batch size that is a multiple of "
                "jax.local_device_count(), or drop the remainder batch."
            )
        return x.reshape((n, -1) + tuple(x.shape[1:]))

    return jax.tree_util.tree_map_with_path(split, xs)


def shard_prng_key(prng_key: jax.Array) -> jax.Array:
    """Splits ``prng_key`` into one key per local device (leading axis = device count).

    >>> keys = shard_prng_key(jax.random.PRNGKey(0))
    >>> keys.shape[0] == jax.local_device_count()
    True
    """
    return jax.random.split(prng_key, num=jax.local_device_count())


def stack_forest(forest: Sequence[PyTree]) -> PyTree:
    """Stacks a sequence of same-structure pytrees into one pytree of stacked leaves.

    >>> stack_forest([{'a': 1}, {'a': 2}])['a'].tolist()
    [1, 2]
    """
    forest = list(forest)
    if not forest:
        raise ValueError("stack_forest needs at least one pytree to stack, got an empty sequence.")
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *forest)


def _first_replica(x):
    # A pmap output is sharded over its leading axis; reading device 0's shard avoids
    # gathering every replica just to throw all but one away.
    shards = getattr(x, "addressable_shards", None)
    if shards:
        data = shards[0].data
        if data.ndim and data.shape[0] == 1 and data.shape[1:] == x.shape[1:]:
            return data[0]
    return x[0]


def get_metrics(device_metrics: Sequence[PyTree]) -> PyTree:
    """Un-replicates a time series of replicated metrics and stacks it over time.

    ``device_metrics`` is a sequence (one entry per step) of pytrees whose leaves are
    replicated over devices on their leading axis, as ``pmap`` returns them.

    >>> import numpy as np
    >>> n = jax.local_device_count()
    >>> get_metrics([{'loss': np.full((n,), 1.0)}, {'loss': np.full((n,), 2.0)}])['loss'].tolist()
    [1.0, 2.0]
    """
    per_step = [jax.tree.map(_first_replica, step) for step in device_metrics]
    return stack_forest(per_step)


def onehot(
    labels: jax.Array, num_classes: int, on_value: float = 1.0, off_value: float = 0.0
) -> jax.Array:
    """One-hot encodes integer ``labels`` along a new last axis of length ``num_classes``.

    The result is float32. Labels outside ``[0, num_classes)`` give an all-``off_value`` row.
    ``jax.nn.one_hot`` is the more standard alternative.

    >>> onehot(jnp.array([0, 2]), 3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    hits = jnp.asarray(labels)[..., None] == jnp.arange(num_classes)
    return jnp.where(hits, on_value, off_value).astype(jnp.float32)
