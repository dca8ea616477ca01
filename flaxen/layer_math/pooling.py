"""Pooling over spatial windows (shared by Linen and NNX).

``pool`` and its ``max``/``avg``/``min`` specialisations.

Inputs are channels-last, ``(*batch_dims, *window_dims, features)``. Any number of leading
batch dimensions is accepted (they are flattened into one around ``lax.reduce_window``), and
an input with no batch dimension is pooled as a batch of one.

>>> import jax.numpy as jnp
>>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
>>> max_pool(x, (2, 2), strides=(2, 2))[0, :, :, 0].tolist()
[[5.0, 7.0], [13.0, 15.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen.layer_math.errors import (
    LayerPaddingCountError,
    LayerPaddingError,
    LayerPaddingTypeError,
    LayerRankError,
    LayerShapeError,
)

__all__ = ["avg_pool", "max_pool", "min_pool", "pool"]

_PADDING_STRINGS = ("SAME", "VALID")


def _as_int_tuple(value: Any, what: str, caller: str) -> tuple[int, ...]:
    if isinstance(value, int | np.integer):
        raise TypeError(
            f"{caller}: {what} must be a tuple of ints, one per window dimension, but got "
            f"the int {value!r}. For a 2-D window write {what}=({value}, {value})."
        )
    try:
        return tuple(int(v) for v in value)
    except TypeError:
        raise TypeError(
            f"{caller}: {what} must be a tuple of ints, one per window dimension, but got "
            f"{value!r}."
        ) from None


def _resolve_padding(
    padding: Any, n: int, caller: str
) -> str | tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        if padding.upper() not in _PADDING_STRINGS:
            raise LayerPaddingError(
                f"{caller}: unknown padding {padding!r}. Pooling accepts 'SAME', 'VALID' or "
                f"a sequence of {n} (low, high) pairs, one per window dimension."
            )
        return padding.upper()
    try:
        pairs = tuple(tuple(int(v) for v in pair) for pair in padding)
    except TypeError:
        raise LayerPaddingTypeError(
            f"{caller}: padding must be 'SAME', 'VALID' or a sequence of {n} (low, high) "
            f"pairs, but got {padding!r}."
        ) from None
    if len(pairs) != n or any(len(p) != 2 for p in pairs):
        raise LayerPaddingCountError(
            f"{caller}: padding {padding!r} must hold exactly {n} (low, high) pairs, one "
            f"per window dimension (window has {n} dimensions)."
        )
    return pairs  # type: ignore[return-value] # each pair has length 2: checked above


def pool(
    inputs: Any,
    init: Any,
    reduce_fn: Callable[[Any, Any], Any],
    window_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding: str | Sequence[tuple[int, int]],
) -> jax.Array:
    """Reduces each window of ``inputs`` with ``reduce_fn`` starting from ``init``.

    Args:
      inputs: array of shape ``(*batch_dims, *window_dims, features)``; zero or more batch
        dimensions.
      init: the reduction's starting value (e.g. ``0.`` for a sum, ``-inf`` for a max).
      reduce_fn: binary reduction ``(T, T) -> T`` such as ``lax.add`` or ``lax.max``.
      window_shape: window size per window dimension, e.g. ``(3, 3)``.
      strides: step per window dimension; ``None`` means ``(1, ..., 1)``.
      padding: ``'SAME'``, ``'VALID'`` or a sequence of ``(low, high)`` pairs.

    Only ``lax.add``, ``lax.max`` and ``lax.min`` with their identity as ``init`` give a
    differentiable pooling; other reductions are forward-only.

    >>> import jax.numpy as jnp
    >>> from jax import lax
    >>> pool(jnp.arange(4.0).reshape(1, 4, 1), 0.0, lax.add, (2,), (2,), 'VALID').ravel().tolist()
    [1.0, 5.0]
    """
    window_shape = _as_int_tuple(window_shape, "window_shape", "pool")
    n = len(window_shape)
    strides = (1,) * n if strides is None else _as_int_tuple(strides, "strides", "pool")
    if len(strides) != n:
        raise LayerShapeError(
            f"pool: strides {strides} has {len(strides)} entries but window_shape "
            f"{window_shape} has {len(window_shape)}; give one stride per window dimension."
        )
    shape = jnp.shape(inputs)
    num_batch_dims = len(shape) - n - 1
    if num_batch_dims < 0:
        raise LayerRankError(
            f"pool: inputs of shape {shape} have {len(shape)} dimensions, but a "
            f"{n}-D window needs at least {n + 1} (window dims + features), laid out "
            f"(*batch_dims, *window_dims, features). Check window_shape={window_shape} or "
            "the input layout (pooling is channels-last)."
        )
    padding = _resolve_padding(padding, n, "pool")
    if not isinstance(padding, str):
        padding = ((0, 0),) + padding + ((0, 0),)

    batch_shape = shape[:num_batch_dims]
    if num_batch_dims != 1:
        # reduce_window sees exactly one batch dim; restore the caller's layout afterwards.
        inputs = jnp.reshape(inputs, (int(np.prod(batch_shape)),) + shape[num_batch_dims:])
    y = lax.reduce_window(
        inputs, init, reduce_fn, (1,) + window_shape + (1,), (1,) + strides + (1,), padding
    )
    if num_batch_dims != 1:
        y = jnp.reshape(y, batch_shape + y.shape[1:])
    return y


def _lowest(dtype: Any) -> Any:
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        return -jnp.inf
    if dtype == jnp.bool_:
        return np.array(False)
    return np.array(jnp.iinfo(dtype).min, dtype)


def _highest(dtype: Any) -> Any:
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.inf
    if dtype == jnp.bool_:
        return np.array(True)
    return np.array(jnp.iinfo(dtype).max, dtype)


def max_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
) -> jax.Array:
    """Maximum over each window; see :func:`pool` for the arguments.

    >>> import jax.numpy as jnp
    >>> max_pool(jnp.array([[[1.0], [3.0], [2.0]]]), (2,)).ravel().tolist()
    [3.0, 3.0]
    """
    return pool(inputs, _lowest(jnp.result_type(inputs)), lax.max, window_shape, strides, padding)


def min_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
) -> jax.Array:
    """Minimum over each window; see :func:`pool` for the arguments.

    >>> import jax.numpy as jnp
    >>> min_pool(jnp.array([[[1.0], [3.0], [2.0]]]), (2,)).ravel().tolist()
    [1.0, 2.0]
    """
    return pool(inputs, _highest(jnp.result_type(inputs)), lax.min, window_shape, strides, padding)


def _valid_counts(
    spatial: tuple[int, ...],
    window_shape: tuple[int, ...],
    strides: tuple[int, ...],
    padding: str | tuple[tuple[int, int], ...],
) -> np.ndarray:
    """How many real (unpadded) elements each output window covers, shape ``(*out, 1)``."""
    if isinstance(padding, str):
        padding = tuple(lax.padtype_to_pads(spatial, window_shape, strides, padding))
    counts = np.ones((), np.int64)
    for size, w, s, (lo, hi) in zip(spatial, window_shape, strides, padding):
        out = (size + lo + hi - w) // s + 1
        starts = np.arange(out) * s - lo
        ends = starts + w
        per_dim = np.clip(ends, 0, size) - np.clip(starts, 0, size)
        counts = np.multiply.outer(counts, per_dim)
    return counts[..., None]


def avg_pool(
    inputs: Any,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """Mean over each window; see :func:`pool` for the arguments.

    ``count_include_pad=True`` divides every window sum by the full window size; ``False``
    divides by the number of real (unpadded) elements in that window.

    >>> import jax.numpy as jnp
    >>> x = jnp.array([[[2.0], [4.0]]])
    >>> avg_pool(x, (2,), padding='SAME').ravel().tolist()
    [3.0, 2.0]
    >>> avg_pool(x, (2,), padding='SAME', count_include_pad=False).ravel().tolist()
    [3.0, 4.0]
    """
    y = pool(inputs, 0.0, lax.add, window_shape, strides, padding)
    window_shape = tuple(int(w) for w in window_shape)
    if count_include_pad:
        return y / int(np.prod(window_shape))
    n = len(window_shape)
    strides = (1,) * n if strides is None else tuple(int(s) for s in strides)
    spatial = tuple(jnp.shape(inputs)[-n - 1 : -1])
    resolved = _resolve_padding(padding, n, "avg_pool")
    counts = _valid_counts(spatial, window_shape, strides, resolved)
    # Explicit leading ones for the batch axes, so strict rank promotion ('raise') accepts it.
    counts = counts.reshape((1,) * (jnp.ndim(y) - counts.ndim) + counts.shape)
    # A float array (not a weak Python scalar), as a pooled array of ones would be.
    return y / jnp.asarray(counts, dtype=jax.dtypes.canonicalize_dtype(np.float64))
