"""NNX linear layers: ``Linear``, ``LinearGeneral``, ``Einsum``, ``Conv``, ``Embed``.

Constructors take input sizes explicitly and create their parameters at once, drawing keys
from ``rngs.params()`` in attribute order (kernel, then bias), so the same seed gives the
same parameters as Flax. The math (dtype promotion, convolution padding, einsum bias layout,
embedding lookup) is :mod:`flaxen.layer_math`, the same code Linen's layers run, so a layer
here and its Linen twin with the same parameters compute the same numbers.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> layer(jnp.ones((4, 2))).shape
(4, 3)
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen.core.frozen_dict import FrozenDict
from flaxen.layer_math import convolution as cm
from flaxen.layer_math import initializers
from flaxen.layer_math.dtypes import promote_dtype
from flaxen.layer_math.einsum import bias_layout, check_einsum_str
from flaxen.layer_math.embedding import check_ids, lookup
from flaxen.nnx.module import Module
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variables import Param
from flaxen.typing import (
    ConvGeneralDilatedT,
    DotGeneralT,
    Dtype,
    Initializer,
    PaddingLike,
    PrecisionLike,
    Shape,
)

Array = jax.Array

__all__ = ["Conv", "Einsum", "Embed", "Linear", "LinearGeneral"]

default_kernel_init = initializers.lecun_normal()
default_bias_init = initializers.zeros_init()
default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


def _canon(x: int | tp.Sequence[int]) -> tuple[int, ...]:
    return (x,) if isinstance(x, int) else tuple(x)


def _normalize_axes(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return tuple(sorted(a if a >= 0 else ndim + a for a in axes))


def _value(v: Param | None) -> Array | None:
    return None if v is None else v.value


class Linear(Module):
    """``y = x @ kernel + bias`` over the last axis; ``kernel`` is ``(in, out)``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> layer = nnx.Linear(2, 3, use_bias=False, rngs=nnx.Rngs(0))
    >>> layer.kernel.value.shape, layer.bias
    ((2, 3), None)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        dot_general: DotGeneralT = lax.dot_general,
        rngs: Rngs,
    ) -> None:
        self.kernel = Param(kernel_init(rngs.params(), (in_features, out_features), param_dtype))
        self.bias = (
            Param(bias_init(rngs.params(), (out_features,), param_dtype)) if use_bias else None
        )
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.dot_general = dot_general

    def __call__(self, inputs: Array) -> Array:
        """Applies the layer to ``inputs`` of shape ``(..., in_features)``."""
        inputs, kernel, bias = promote_dtype(
            inputs, self.kernel.value, _value(self.bias), dtype=self.dtype
        )
        y = self.dot_general(
            inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())), precision=self.precision
        )
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        return y


class LinearGeneral(Module):
    """A linear map over several input axes (``axis``) to several output features.

    ``batch_axis`` maps input axes to their sizes for axes that get their own kernel slice.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> layer = nnx.LinearGeneral(2, (3, 4), rngs=nnx.Rngs(0))
    >>> layer(jnp.ones((1, 2))).shape, layer.kernel.value.shape
    ((1, 3, 4), (2, 3, 4))
    """

    def __init__(
        self,
        in_features: int | tp.Sequence[int],
        out_features: int | tp.Sequence[int],
        *,
        axis: int | tp.Sequence[int] = -1,
        batch_axis: tp.Mapping[int, int] = FrozenDict({}),  # noqa: B008 - immutable
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        precision: PrecisionLike = None,
        dot_general: DotGeneralT | None = None,
        rngs: Rngs,
    ) -> None:
        self.in_features = _canon(in_features)
        self.out_features = _canon(out_features)
        self.axis = _canon(axis)
        if len(self.axis) != len(self.in_features):
            raise ValueError(
                f"LinearGeneral: axis {self.axis} and in_features {self.in_features} must have "
                "the same length (one input size per contracted axis)."
            )
        self.batch_axis = FrozenDict(batch_axis if batch_axis is not None else {})
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.precision = precision
        self.dot_general = dot_general
        batch_dims = tuple(sorted(self.batch_axis))
        batch_shape = tuple(self.batch_axis[a] for a in batch_dims)
        n_batch, n_in = len(batch_shape), len(self.in_features)
        kernel_shape = (*batch_shape, *self.in_features, *self.out_features)

        def kernel_init_wrap(rng: Array, shape: tuple, dtype: tp.Any) -> Array:
            # initialise as a 2-D (fan_in, fan_out) matrix so variance scaling sees the real
            # fan-in, then give it its n-D shape (the same convention as Linen's DenseGeneral)
            flat = (
                int(np.prod(shape[:n_batch])) * int(np.prod(shape[n_batch:n_batch + n_in])),
                int(np.prod(shape[n_batch + n_in:])),
            )
            return jnp.reshape(kernel_init(rng, flat, dtype), shape)

        self.kernel = Param(kernel_init_wrap(rngs.params(), kernel_shape, param_dtype))
        if use_bias:
            bias_shape = (*batch_shape, *self.out_features)
            flat = (int(np.prod(batch_shape)), int(np.prod(self.out_features)))
            bias = bias_init(rngs.params(), flat, param_dtype)
            self.bias = Param(jnp.reshape(bias, bias_shape))
        else:
            self.bias = None

    def __call__(self, inputs: Array) -> Array:
        """Contracts ``inputs`` over ``axis`` (batched over ``batch_axis``)."""
        ndim = inputs.ndim
        axis = _normalize_axes(self.axis, ndim)
        batch_dims = _normalize_axes(tuple(self.batch_axis), ndim)
        n_batch = len(batch_dims)
        inputs, kernel, bias = promote_dtype(
            inputs, self.kernel.value, _value(self.bias), dtype=self.dtype
        )
        batch_ind = tuple(range(n_batch))
        contract_ind = tuple(range(n_batch, n_batch + len(axis)))
        dot = self.dot_general or lax.dot_general
        out = dot(
            inputs, kernel, ((axis, contract_ind), (batch_dims, batch_ind)),
            precision=self.precision,
        )
        if bias is not None:
            # dot_general puts batch dims first; bias is (*batch, *features)
            n_free = out.ndim - n_batch - len(self.out_features)
            bias = jnp.reshape(bias, bias.shape[:n_batch] + (1,) * n_free + bias.shape[n_batch:])
            out += bias
        return out


class Einsum(Module):
    """``jnp.einsum(einsum_str, inputs, kernel) + bias`` with a learned ``kernel``.

    ``bias_shape`` (``None``: no bias) covers the output axes the kernel contributes, in
    output order; it is broadcast over the others.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> layer = nnx.Einsum('nta,hab->nthb', (8, 2, 4), (8, 4), rngs=nnx.Rngs(0))
    >>> layer(jnp.ones((16, 11, 2))).shape
    (16, 11, 8, 4)
    """

    def __init__(
        self,
        einsum_str: str,
        kernel_shape: Shape,
        bias_shape: Shape | None = None,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        rngs: Rngs,
    ) -> None:
        einsum_str = check_einsum_str(einsum_str)
        self.kernel = Param(kernel_init(rngs.params(), tuple(kernel_shape), param_dtype))
        self.bias = (
            Param(bias_init(rngs.params(), tuple(bias_shape), param_dtype))
            if bias_shape is not None
            else None
        )
        self.einsum_str = einsum_str
        self.kernel_shape = tuple(kernel_shape)
        self.bias_shape = tuple(bias_shape) if bias_shape is not None else None
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init

    def __call__(self, inputs: Array, einsum_str: str | None = None) -> Array:
        """Applies the einsum (``einsum_str`` here overrides the constructor's)."""
        spec = check_einsum_str(einsum_str if einsum_str is not None else self.einsum_str)
        inputs, kernel, bias = promote_dtype(
            inputs, self.kernel.value, _value(self.bias), dtype=self.dtype
        )
        y = jnp.einsum(spec, inputs, kernel, precision=self.precision)
        if bias is not None:
            expected, broadcast = bias_layout(spec, inputs.ndim, kernel.shape)
            if tuple(bias.shape) != expected:
                raise ValueError(
                    f"Einsum: bias of shape {tuple(bias.shape)} does not fit {spec!r} with a "
                    f"kernel of shape {tuple(kernel.shape)}: the output axes the kernel "
                    f"contributes have shape {expected}. Build the layer with "
                    f"bias_shape={expected}."
                )
            y += jnp.reshape(bias, broadcast)
        return y


class Conv(Module):
    """N-D convolution over ``(*batch, *spatial, features)`` inputs (batch optional).

    ``padding`` is ``'SAME'``, ``'VALID'``, ``'SAME_LOWER'``, ``'CIRCULAR'``, ``'CAUSAL'``
    (1-D), an int, or one int / ``(low, high)`` pair per spatial axis.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> conv = nnx.Conv(3, 4, (3, 3), rngs=nnx.Rngs(0))
    >>> conv(jnp.ones((2, 8, 8, 3))).shape
    (2, 8, 8, 4)
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
        mask_fn: tp.Callable[[Array], Array] | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        conv_general_dilated: ConvGeneralDilatedT = lax.conv_general_dilated,
        rngs: Rngs,
    ) -> None:
        self.kernel_size = _canon(kernel_size)
        if in_features % feature_group_count:
            raise ValueError(
                f"Conv: in_features ({in_features}) must be divisible by feature_group_count "
                f"({feature_group_count}): each group convolves in_features // groups channels."
            )
        kernel_shape = (*self.kernel_size, in_features // feature_group_count, out_features)
        self.kernel = Param(kernel_init(rngs.params(), kernel_shape, param_dtype))
        self.bias = (
            Param(bias_init(rngs.params(), (out_features,), param_dtype)) if use_bias else None
        )
        self.in_features = in_features
        self.out_features = out_features
        self.strides = strides
        self.padding = padding
        self.input_dilation = input_dilation
        self.kernel_dilation = kernel_dilation
        self.feature_group_count = feature_group_count
        self.use_bias = use_bias
        self.mask_fn = mask_fn
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.conv_general_dilated = conv_general_dilated

    def __call__(self, inputs: Array) -> Array:
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
            padding = cm.check_padding_string(padding, "Conv", cm.LAYER_PADDING_STRINGS)
            if padding == "CIRCULAR":
                inputs = cm.circular_pad(inputs, kernel_size, kernel_dilation)
                padding = "VALID"
            elif padding == "CAUSAL":
                padding = cm.causal_padding(kernel_size, kernel_dilation, "Conv")
            elif any(d != 1 for d in input_dilation):
                padding = cm.explicit_padding(
                    padding, inputs.shape[1:-1], kernel_size, strides, input_dilation,
                    kernel_dilation,
                )

        kernel = self.kernel.value
        if self.mask_fn is not None:
            kernel = self.mask_fn(kernel)
        inputs, kernel, bias = promote_dtype(inputs, kernel, _value(self.bias), dtype=self.dtype)
        y = self.conv_general_dilated(
            inputs,
            kernel,
            strides,
            padding,
            lhs_dilation=input_dilation,
            rhs_dilation=kernel_dilation,
            dimension_numbers=cm.channels_last_dimension_numbers(inputs.ndim),
            feature_group_count=self.feature_group_count,
            precision=self.precision,
        )
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - bias.ndim) + bias.shape)
        return cm.restore_batch(y, batch_shape)


class Embed(Module):
    """A lookup table: ``embed(ids)`` gathers rows; ``embed.attend(q)`` is ``q @ table.T``.

    Out-of-range ids give NaN rows (see :func:`flaxen.layer_math.embedding.lookup`).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> embed = nnx.Embed(5, 3, rngs=nnx.Rngs(0))
    >>> embed(jnp.array([[0, 4]])).shape, embed.attend(jnp.ones((2, 3))).shape
    ((1, 2, 3), (2, 5))
    """

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        embedding_init: Initializer = default_embed_init,
        rngs: Rngs,
    ) -> None:
        self.embedding = Param(
            embedding_init(rngs.params(), (num_embeddings, features), param_dtype)
        )
        self.num_embeddings = num_embeddings
        self.features = features
        self.dtype = dtype or param_dtype
        self.param_dtype = param_dtype
        self.embedding_init = embedding_init

    def __call__(self, inputs: Array) -> Array:
        """Returns the rows for the integer ids ``inputs``: ``inputs.shape + (features,)``."""
        check_ids(inputs, "Embed")
        (embedding,) = promote_dtype(self.embedding.value, dtype=self.dtype, inexact=False)
        return lookup(embedding, inputs)

    def attend(self, query: Array) -> Array:
        """Returns ``query @ embedding.T``: one score per row, ``(..., num_embeddings)``."""
        if jnp.ndim(query) < 1 or jnp.shape(query)[-1] != self.features:
            raise ValueError(
                f"Embed.attend: query must have shape (..., features) with features="
                f"{self.features} (the table is ({self.num_embeddings}, {self.features})), but "
                f"got shape {jnp.shape(query)}. Project the query to {self.features} features."
            )
        query, embedding = promote_dtype(query, self.embedding.value, dtype=self.dtype)
        return jnp.dot(query, embedding.T)
