"""Functional pooling (no params): ``max_pool`` and ``avg_pool`` over window axes.

Inputs are (*batch, *window_axes, features); with no batch axis a single example is pooled.

>>> import jax.numpy as jnp
>>> max_pool(jnp.arange(4.0).reshape(1, 4, 1), (2,), (2,)).ravel().tolist()
[1.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax


def pool(inputs: Any, init: Any, reduce_fn: Callable[[Any, Any], Any],
         window_shape: Sequence[int], strides: Sequence[int] | None, padding: Any) -> Any:
    """Reduces each window of the spatial axes with ``reduce_fn`` (``lax.reduce_window``).

    ``strides`` defaults to 1 per window axis; ``padding`` is ``'SAME'``, ``'VALID'`` or one
    (low, high) pair per window axis. Batch and feature axes are never pooled.
    """
    window_shape = tuple(window_shape)
    strides = tuple(strides) if strides else (1,) * len(window_shape)
    if len(strides) != len(window_shape):
        raise ValueError(f"pool: strides {strides} must have one entry per window axis "
                         f"{window_shape}.")
    n_batch = inputs.ndim - len(window_shape) - 1
    single = n_batch == 0
    if single:
        inputs = inputs[None]
        n_batch = 1
    dims = (1,) * n_batch + window_shape + (1,)
    steps = (1,) * n_batch + strides + (1,)
    if not isinstance(padding, str):
        padding = tuple(tuple(p) for p in padding)
        if len(padding) != len(window_shape) or any(len(p) != 2 for p in padding):
            raise ValueError(f"pool: padding {padding} must be one (low, high) pair per window "
                             f"axis {window_shape}.")
        padding = ((0, 0),) * n_batch + padding + ((0, 0),)
    y = lax.reduce_window(inputs, init, reduce_fn, dims, steps, padding)
    return jnp.squeeze(y, axis=0) if single else y


def max_pool(inputs: Any, window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: Any = "VALID") -> Any:
    """The maximum of each window (padding counts as ``-inf``)."""
    return pool(inputs, -jnp.inf, lax.max, window_shape, strides, padding)


def avg_pool(inputs: Any, window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: Any = "VALID", count_include_pad: bool = True) -> Any:
    """The mean of each window. With ``count_include_pad`` the sum is divided by the window
    size; otherwise by the number of non-padding elements in the window."""
    y = pool(inputs, 0.0, lax.add, window_shape, strides, padding)
    if count_include_pad:
        return y / np.prod(window_shape)
    ones_shape = inputs.shape[:-1] + (1,)
    if len(ones_shape) - 2 == len(window_shape):
        ones_shape = (1,) + ones_shape[1:]
    return y / pool(jnp.ones(ones_shape), 0.0, lax.add, window_shape, strides, padding)
