"""The convolution layers ``Conv``, ``ConvTranspose`` and ``ConvLocal`` (re-exported by
:mod:`flaxen.linen.linear`, where Flax defines them).

Inputs are channels-last, ``(*batch_dims, *spatial_dims, features)``: several batch
dimensions are flattened into one around the convolution, and an input without a batch
dimension is convolved as a batch of one. Padding and shape rules live in
:mod:`flaxen.linen._conv_math`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen.linen import _conv_math as cm
from flaxen.linen import initializers
from flaxen.linen._layer_errors import LayerShapeError
from flaxen.linen.dtypes import promote_dtype
from flaxen.linen.module import Module, compact

Array = jax.Array
Dtype = Any
PrecisionLike = Any
Initializer = initializers.Initializer

default_kernel_init = initializers.lecun_normal()


def _check_mask(mask: Any, kernel_shape: tuple[int, ...], layer: str) -> None:
    if mask is not None and tuple(np.shape(mask)) != tuple(kernel_shape):
        raise ValueError(
            "Mask needs to have the same shape as weights. Shapes are: "
            f"{tuple(np.shape(mask))}, {tuple(kernel_shape)}. {layer}'s mask multiplies "
            f"the kernel element-wise, so it must have the kernel's shape {tuple(kernel_shape)}."
        )


def _check_features(in_features: int, groups: int, layer: str, shape: tuple) -> None:
    if in_features % groups:
        raise LayerShapeError(
            f"{layer}: feature_group_count={groups} must divide the number of input "
            f"features, but inputs of shape {shape} have {in_features}. Pick a divisor of "
            f"{in_features} or change the input channels."
        )


class _Conv(Module):
    """Shared fields and body of ``Conv`` (shared weights) and ``ConvLocal`` (unshared)."""

    features: int
    kernel_size: int | Sequence[int]
    strides: None | int | Sequence[int] = 1
    padding: cm.PaddingLike = "SAME"
    input_dilation: None | int | Sequence[int] = 1
    kernel_dilation: None | int | Sequence[int] = 1
    feature_group_count: int = 1
    use_bias: bool = True
    mask: Array | None = None
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    promote_dtype: Callable[..., list] = promote_dtype
    conv_general_dilated: Callable[..., Array] | None = None
    conv_general_dilated_cls: Any = None

    @property
    def shared_weights(self) -> bool:
        raise NotImplementedError

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Convolves ``inputs`` of shape ``(*batch_dims, *spatial_dims, features)``."""
        layer = type(self).__name__
        kernel_size = cm.kernel_size_tuple(self.kernel_size, jnp.ndim(inputs), layer)
        n = len(kernel_size)
        inputs = jnp.asarray(inputs) if not hasattr(inputs, "ndim") else inputs
        inputs, batch_shape = cm.flatten_batch(inputs, n, layer)
        strides = cm.broadcast_ints(self.strides, n, "strides", layer)
        input_dilation = cm.broadcast_ints(self.input_dilation, n, "input_dilation", layer)
        kernel_dilation = cm.broadcast_ints(self.kernel_dilation, n, "kernel_dilation", layer)

        padding = cm.canonicalize_padding(self.padding, n)
        if isinstance(padding, str):
            padding = cm.check_padding_string(
                padding, layer, cm.LAYER_PADDING_STRINGS + ("REFLECT",))
            if padding == "CIRCULAR":
                inputs = cm.circular_pad(inputs, kernel_size, kernel_dilation)
                padding = "VALID"
            elif padding == "REFLECT":
                inputs = cm.reflect_pad(inputs, kernel_size, kernel_dilation)
                padding = "VALID"
            elif padding == "CAUSAL":
                padding = cm.causal_padding(kernel_size, kernel_dilation, layer)
            elif any(d != 1 for d in input_dilation):
                padding = cm.explicit_padding(
                    padding, inputs.shape[1:-1], kernel_size, strides, input_dilation,
                    kernel_dilation,
                )

        dimension_numbers = cm.channels_last_dimension_numbers(inputs.ndim)
        in_features = inputs.shape[-1]
        groups = self.feature_group_count
        _check_features(in_features, groups, layer, inputs.shape)

        if self.shared_weights:
            kernel_shape = kernel_size + (in_features // groups, self.features)
            bias_shape: tuple[int, ...] = (self.features,)
        else:
            out_spatial = cm.valid_output_spatial(
                inputs.shape[1:-1], kernel_size, strides, padding, input_dilation,
                kernel_dilation,
            )
            kernel_shape = out_spatial + (int(np.prod(kernel_size)) * in_features, self.features)
            bias_shape = out_spatial + (self.features,)
        _check_mask(self.mask, kernel_shape, layer)

        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        if self.mask is not None:
            kernel *= self.mask
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, bias_shape, self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)

        if self.shared_weights:
            if self.conv_general_dilated_cls is not None:
                conv = self.conv_general_dilated_cls()
            elif self.conv_general_dilated is not None:
                conv = self.conv_general_dilated
            else:
                conv = lax.conv_general_dilated
            y = conv(
                inputs,
                kernel,
                strides,
                padding,
                lhs_dilation=input_dilation,
                rhs_dilation=kernel_dilation,
                dimension_numbers=dimension_numbers,
                feature_group_count=groups,
                precision=self.precision,
            )
        else:
            y = lax.conv_general_dilated_local(
                lhs=inputs,
                rhs=kernel,
                window_strides=strides,
                padding=padding,
                filter_shape=kernel_size,
                lhs_dilation=input_dilation,
                rhs_dilation=kernel_dilation,
                dimension_numbers=dimension_numbers,
                precision=self.precision,
            )
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - bias.ndim) + bias.shape)
        return cm.restore_batch(y, batch_shape)


class Conv(_Conv):
    """A convolution with weights shared across positions (``lax.conv_general_dilated``).

    Attributes:
      features: number of output channels.
      kernel_size: one size per spatial dimension, e.g. ``(3, 3)``; an int means 1-D.
      strides: int or one per spatial dimension (default 1).
      padding: ``'SAME'``, ``'VALID'``, ``'CIRCULAR'`` (periodic), ``'REFLECT'`` (mirrored
        at the edges), ``'CAUSAL'`` (1-D, left only), an int (same on all sides), or one
        ``(low, high)`` pair (or int) per spatial dimension.
      input_dilation: dilation of the inputs (a transposed convolution with that stride).
      kernel_dilation: dilation of the kernel (atrous convolution).
      feature_group_count: splits input channels into groups (depthwise when equal to
        the input channels); must divide the input channels.
      use_bias: whether to add a ``(features,)`` bias.
      mask: optional array of the kernel's shape multiplied into the kernel.
      dtype, param_dtype, precision, kernel_init, bias_init, promote_dtype: as in Dense.
      conv_general_dilated, conv_general_dilated_cls: replace the convolution function.

    The kernel has shape ``kernel_size + (in_features // feature_group_count, features)``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> y, v = nn.Conv(4, (3, 3)).init_with_output(jax.random.key(0), jnp.ones((1, 8, 8, 2)))
    >>> y.shape, v['params']['kernel'].shape
    ((1, 8, 8, 4), (3, 3, 2, 4))
    """

    @property
    def shared_weights(self) -> bool:
        return True


class ConvLocal(_Conv):
    """A locally connected layer: a convolution whose weights differ at every position.

    Same attributes as :class:`Conv`; the kernel has shape
    ``out_spatial + (prod(kernel_size) * in_features, features)`` and the bias
    ``out_spatial + (features,)``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> v = nn.ConvLocal(4, (3,)).init(jax.random.key(0), jnp.ones((1, 6, 2)))
    >>> v['params']['kernel'].shape
    (6, 6, 4)
    """

    @property
    def shared_weights(self) -> bool:
        return False


class ConvTranspose(Module):
    """A transposed convolution (``lax.conv_transpose``), e.g. for upsampling.

    Attributes:
      features: number of output channels.
      kernel_size: one size per spatial dimension; an int means 1-D.
      strides: one per spatial dimension (default ones); the output grows by this factor.
      padding: ``'SAME'``, ``'VALID'``, ``'CIRCULAR'`` (periodic output of size
        ``input * stride``), an int, or ``(low, high)`` pairs.
      kernel_dilation: dilation of the kernel (default ones).
      use_bias, mask, dtype, param_dtype, precision, kernel_init, bias_init: as in Conv.
      transpose_kernel: flip the spatial axes and swap the channel axes of the kernel
        (shape ``kernel_size + (features, in_features)``), giving the gradient of a Conv.
      promote_dtype: the dtype-promotion function.
      preferred_element_type: accumulation dtype passed to ``lax.conv_transpose``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> layer = nn.ConvTranspose(3, (2, 2), strides=(2, 2))
    >>> layer.init_with_output(jax.random.key(0), jnp.ones((1, 4, 4, 5)))[0].shape
    (1, 8, 8, 3)
    """

    features: int
    kernel_size: int | Sequence[int]
    strides: Sequence[int] | None = None
    padding: cm.PaddingLike = "SAME"
    kernel_dilation: Sequence[int] | None = None
    use_bias: bool = True
    mask: Array | None = None
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    transpose_kernel: bool = False
    promote_dtype: Callable[..., list] = promote_dtype
    preferred_element_type: Dtype | None = None

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Applies the transposed convolution to ``(*batch_dims, *spatial, features)``."""
        layer = "ConvTranspose"
        kernel_size = cm.kernel_size_tuple(self.kernel_size, jnp.ndim(inputs), layer)
        n = len(kernel_size)
        inputs = jnp.asarray(inputs) if not hasattr(inputs, "ndim") else inputs
        inputs, batch_shape = cm.flatten_batch(inputs, n, layer)
        strides = cm.broadcast_ints(self.strides, n, "strides", layer)
        kernel_dilation = cm.broadcast_ints(self.kernel_dilation, n, "kernel_dilation", layer)

        padding = cm.canonicalize_padding(self.padding, n)
        circular = False
        if isinstance(padding, str):
            padding = cm.check_padding_string(
                padding, layer, cm.LAX_PADDING_STRINGS + ("CIRCULAR",)
            )
            if padding == "CIRCULAR":
                circular, padding = True, "VALID"

        in_features = inputs.shape[-1]
        if self.transpose_kernel:
            kernel_shape = kernel_size + (self.features, in_features)
        else:
            kernel_shape = kernel_size + (in_features, self.features)
        _check_mask(self.mask, kernel_shape, layer)

        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        if self.mask is not None:
            kernel *= self.mask
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)

        y = lax.conv_transpose(
            inputs,
            kernel,
            strides,
            padding,
            rhs_dilation=kernel_dilation,
            transpose_kernel=self.transpose_kernel,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )
        if circular:
            y = cm.circular_fold(y, inputs.shape[1:-1], strides, self.transpose_kernel)
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - bias.ndim) + bias.shape)
        return cm.restore_batch(y, batch_shape)
