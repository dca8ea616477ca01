"""Shape and padding arithmetic for the convolution layers (no Modules, no parameters).

Shared by Linen's and NNX's convolutions, so both follow the same rules: padding
resolution ('SAME', 'VALID', 'CIRCULAR', 'CAUSAL', ints, pairs), channels-last dimension
numbers for any rank, batch-dimension flattening and the wrap-around fold that turns a
transposed convolution into a circular one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen.layer_math.errors import LayerPaddingError, LayerRankError, LayerShapeError

PaddingLike = str | int | Sequence[int | tuple[int, int]]
LaxPadding = str | Sequence[tuple[int, int]]

# Strings lax itself understands, plus the two the layers implement on top of it.
LAX_PADDING_STRINGS = ("SAME", "SAME_LOWER", "VALID")
LAYER_PADDING_STRINGS = LAX_PADDING_STRINGS + ("CIRCULAR", "CAUSAL")


def canonicalize_padding(padding: PaddingLike, rank: int) -> LaxPadding:
    """Turns a padding argument into a string or a list of ``rank`` ``(low, high)`` pairs.

    Strings are returned unchanged (they are checked where they are used). An int pads
    every dimension by that amount on both sides; a sequence of ``rank`` entries gives one
    entry per dimension, an int meaning the same amount on both sides.

    >>> canonicalize_padding(1, 2)
    [(1, 1), (1, 1)]
    >>> canonicalize_padding([2, (0, 1)], 2)
    [(2, 2), (0, 1)]
    """
    if isinstance(padding, str):
        return padding
    if isinstance(padding, int | np.integer):
        return [(int(padding), int(padding))] * rank
    if isinstance(padding, Sequence) and len(padding) == rank:
        pairs = []
        for entry in padding:
            if isinstance(entry, int | np.integer):
                pairs.append((int(entry), int(entry)))
            elif isinstance(entry, Sequence) and len(entry) == 2:
                pairs.append((int(entry[0]), int(entry[1])))
            else:
                break
        else:
            return pairs
    raise ValueError(
        f"Invalid padding format: {padding}, should be str, int, or a sequence of len "
        f"{rank} where each element is an int or pair of ints. For a {rank}-D kernel pass "
        f"'SAME', 'VALID', 'CIRCULAR', an int, or {rank} (low, high) pairs."
    )


def check_padding_string(padding: str, layer: str, allowed: Sequence[str]) -> str:
    """Upper-cases a padding string and checks the layer supports it."""
    upper = padding.upper()
    if upper not in allowed:
        raise LayerPaddingError(
            f"{layer}: unknown padding {padding!r}. Use one of "
            f"{', '.join(repr(a) for a in allowed)}, an int, or one (low, high) pair per "
            "spatial dimension."
        )
    return upper


def broadcast_ints(value: Any, rank: int, name: str, layer: str) -> tuple[int, ...]:
    """``None`` -> ones, an int -> repeated ``rank`` times, a sequence -> checked tuple."""
    if value is None:
        return (1,) * rank
    if isinstance(value, int | np.integer):
        return (int(value),) * rank
    out = tuple(int(v) for v in value)
    if len(out) != rank:
        raise LayerShapeError(
            f"{layer}: {name}={value!r} has {len(out)} entries but the kernel has {rank} "
            f"spatial dimensions; give one per dimension, or a single int for all of them."
        )
    return out


def kernel_size_tuple(kernel_size: Any, input_ndim: int, layer: str) -> tuple[int, ...]:
    """Normalises ``kernel_size``; an int is only meaningful for a 1-D convolution."""
    if isinstance(kernel_size, int | np.integer):
        if input_ndim > 3:
            # An int means a 1-D kernel: on a higher-rank input that is almost always a
            # forgotten tuple, so say so rather than silently convolving one axis.
            raise TypeError(
                f"{layer}: kernel_size={kernel_size} is an int, which means a 1-D "
                f"convolution, but the inputs have {input_ndim} dimensions. Pass a tuple "
                f"with one size per spatial dimension, e.g. kernel_size="
                f"{(int(kernel_size),) * max(1, input_ndim - 2)}."
            )
        return (int(kernel_size),)
    try:
        return tuple(int(k) for k in kernel_size)
    except TypeError:
        raise TypeError(
            f"{layer}: kernel_size must be a tuple of ints (one per spatial dimension), "
            f"got {kernel_size!r}."
        ) from None


def flatten_batch(inputs: jnp.ndarray, num_spatial: int, layer: str):
    """Reshapes ``(*batch, *spatial, features)`` to exactly one batch dimension.

    Returns the reshaped inputs and the original batch shape (``None`` if it was already
    exactly one dimension) for :func:`restore_batch`.
    """
    num_batch = inputs.ndim - (num_spatial + 1)
    if num_batch < 0:
        raise LayerRankError(
            f"{layer}: inputs of shape {inputs.shape} have {inputs.ndim} dimensions, but a "
            f"kernel with {num_spatial} spatial dimensions needs at least {num_spatial + 1}: "
            f"(*batch_dims, {', '.join(['spatial'] * num_spatial)}, features). Inputs are "
            "channels-last; check kernel_size or the input layout."
        )
    if num_batch == 1:
        return inputs, None
    batch_shape = inputs.shape[:num_batch]
    flat = jnp.reshape(inputs, (-1,) + inputs.shape[num_batch:])
    return flat, batch_shape


def restore_batch(y: jnp.ndarray, batch_shape: tuple[int, ...] | None) -> jnp.ndarray:
    if batch_shape is None:
        return y
    return jnp.reshape(y, batch_shape + y.shape[1:])


def channels_last_dimension_numbers(ndim: int) -> lax.ConvDimensionNumbers:
    """``NH..WC`` inputs and outputs, ``H..WIO`` kernels, for any number of spatial dims."""
    spatial = tuple(range(1, ndim - 1))
    lhs = (0, ndim - 1) + spatial
    rhs = (ndim - 1, ndim - 2) + tuple(range(ndim - 2))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def dilated_sizes(kernel_size: Sequence[int], dilation: Sequence[int]) -> tuple[int, ...]:
    return tuple((k - 1) * d + 1 for k, d in zip(kernel_size, dilation))


def circular_pad(
    inputs: jnp.ndarray, kernel_size: Sequence[int], dilation: Sequence[int]
) -> jnp.ndarray:
    """Wrap-pads the spatial dims so a VALID convolution is periodic ('CIRCULAR').

    The split between the two sides is the one 'SAME' uses for stride 1, so a circular
    convolution lines up with a 'SAME' one away from the borders.
    """
    return _same_split_pad(inputs, kernel_size, dilation, "wrap")


def reflect_pad(
    inputs: jnp.ndarray, kernel_size: Sequence[int], dilation: Sequence[int]
) -> jnp.ndarray:
    """Mirror-pads the spatial dims (edge not repeated) for a VALID convolution ('REFLECT'),
    split between the sides as :func:`circular_pad` does.

    >>> reflect_pad(jnp.arange(4.0).reshape(1, 4, 1), (3,), (1,))[0, :, 0].tolist()
    [1.0, 0.0, 1.0, 2.0, 3.0, 2.0]
    """
    return _same_split_pad(inputs, kernel_size, dilation, "reflect")


def _same_split_pad(inputs: jnp.ndarray, kernel_size: Sequence[int], dilation: Sequence[int],
                    mode: str) -> jnp.ndarray:
    pads = [(0, 0)]
    for k in dilated_sizes(kernel_size, dilation):
        pads.append(((k - 1) // 2, k // 2))
    pads.append((0, 0))
    return jnp.pad(inputs, pads, mode=mode)


def causal_padding(
    kernel_size: Sequence[int], dilation: Sequence[int], layer: str
) -> list[tuple[int, int]]:
    """Left-only padding for a 1-D causal convolution (output keeps the input length)."""
    if len(kernel_size) != 1:
        raise ValueError(
            f"Causal padding is only implemented for 1D convolutions. {layer} got "
            f"kernel_size={tuple(kernel_size)}; use padding='SAME' or explicit "
            "(low, high) pairs for higher-rank kernels."
        )
    return [(dilation[0] * (kernel_size[0] - 1), 0)]


def circular_fold(
    y: jnp.ndarray,
    input_spatial: Sequence[int],
    strides: Sequence[int],
    transpose_kernel: bool = False,
) -> jnp.ndarray:
    """Wraps a VALID transposed-convolution output onto the periodic output grid.

    Each spatial output has period ``input_size * stride``; output position ``i`` lands on
    ``(i + lead) % period``, where ``lead`` centres the overhang as the layers' 'CIRCULAR'
    padding does: the overhang ``e`` beyond the period is completed to a whole number of
    periods, its odd unit going before the data, or after it for a ``transpose_kernel``
    layer (which then computes the transpose of the matching ``Conv``).
    """
    for axis, period in enumerate((n * s for n, s in zip(input_spatial, strides)), start=1):
        size = y.shape[axis]
        fill = (period - size) % (2 * period)
        lead = fill // 2 if transpose_kernel else (fill + 1) // 2
        chunks = -(-size // period)
        if chunks * period != size:
            pad = [(0, 0)] * y.ndim
            pad[axis] = (0, chunks * period - size)
            y = jnp.pad(y, pad)
        y = y.reshape(y.shape[:axis] + (chunks, period) + y.shape[axis + 1 :]).sum(axis=axis)
        if lead % period:
            y = jnp.roll(y, lead, axis=axis)
    return y


def explicit_padding(
    padding: str,
    input_spatial: Sequence[int],
    kernel_size: Sequence[int],
    strides: Sequence[int],
    input_dilation: Sequence[int],
    kernel_dilation: Sequence[int],
) -> list[tuple[int, int]]:
    """'SAME'/'VALID' as explicit pairs, computed on the dilated input.

    lax only accepts padding strings when the input is not dilated; with input dilation
    the pairs are computed here, as if the dilated input were the real one.
    """
    dilated_in = tuple((n - 1) * d + 1 if n else 0 for n, d in zip(input_spatial, input_dilation))
    dilated_k = dilated_sizes(kernel_size, kernel_dilation)
    pads = lax.padtype_to_pads(dilated_in, dilated_k, strides, padding)
    return [(int(lo), int(hi)) for lo, hi in pads]


def valid_output_spatial(
    input_spatial: Sequence[int],
    kernel_size: Sequence[int],
    strides: Sequence[int],
    padding: LaxPadding,
    input_dilation: Sequence[int],
    kernel_dilation: Sequence[int],
) -> tuple[int, ...]:
    """Spatial output shape of ``lax.conv_general_dilated`` with these settings."""
    dilated_in = tuple((n - 1) * d + 1 if n else 0 for n, d in zip(input_spatial, input_dilation))
    dilated_k = dilated_sizes(kernel_size, kernel_dilation)
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(dilated_in, dilated_k, strides, padding)
    return tuple(
        max(0, (n + lo + hi - k) // s + 1)
        for n, k, s, (lo, hi) in zip(dilated_in, dilated_k, strides, padding)
    )
