"""Linear layers: ``Dense``, ``DenseGeneral``, ``Einsum``, ``Embed`` and the convolutions.

All follow the dtype rules of :mod:`flaxen.linen.dtypes`: parameters are created in
``param_dtype`` (float32 by default) and the computation runs in ``dtype``, or, when that
is ``None``, in the promoted dtype of the inputs and parameters. Parameter names, shapes,
creation order and initializer calls are Flax's, so the same key gives the same arrays.
The convolution family lives in :mod:`flaxen.linen._conv` and is re-exported here.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> layer = nn.Dense(features=3)
>>> variables = layer.init(jax.random.key(0), jnp.ones((2, 4)))
>>> jax.tree.map(jnp.shape, variables['params'])
{'bias': (3,), 'kernel': (4, 3)}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen.core import meta
from flaxen.layer_math.einsum import bias_layout as einsum_bias_layout
from flaxen.layer_math.embedding import lookup as embedding_lookup
from flaxen.linen import initializers
from flaxen.linen._conv import Conv, ConvLocal, ConvTranspose, _Conv  # noqa: F401
from flaxen.linen._conv_math import (  # noqa: F401 - Flax exposes these names here
    LaxPadding,
    PaddingLike,
    canonicalize_padding,
    channels_last_dimension_numbers,
)
from flaxen.linen._layer_errors import (
    LayerAxisError,
    LayerAxisOverlapError,
    LayerRankError,
    LayerShapeError,
)
from flaxen.linen.dtypes import promote_dtype
from flaxen.linen.module import Module, compact, merge_param

Array = jax.Array
Dtype = Any
PRNGKey = jax.Array
Shape = tuple[int, ...]
PrecisionLike = None | str | lax.Precision | tuple[str, str] | tuple[lax.Precision, lax.Precision]
DotGeneralT = Callable[..., Array]
ConvGeneralDilatedT = Callable[..., Array]
Initializer = initializers.Initializer


def _conv_dimension_numbers(input_shape: Sequence[int]) -> lax.ConvDimensionNumbers:
    """The ``lax`` dimension numbers of a channels-last convolution of inputs of this shape
    (``NH..WC`` inputs and outputs, ``H..WIO`` kernels); Flax's private helper, kept for code
    that builds its own ``lax.conv_general_dilated`` calls.

    >>> _conv_dimension_numbers((8, 32, 32, 3)).rhs_spec
    (3, 2, 0, 1)
    """
    return channels_last_dimension_numbers(len(input_shape))


class PromoteDtypeFn(Protocol):
    """The signature of a layer's ``promote_dtype`` field (see :func:`promote_dtype`)."""

    def __call__(
        self, *args: Array | None, dtype: Any = None, inexact: bool = True
    ) -> list[Any]: ...  # each entry is None exactly where its argument is


default_kernel_init = initializers.lecun_normal()
default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)

__all__ = [
    "Conv",
    "ConvLocal",
    "ConvTranspose",
    "Dense",
    "DenseGeneral",
    "Einsum",
    "Embed",
    "canonicalize_padding",
    "default_embed_init",
    "default_kernel_init",
]


def _as_tuple(x: int | Iterable[int]) -> tuple[int, ...]:
    if isinstance(x, Iterable):
        return tuple(x)
    return (x,)


def _normalize_axes(axes: tuple[int, ...], ndim: int, layer: str, what: str) -> tuple[int, ...]:
    out = []
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise LayerAxisError(
                f"{layer}: {what}={axes} names axis {ax}, but the inputs have only {ndim} "
                f"dimensions (valid axes are {-ndim}..{ndim - 1})."
            )
        out.append(ax % ndim)
    # Kernel axes follow the inputs' order, whatever order the axes were listed in.
    return tuple(sorted(out))


def _dot_general_of(module: Any) -> DotGeneralT:
    if getattr(module, "dot_general_cls", None) is not None:
        return module.dot_general_cls()
    if module.dot_general is not None:
        return module.dot_general
    return lax.dot_general


def _require_rank(inputs: Array, minimum: int, layer: str, layout: str) -> None:
    if jnp.ndim(inputs) < minimum:
        raise LayerRankError(
            f"{layer}: inputs of shape {jnp.shape(inputs)} have {jnp.ndim(inputs)} "
            f"dimension(s), expected at least {minimum} laid out as {layout}. Add the "
            "missing axis (e.g. x[None] or x[..., None])."
        )


class DenseGeneral(Module):
    """A linear map over several input axes, with optional per-batch-index weights.

    Attributes:
      features: int or tuple of ints, the output feature shape.
      axis: int or tuple of ints, the input axes to contract (default: the last).
      batch_dims: leading input axes (``(0,)``, ``(0, 1)``...) that get separate weights.
      use_bias: whether to add a bias (shape ``batch_shape + features``).
      dtype: computation dtype (``None``: promote inputs and parameters).
      param_dtype: dtype of the parameters (default float32).
      kernel_init: initializer for the kernel; it is called with the flattened 2-D shape
        ``(prod(batch + contracted), prod(features))`` so fan-in/out are computed sensibly.
      bias_init: initializer for the bias (called with a flat shape).
      precision: numerical precision of the contraction.
      promote_dtype: the dtype-promotion function (see :mod:`flaxen.linen.dtypes`).
      dot_general, dot_general_cls: replace ``lax.dot_general`` (a function or a Module
        class instantiated on each call).

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> layer = nn.DenseGeneral(features=(4, 5), axis=-1)
    >>> y, v = layer.init_with_output(jax.random.key(0), jnp.ones((2, 3)))
    >>> y.shape, v['params']['kernel'].shape
    ((2, 4, 5), (3, 4, 5))
    """

    features: int | Sequence[int]
    axis: int | Sequence[int] = -1
    batch_dims: Sequence[int] = ()
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    precision: PrecisionLike = None
    promote_dtype: PromoteDtypeFn = promote_dtype
    dot_general: DotGeneralT | None = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Contracts ``inputs`` over ``axis`` with the kernel; returns the projected array."""
        features = _as_tuple(self.features)
        axis = _as_tuple(self.axis)
        batch_dims = _as_tuple(self.batch_dims)
        if batch_dims and set(batch_dims) != set(range(max(batch_dims) + 1)):
            raise ValueError(
                f"batch_dims {batch_dims} must be consecutive leading dimensions starting "
                f"from 0. DenseGeneral gives separate weights per batch index only for "
                f"leading axes, e.g. batch_dims=(0,) or (0, 1)."
            )
        ndim = jnp.ndim(inputs)
        axis = _normalize_axes(axis, ndim, "DenseGeneral", "axis")
        batch_dims = _normalize_axes(batch_dims, ndim, "DenseGeneral", "batch_dims")
        if set(axis) & set(batch_dims):
            raise LayerAxisOverlapError(
                f"DenseGeneral: axis {axis} and batch_dims {batch_dims} overlap; an axis is "
                "either contracted or a batch axis, not both."
            )
        n_batch, n_axis, n_features = len(batch_dims), len(axis), len(features)
        shape = jnp.shape(inputs)

        def kernel_init_wrap(rng, kshape, dtype=jnp.float32):
            flat = (
                int(np.prod(kshape[:n_batch])) * int(np.prod(kshape[n_batch : n_batch + n_axis])),
                int(np.prod(kshape[-n_features:])),
            )
            kernel = self.kernel_init(rng, flat, dtype)
            if isinstance(kernel, meta.AxisMetadata):
                return meta.replace_boxed(kernel, jnp.reshape(kernel.unbox(), kshape))
            return jnp.reshape(kernel, kshape)

        batch_shape = tuple(shape[ax] for ax in batch_dims)
        kernel_shape = tuple(shape[ax] for ax in axis) + features
        kernel = self.param("kernel", kernel_init_wrap, batch_shape + kernel_shape,
                            self.param_dtype)

        bias = None
        if self.use_bias:

            def bias_init_wrap(rng, bshape, dtype=jnp.float32):
                bias = self.bias_init(rng, (int(np.prod(bshape)),), dtype)
                if isinstance(bias, meta.AxisMetadata):
                    return meta.replace_boxed(bias, jnp.reshape(bias.unbox(), bshape))
                return jnp.reshape(bias, bshape)

            bias = self.param("bias", bias_init_wrap, batch_shape + features, self.param_dtype)

        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        batch_ind = tuple(range(n_batch))
        contract_ind = tuple(range(n_batch, n_axis + n_batch))
        out = _dot_general_of(self)(
            inputs,
            kernel,
            ((axis, contract_ind), (batch_dims, batch_ind)),
            precision=self.precision,
        )
        if bias is not None:
            n_free = ndim - n_axis - n_batch
            out += jnp.reshape(bias, batch_shape + (1,) * n_free + features)
        return out


class Dense(Module):
    """A linear map over the last axis: ``y = x @ kernel + bias``.

    Attributes:
      features: number of output features.
      use_bias: whether to add a bias (default True).
      dtype: computation dtype (``None``: promote inputs and parameters).
      param_dtype: dtype of the parameters (default float32).
      precision: numerical precision of the matmul.
      kernel_init: initializer for the ``(in_features, features)`` kernel (lecun normal).
      bias_init: initializer for the ``(features,)`` bias (zeros).
      promote_dtype: the dtype-promotion function.
      dot_general, dot_general_cls: replace ``lax.dot_general``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> y, v = nn.Dense(2).init_with_output(jax.random.key(0), jnp.ones((5, 3)))
    >>> y.shape, v['params']['kernel'].shape
    ((5, 2), (3, 2))
    """

    features: int
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    promote_dtype: PromoteDtypeFn = promote_dtype
    dot_general: DotGeneralT | None = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, inputs: Array) -> Array:
        """Applies the map to the last axis of ``inputs`` (any leading shape)."""
        _require_rank(inputs, 1, "Dense", "(..., in_features)")
        kernel = self.param(
            "kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features), self.param_dtype
        )
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = _dot_general_of(self)(
            inputs,
            kernel,
            (((inputs.ndim - 1,), (0,)), ((), ())),
            precision=self.precision,
        )
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        return y


class Einsum(Module):
    """A learnable kernel of a given ``shape`` combined with the input by ``jnp.einsum``.

    ``einsum_str`` must be explicit (contain ``->``) with exactly two operands: the input
    and the kernel. It may be set on the Module or passed at call time (exactly one). The
    bias has one axis per kernel letter that survives into the output.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> layer = nn.Einsum((5, 6, 7), 'abc,cde->abde')
    >>> y, v = layer.init_with_output(jax.random.key(0), jnp.ones((3, 4, 5)))
    >>> y.shape, v['params']['bias'].shape
    ((3, 4, 6, 7), (6, 7))
    """

    shape: Shape
    einsum_str: str | None = None
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    promote_dtype: PromoteDtypeFn = promote_dtype
    preferred_element_type: Dtype | None = None

    @compact
    def __call__(self, inputs: Array, einsum_str: str | None = None) -> Array:
        """Returns ``einsum(einsum_str, inputs, kernel) (+ bias)``."""
        einsum_str = merge_param("einsum_str", self.einsum_str, einsum_str)
        einsum_str = einsum_str.replace(" ", "")
        if "->" not in einsum_str:
            raise ValueError(
                '`einsum_str` equation must be explicit and include "->". Einsum got '
                f"{einsum_str!r}; write the output subscripts, e.g. 'ab,bc->ac'."
            )
        if einsum_str.count(",") != 1:
            raise ValueError(
                "`einsum_str` equation must have exactly two operands and therefore, "
                f"exactly one comma character, instead of {einsum_str.count(',')} (got "
                f"{einsum_str!r}: the input and the kernel)."
            )
        kernel = self.param("kernel", self.kernel_init, tuple(self.shape), self.param_dtype)
        bias = None
        if self.use_bias:
            # the output axes the kernel contributes (its letters and its share of '...')
            bias_shape, bias_layout = einsum_bias_layout(
                einsum_str, jnp.ndim(inputs), tuple(self.shape)
            )
            bias = self.param("bias", self.bias_init, bias_shape, self.param_dtype)
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = jnp.einsum(
            einsum_str,
            inputs,
            kernel,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )
        if bias is not None:
            y += jnp.reshape(bias, bias_layout)
        return y


class _AttendShapeError(LayerShapeError, TypeError):
    """``Embed.attend`` got a query of the wrong size (Flax fails with a ``TypeError``)."""


class Embed(Module):
    """A lookup table mapping integers in ``[0, num_embeddings)`` to ``features`` vectors.

    The table is the parameter ``embedding`` of shape ``(num_embeddings, features)``.
    Calling looks rows up (every input dimension is a batch dimension, out-of-range indices
    give NaN rows, negative ones count from the end); :meth:`attend` computes
    ``query @ embedding.T``, e.g. for tied output logits.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> layer = nn.Embed(num_embeddings=5, features=3)
    >>> y, v = layer.init_with_output(jax.random.key(0), jnp.array([[0, 4]]))
    >>> y.shape
    (1, 2, 3)
    """

    num_embeddings: int
    features: int
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    embedding_init: Initializer = default_embed_init
    promote_dtype: PromoteDtypeFn = promote_dtype

    def setup(self) -> None:
        self.embedding = self.param(
            "embedding",
            self.embedding_init,
            (self.num_embeddings, self.features),
            self.param_dtype,
        )

    def __call__(self, inputs: Array) -> Array:
        """Looks up ``inputs`` (an integer array); returns ``inputs.shape + (features,)``."""
        dtype = jnp.result_type(inputs)
        if not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(
                "Input type must be an integer or unsigned integer. Embed got inputs of "
                f"dtype {jnp.dtype(dtype).name} and shape {jnp.shape(inputs)}; cast the "
                "indices, e.g. inputs.astype(jnp.int32)."
            )
        (embedding,) = self.promote_dtype(self.embedding, dtype=self.dtype, inexact=False)
        # out-of-range ids give NaN rows, also for a one-row table (shared with NNX's Embed)
        return embedding_lookup(embedding, inputs)

    def attend(self, query: Array) -> Array:
        """Returns ``query @ embedding.T``: one score per embedding row.

        ``query`` has shape ``(..., features)``; the result ``(..., num_embeddings)``.
        """
        if jnp.ndim(query) < 1 or jnp.shape(query)[-1] != self.features:
            raise _AttendShapeError(
                f"Embed.attend: query must have shape (..., features) with "
                f"features={self.features} (the embedding table is "
                f"({self.num_embeddings}, {self.features})), but got shape "
                f"{jnp.shape(query)}. Project the query to {self.features} features first.")
        query, embedding = self.promote_dtype(query, self.embedding, dtype=self.dtype)
        return jnp.dot(query, embedding.T)

