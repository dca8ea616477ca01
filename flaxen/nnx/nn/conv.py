"""NNX convolutions (today's Flax 0.12.8 API): ``Conv`` and ``ConvTranspose``.

The padding, batch flattening, circular folding and dimension numbers are
:mod:`flaxen.layer_math.convolution`, the code Linen's ``Conv``/``ConvTranspose`` run, so an
NNX layer and its Linen twin with the same parameters give the same numbers. ``mask`` (the
kernel's shape) is multiplied into the kernel before the dtype promotion, as in Linen.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> conv = nnx.Conv(3, 4, (3, 3), rngs=nnx.Rngs(0))
>>> conv(jnp.ones((2, 8, 8, 3))).shape
(2, 8, 8, 4)
>>> nnx.ConvTranspose(3, 2, (2, 2), strides=(2, 2), rngs=nnx.Rngs(0))(jnp.ones((1, 4, 4, 3))).shape
(1, 8, 8, 2)
"""

from __future__ import annotations

import typing as tp
from types import MappingProxyType

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.layer_math import convolution as cm
from flaxen.layer_math import initializers
from flaxen.layer_math.errors import LayerShapeError
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import _value, check_features, new_param
from flaxen.nnx.rnglib import Rngs
from flaxen.typing import ConvGeneralDilatedT, Dtype, Initializer, PaddingLike, PrecisionLike

Array = jax.Array
PromoteDtypeFn = tp.Callable[..., tp.Any]
_NO_META: tp.Mapping[str, tp.Any] = MappingProxyType({})

__all__ = ["Conv", "ConvTranspose"]

default_kernel_init = initializers.lecun_normal()
default_bias_init = initializers.zeros_init()


def _kernel_size(kernel_size: int | tp.Sequence[int]) -> tuple[int, ...]:
    return (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)


def _masked_kernel(layer: str, kernel: Array, mask: Array | None) -> Array:
    if mask is None:
        return kernel
    if tuple(jnp.shape(mask)) != tuple(kernel.shape):
        raise ValueError(
            f"{layer}: Mask needs to have the same shape as weights. Shapes are: "
            f"{tuple(jnp.shape(mask))}, {tuple(kernel.shape)}; build the mask with the "
            "kernel's shape (kernel_size + (in, out))."
        )
    return kernel * mask


def _reflect_pad(inputs: Array, kernel_size: tuple, kernel_dilation: tuple) -> Array:
    dilated = cm.dilated_sizes(kernel_size, kernel_dilation)
    pads = [(0, 0)] + [((k - 1) // 2, k // 2) for k in dilated] + [(0, 0)]
    return jnp.pad(inputs, pads, mode="reflect")


class Conv(Module):
    """N-D convolution over ``(*batch, *spatial, features)`` inputs (batch optional).

    ``padding`` is ``'SAME'``, ``'VALID'``, ``'SAME_LOWER'``, ``'CIRCULAR'``, ``'REFLECT'``,
    ``'CAUSAL'`` (1-D), an int, or one int / ``(low, high)`` pair per spatial axis. The
    kernel has shape ``kernel_size + (in_features // feature_group_count, out_features)``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | tp.Sequence[int],
        strides: None | int | tp.Sequence[int] = 1,
        *,
        padding: PaddingLike = "SAME",
        input_dilation: None | int | tp.Sequence[int] = 1,
        kernel_dilation: None | int | tp.Sequence[int] = 1,
        feature_group_count: int = 1,
        use_bias: bool = True,
        mask: Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        conv_general_dilated: ConvGeneralDilatedT = lax.conv_general_dilated,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        # attribute order is Flax's (repr and treescope list them in this order)
        kernel_size = _kernel_size(kernel_size)
        if in_features % feature_group_count:
            raise LayerShapeError(  # an AssertionError too, as Flax's assert raises
                f"Conv: in_features ({in_features}) must be divisible by feature_group_count "
                f"({feature_group_count}): each group convolves in_features // groups channels."
            )
        self.kernel_shape = (*kernel_size, in_features // feature_group_count, out_features)
        self.kernel = new_param(
            "Conv", "kernel", kernel_init, rngs, self.kernel_shape, param_dtype, kernel_metadata
        )
        self.bias = new_param(
            "Conv", "bias", bias_init, rngs, (out_features,), param_dtype, bias_metadata,
            use=use_bias,
        )
        self.in_features = in_features
        self.out_features = out_features
        self.kernel_size = kernel_size
        self.strides = strides
        self.padding = padding
        self.input_dilation = input_dilation
        self.kernel_dilation = kernel_dilation
        self.feature_group_count = feature_group_count
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.conv_general_dilated = (
            conv_general_dilated if conv_general_dilated is not None else lax.conv_general_dilated
        )
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: Array, out_sharding: tp.Any = None) -> Array:
        """Convolves ``inputs``; unbatched ``(*spatial, features)`` inputs are accepted."""
        kernel_size = self.kernel_size
        n = len(kernel_size)
        inputs = jnp.asarray(inputs) if not hasattr(inputs, "ndim") else inputs
        inputs, batch_shape = cm.flatten_batch(inputs, n, "Conv")
        strides = cm.broadcast_ints(self.strides, n, "strides", "Conv")
        input_dilation = cm.broadcast_ints(self.input_dilation, n, "input_dilation", "Conv")
        kernel_dilation = cm.broadcast_ints(self.kernel_dilation, n, "kernel_dilation", "Conv")

        padding = cm.canonicalize_padding(self.padding, n)
        if isinstance(padding, str):
            padding = cm.check_padding_string(
                padding, "Conv", cm.LAYER_PADDING_STRINGS + ("REFLECT",)
            )
            if padding == "CIRCULAR":
                inputs = cm.circular_pad(inputs, kernel_size, kernel_dilation)
                padding = "VALID"
            elif padding == "REFLECT":
                inputs = _reflect_pad(inputs, kernel_size, kernel_dilation)
                padding = "VALID"
            elif padding == "CAUSAL":
                padding = cm.causal_padding(kernel_size, kernel_dilation, "Conv")
            elif any(d != 1 for d in input_dilation):
                padding = cm.explicit_padding(
                    padding, inputs.shape[1:-1], kernel_size, strides, input_dilation,
                    kernel_dilation,
                )

        kernel = _masked_kernel("Conv", self.kernel.value, self.mask)
        inputs, kernel, bias = self.promote_dtype(
            (inputs, kernel, _value(self.bias)), dtype=self.dtype
        )
        in_features = kernel.shape[-2] * self.feature_group_count
        if inputs.shape[-1] != in_features:
            check_features("Conv", inputs, (-1,), (in_features,), kernel.shape, "in_features")
        kw: dict = {}
        if self.preferred_element_type is not None:
            kw["preferred_element_type"] = self.preferred_element_type
        if out_sharding is not None:
            kw["out_sharding"] = out_sharding
        y = self.conv_general_dilated(
            inputs, kernel, strides, padding,
            lhs_dilation=input_dilation,
            rhs_dilation=kernel_dilation,
            dimension_numbers=cm.channels_last_dimension_numbers(inputs.ndim),
            feature_group_count=self.feature_group_count,
            precision=self.precision,
            **kw,
        )
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - bias.ndim) + bias.shape)
        return cm.restore_batch(y, batch_shape)


class ConvTranspose(Module):
    """A transposed convolution (``lax.conv_transpose``), e.g. for upsampling.

    ``padding``: ``'SAME'``, ``'VALID'``, ``'CIRCULAR'``, an int or ``(low, high)`` pairs.
    The kernel is ``kernel_size + (in_features, out_features)`` (swapped when
    ``transpose_kernel``).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | tp.Sequence[int],
        strides: int | tp.Sequence[int] | None = None,
        *,
        padding: PaddingLike = "SAME",
        kernel_dilation: int | tp.Sequence[int] | None = None,
        use_bias: bool = True,
        mask: Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        transpose_kernel: bool = False,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        # attribute order is Flax's: the settings first, then the kernel shape and Params
        self.kernel_size = _kernel_size(kernel_size)
        self.in_features = in_features
        self.out_features = out_features
        self.strides = strides
        self.padding = padding
        self.kernel_dilation = kernel_dilation
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.transpose_kernel = transpose_kernel
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type
        if transpose_kernel:
            self.kernel_shape = (*self.kernel_size, out_features, in_features)
        else:
            self.kernel_shape = (*self.kernel_size, in_features, out_features)
        self.kernel = new_param(
            "ConvTranspose", "kernel", kernel_init, rngs, self.kernel_shape, param_dtype,
            kernel_metadata,
        )
        self.bias = new_param(
            "ConvTranspose", "bias", bias_init, rngs, (out_features,), param_dtype,
            bias_metadata, use=use_bias,
        )

    def __call__(self, inputs: Array) -> Array:
        """Applies the transposed convolution to ``(*batch_dims, *spatial, features)``."""
        layer = "ConvTranspose"
        kernel_size = self.kernel_size
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
        kernel = _masked_kernel(layer, self.kernel.value, self.mask)
        inputs, kernel, bias = self.promote_dtype(
            (inputs, kernel, _value(self.bias)), dtype=self.dtype
        )
        y = lax.conv_transpose(
            inputs, kernel, strides, padding,
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
