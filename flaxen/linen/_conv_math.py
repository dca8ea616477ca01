"""Linen's path for the convolution shape and padding arithmetic; it lives in
:mod:`flaxen.layer_math.convolution` (shared with NNX) and is re-exported here unchanged.

>>> from flaxen.linen._conv_math import canonicalize_padding
>>> canonicalize_padding(1, 2)
[(1, 1), (1, 1)]
"""

from flaxen.layer_math.convolution import (
    LAX_PADDING_STRINGS,
    LAYER_PADDING_STRINGS,
    LaxPadding,
    PaddingLike,
    broadcast_ints,
    canonicalize_padding,
    causal_padding,
    channels_last_dimension_numbers,
    check_padding_string,
    circular_fold,
    circular_pad,
    dilated_sizes,
    explicit_padding,
    flatten_batch,
    kernel_size_tuple,
    reflect_pad,
    restore_batch,
    valid_output_spatial,
)

__all__ = [
    "LAX_PADDING_STRINGS",
    "LAYER_PADDING_STRINGS",
    "LaxPadding",
    "PaddingLike",
    "broadcast_ints",
    "canonicalize_padding",
    "causal_padding",
    "channels_last_dimension_numbers",
    "check_padding_string",
    "circular_fold",
    "circular_pad",
    "reflect_pad",
    "dilated_sizes",
    "explicit_padding",
    "flatten_batch",
    "kernel_size_tuple",
    "restore_batch",
    "valid_output_spatial",
]
