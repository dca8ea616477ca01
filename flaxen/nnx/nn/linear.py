"""NNX linear layers: ``Linear``, ``LinearGeneral``, ``Einsum``, ``Conv``, ``Embed``.

Constructors take input sizes explicitly and create their parameters at once, drawing keys
from ``rngs.params()`` in attribute order (kernel, then bias), so the same seed gives the
same parameters as Flax.

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
from flaxen.nnx.module import Module
from flaxen.nnx.nn._linen import default_kernel_init, initializers, promote_dtype
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variables import Param

Array = jax.Array
Initializer = tp.Callable[..., Array]
_zeros = initializers.zeros_init()


def _canon(x: int | tp.Sequence[int]) -> tuple[int, ...]:
    return (x,) if isinstance(x, int) else tuple(x)


def _normalize_axes(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return tuple(sorted(a if a >= 0 else ndim + a for a in axes))


class Linear(Module):
    """``y = x @ kernel + bias`` over the last axis; ``kernel`` is ``(in, out)``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        precision: tp.Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = _zeros,
        dot_general: tp.Callable[..., Array] = lax.dot_general,
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
        kernel = self.kernel.value
        bias = self.bias.value if self.bias is not None else None
        inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = self.dot_general(
            inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())), precision=self.precision
        )
        if bias is not None:
            y = y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        return y


class LinearGeneral(Module):
    """A linear map over several input axes (``axis``) to several output features.

    ``batch_axis`` maps input axes to their sizes for axes that get their own kernel slice.
    """

    def __init__(
        self,
        in_features: int | tp.Sequence[int],
        out_features: int | tp.Sequence[int],
        *,
        axis: int | tp.Sequence[int] = -1,
        batch_axis: tp.Mapping[int, int] = FrozenDict({}),  # noqa: B008 - immutable
        use_bias: bool = True,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = _zeros,
        precision: tp.Any = None,
        dot_general: tp.Callable[..., Array] | None = None,
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
        ndim = inputs.ndim
        axis = _normalize_axes(self.axis, ndim)
        batch_dims = _normalize_axes(tuple(self.batch_axis), ndim)
        n_batch = len(batch_dims)
        kernel = self.kernel.value
        bias = self.bias.value if self.bias is not None else None
        inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        batch_ind = tuple(range(n_batch))
        contract_ind = tuple(range(n_batch, n_batch + len(axis)))
        dot = self.dot_general or lax.dot_general
        out = dot(inputs, kernel, ((axis, contract_ind), (batch_dims, batch_ind)),
                  precision=self.precision)
        if bias is not None:
            # dot_general puts batch dims first; bias is (*batch, *features)
            n_free = out.ndim - n_batch - len(self.out_features)
            bias = jnp.reshape(bias, bias.shape[:n_batch] + (1,) * n_free
                               + bias.shape[n_batch:])
            out = out + bias
        return out


class Einsum(Module):
    """``jnp.einsum(einsum_str, inputs, kernel) + bias`` with a learned ``kernel``."""

    def __init__(
        self,
        einsum_str: str,
        kernel_shape: tp.Sequence[int],
        bias_shape: tp.Sequence[int] | None = None,
        *,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        precision: tp.Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = _zeros,
        rngs: Rngs,
    ) -> None:
        einsum_str = einsum_str.replace(" ", "")
        if "->" not in einsum_str or einsum_str.count(",") != 1:
            raise ValueError(
                f"Einsum: einsum_str {einsum_str!r} must have two operands and an output, "
                "like 'ab,bc->ac'."
            )
        self.kernel = Param(kernel_init(rngs.params(), tuple(kernel_shape), param_dtype))
        self.bias = (
            Param(bias_init(rngs.params(), tuple(bias_shape), param_dtype))
            if bias_shape is not None else None
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
        spec = (einsum_str or self.einsum_str).replace(" ", "")
        kernel = self.kernel.value
        bias = self.bias.value if self.bias is not None else None
        inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = jnp.einsum(spec, inputs, kernel, precision=self.precision)
        if bias is not None:
            out_axes = spec.split("->")[1]
            # align bias with the trailing output axes
            y = y + jnp.reshape(bias, (1,) * (len(out_axes) - bias.ndim) + bias.shape)
        return y


PaddingLike = str | int | tp.Sequence[int | tuple[int, int]]


def _conv_padding(padding: PaddingLike, kernel_size: tuple[int, ...],
                  kernel_dilation: tuple[int, ...]) -> tp.Any:
    if isinstance(padding, str):
        up = padding.upper()
        if up == "CAUSAL":
            if len(kernel_size) != 1:
                raise ValueError("Conv: padding='CAUSAL' is only for 1-D convolutions.")
            left = kernel_dilation[0] * (kernel_size[0] - 1)
            return [(left, 0)]
        if up == "CIRCULAR":
            return "CIRCULAR"
        return up
    if isinstance(padding, int):
        return [(padding, padding)] * len(kernel_size)
    return [(p, p) if isinstance(p, int) else tuple(p) for p in padding]


class Conv(Module):
    """N-D convolution over ``(batch, *spatial, features)`` inputs (batch optional)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | tp.Sequence[int],
        strides: int | tp.Sequence[int] = 1,
        *,
        padding: PaddingLike = "SAME",
        input_dilation: int | tp.Sequence[int] = 1,
        kernel_dilation: int | tp.Sequence[int] = 1,
        feature_group_count: int = 1,
        use_bias: bool = True,
        mask_fn: tp.Callable[[Array], Array] | None = None,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        precision: tp.Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = _zeros,
        conv_general_dilated: tp.Callable[..., Array] = lax.conv_general_dilated,
        rngs: Rngs,
    ) -> None:
        self.kernel_size = _canon(kernel_size)
        if in_features % feature_group_count:
            raise ValueError(
                f"Conv: in_features ({in_features}) must be divisible by feature_group_count "
                f"({feature_group_count})."
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
        n_spatial = len(self.kernel_size)
        unbatched = inputs.ndim == n_spatial + 1
        if unbatched:
            inputs = inputs[None]
        batch_shape = inputs.shape[: inputs.ndim - n_spatial - 1]
        if len(batch_shape) != 1:  # fold extra leading dims into one batch dim
            inputs = jnp.reshape(inputs, (-1, *inputs.shape[-n_spatial - 1:]))

        def tup(x: int | tp.Sequence[int] | None) -> tuple[int, ...]:
            if x is None:
                return (1,) * n_spatial
            return (x,) * n_spatial if isinstance(x, int) else tuple(x)

        kernel_dilation = tup(self.kernel_dilation)
        padding = _conv_padding(self.padding, self.kernel_size, kernel_dilation)
        if padding == "CIRCULAR":
            sizes = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, kernel_dilation)]
            pads = [(0, 0)] + [((s - 1) // 2, s // 2) for s in sizes] + [(0, 0)]
            inputs = jnp.pad(inputs, pads, mode="wrap")
            padding = "VALID"
        kernel = self.kernel.value
        if self.mask_fn is not None:
            kernel = self.mask_fn(kernel)
        bias = self.bias.value if self.bias is not None else None
        inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        dn = lax.conv_dimension_numbers(inputs.shape, kernel.shape,
                                        _dimension_names(n_spatial))
        y = self.conv_general_dilated(
            inputs, kernel, tup(self.strides), padding,
            lhs_dilation=tup(self.input_dilation), rhs_dilation=kernel_dilation,
            dimension_numbers=dn, feature_group_count=self.feature_group_count,
            precision=self.precision,
        )
        if bias is not None:
            y = y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        if unbatched:
            y = y[0]
        elif len(batch_shape) != 1:
            y = jnp.reshape(y, (*batch_shape, *y.shape[1:]))
        return y


def _dimension_names(n: int) -> tuple[str, str, str]:
    spatial = "".join("HWDXYZ"[i] for i in range(n))
    return f"N{spatial}C", f"{spatial}IO", f"N{spatial}C"


_default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


class Embed(Module):
    """A lookup table: ``embed(ids)`` gathers rows; ``embed.attend(q)`` is ``q @ table.T``."""

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        embedding_init: Initializer = _default_embed_init,
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
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError(
                f"Embed: inputs must be integer ids, got dtype {inputs.dtype}."
            )
        (embedding,) = promote_dtype(self.embedding.value, dtype=self.dtype, inexact=False)
        if self.num_embeddings == 1:  # a gather of one row is slower than a broadcast
            return jnp.broadcast_to(embedding, (*inputs.shape, self.features))
        return jnp.take(embedding, inputs, axis=0)

    def attend(self, query: Array) -> Array:
        query, embedding = promote_dtype(query, self.embedding.value, dtype=self.dtype)
        return jnp.dot(query, embedding.T)
