"""NNX linear layers (today's Flax 0.12.8 API): ``Linear``, ``LinearGeneral``, ``Einsum``,
``Embed``; ``Conv``/``ConvTranspose`` live in :mod:`flaxen.nnx.nn.conv` (re-exported here).

Constructors take input sizes explicitly and create their parameters at once, drawing keys
from ``rngs.params()`` in attribute order (kernel, then bias), so the same seed gives the
same parameters as Flax. Initializers are used, not stored: two layers that differ only in
their initializers have equal graph definitions. ``<param>_metadata`` mappings become the
Variables' metadata (e.g. ``out_sharding``). ``promote_dtype`` receives one tuple
``(inputs, kernel, bias)``; ``preferred_element_type`` is passed to the contraction only
when set, so custom ``dot_general``/``einsum_op`` functions need not accept it. The math is
:mod:`flaxen.layer_math`, the same code Linen's layers run.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> layer(jnp.ones((4, 2))).shape
(4, 3)
"""

from __future__ import annotations

import typing as tp
from types import MappingProxyType

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen.core.frozen_dict import FrozenDict
from flaxen.layer_math import initializers
from flaxen.layer_math.convolution import canonicalize_padding as canonicalize_padding
from flaxen.layer_math.convolution import channels_last_dimension_numbers
from flaxen.layer_math.einsum import bias_layout, check_einsum_str
from flaxen.layer_math.embedding import check_ids, lookup
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import _value, check_features, data, metadata, new_param
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variablelib import Param
from flaxen.typing import ConvGeneralDilatedT as ConvGeneralDilatedT
from flaxen.typing import DotGeneralT, Dtype, Initializer, PrecisionLike, Shape
from flaxen.typing import EinsumT as EinsumT
from flaxen.typing import LaxPadding as LaxPadding
from flaxen.typing import PaddingLike as PaddingLike

Array = jax.Array
PromoteDtypeFn = tp.Callable[..., tp.Any]
Axis = int
Size = int
_NO_META: tp.Mapping[str, tp.Any] = MappingProxyType({})

__all__ = ["Conv", "ConvTranspose", "Einsum", "Embed", "Linear", "LinearGeneral"]

default_kernel_init = initializers.lecun_normal()
default_bias_init = initializers.zeros_init()
default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


def _canon(x: int | tp.Sequence[int]) -> tuple[int, ...]:
    return (x,) if isinstance(x, int) else tuple(x)


def _conv_dimension_numbers(input_shape: tp.Sequence[int]) -> lax.ConvDimensionNumbers:
    """Channels-last dimension numbers for an input of shape ``input_shape`` (Flax's private
    helper, imported by code that calls ``lax.conv_general_dilated`` itself).

    >>> _conv_dimension_numbers((8, 32, 32, 3)).rhs_spec
    (3, 2, 0, 1)
    """
    return channels_last_dimension_numbers(len(input_shape))


def _normalize_axes(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return tuple(sorted(a if a >= 0 else ndim + a for a in axes))


def _contract_kwargs(preferred: tp.Any, out_sharding: tp.Any) -> dict:
    kw: dict = {}
    if preferred is not None:
        kw["preferred_element_type"] = preferred
    if out_sharding is not None:
        kw["out_sharding"] = out_sharding
    return kw


# jax's concrete array class, learned from the first concrete input (asking for it at import,
# e.g. with type(jnp.zeros(())), would start the JAX backend when flaxen is imported)
_CONCRETE: set[type] = set()


def _concrete(x: tp.Any) -> bool:
    t = type(x)
    if t in _CONCRETE:
        return True
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        _CONCRETE.add(t)
        return True
    return False


def _linear_math(inputs: Array, kernel: Array, bias: Array | None, precision: tp.Any
                 ) -> Array:
    y = lax.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())),
                        precision=precision)
    if bias is not None:
        y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
    return y


# the same math as Linear.__call__'s general path, compiled once per shape and precision
_eager_linear = jax.jit(_linear_math, static_argnums=3)


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
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        kmeta = metadata("Linear", "kernel", kernel_metadata)
        bmeta = metadata("Linear", "bias", bias_metadata)
        self.kernel = Param(
            kernel_init(rngs.params(), (in_features, out_features), param_dtype), **kmeta
        )
        if use_bias:
            self.bias = Param(bias_init(rngs.params(), (out_features,), param_dtype), **bmeta)
        else:
            self.bias = data(None)
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.dot_general = dot_general if dot_general is not None else lax.dot_general
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type

    def __call__(self, inputs: Array, out_sharding: tp.Any = None) -> Array:
        """Applies the layer to ``inputs`` of shape ``(..., in_features)``."""
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel.value, _value(self.bias)), dtype=self.dtype
        )
        if inputs.ndim and inputs.shape[-1] != kernel.shape[0]:
            check_features("Linear", inputs, (-1,), kernel.shape[:1], kernel.shape, "in_features")
        if (self.dot_general is lax.dot_general and self.preferred_element_type is None
                and out_sharding is None and _concrete(inputs)
                and (self.precision is None or isinstance(self.precision, (str, lax.Precision)))
                and _concrete(kernel)):
            # eager call of the default layer: one compiled dispatch instead of three
            # (dot_general, reshape and add each go through JAX's slower primitive path)
            return _eager_linear(inputs, kernel, bias, self.precision)
        y = self.dot_general(
            inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())), precision=self.precision,
            **_contract_kwargs(self.preferred_element_type, out_sharding),
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
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        dot_general: DotGeneralT | None = None,
        dot_general_cls: tp.Any = None,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        self.in_features = _canon(in_features)
        self.out_features = _canon(out_features)
        self.axis = _canon(axis)
        if len(self.axis) != len(self.in_features):
            raise ValueError(
                f"LinearGeneral: axis {self.axis} and in_features {self.in_features} must have "
                "the same length (one input size per contracted axis)."
            )
        self.batch_axis: FrozenDict[int, int] = FrozenDict(
            batch_axis if batch_axis is not None else {})
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.dot_general = dot_general
        self.dot_general_cls = dot_general_cls
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type
        batch_dims = tuple(sorted(self.batch_axis))
        batch_shape = tuple(self.batch_axis[a] for a in batch_dims)
        n_batch, n_in = len(batch_shape), len(self.in_features)
        kernel_shape = (*batch_shape, *self.in_features, *self.out_features)
        # initialise as a 2-D (fan_in, fan_out) matrix so variance scaling sees the real
        # fan-in, then give it its n-D shape (the same convention as Linen's DenseGeneral)
        fan_in = int(np.prod(kernel_shape[:n_batch + n_in]))
        flat = (fan_in, int(np.prod(kernel_shape[n_batch + n_in:])))
        kernel = jnp.reshape(kernel_init(rngs.params(), flat, param_dtype), kernel_shape)
        self.kernel = Param(kernel, **metadata("LinearGeneral", "kernel", kernel_metadata))
        if use_bias:
            bias_shape = (*batch_shape, *self.out_features)
            flat_b = (int(np.prod(batch_shape)), int(np.prod(self.out_features)))
            bias = jnp.reshape(bias_init(rngs.params(), flat_b, param_dtype), bias_shape)
            self.bias = Param(bias, **metadata("LinearGeneral", "bias", bias_metadata))
        else:
            self.bias = data(None)

    def __call__(self, inputs: Array, out_sharding: tp.Any = None) -> Array:
        """Contracts ``inputs`` over ``axis`` (batched over ``batch_axis``)."""
        ndim = inputs.ndim
        axis = _normalize_axes(self.axis, ndim)
        batch_dims = _normalize_axes(tuple(self.batch_axis), ndim)
        n_batch = len(batch_dims)
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel.value, _value(self.bias)), dtype=self.dtype
        )
        batch_ind = tuple(range(n_batch))
        contract_ind = tuple(range(n_batch, n_batch + len(axis)))
        want = kernel.shape[n_batch:n_batch + len(axis)]
        if tuple(inputs.shape[a] for a in axis) != want:
            check_features("LinearGeneral", inputs, axis, want, kernel.shape, "in_features")
        if self.dot_general_cls is not None:
            dot = self.dot_general_cls()
        else:
            dot = self.dot_general or lax.dot_general
        out = dot(
            inputs, kernel, ((axis, contract_ind), (batch_dims, batch_ind)),
            precision=self.precision,
            **_contract_kwargs(self.preferred_element_type, out_sharding),
        )
        if bias is not None:
            # dot_general puts batch dims first; bias is (*batch, *features)
            n_free = out.ndim - n_batch - len(self.out_features)
            bias = jnp.reshape(bias, bias.shape[:n_batch] + (1,) * n_free + bias.shape[n_batch:])
            out += bias
        return out


class Einsum(Module):
    """``einsum_op(einsum_str, inputs, kernel) + bias`` with a learned ``kernel``.

    ``bias_shape`` (``None``: no bias) covers the output axes the kernel contributes, in
    output order; it is broadcast over the others. ``einsum_op`` defaults to ``jnp.einsum``.

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
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        einsum_op: tp.Callable[..., Array] = jnp.einsum,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        einsum_str = check_einsum_str(einsum_str)
        self.kernel = new_param(
            "Einsum", "kernel", kernel_init, rngs, _canon(kernel_shape), param_dtype,
            kernel_metadata,
        )
        self.bias = new_param(
            "Einsum", "bias", bias_init, rngs,
            _canon(bias_shape) if bias_shape is not None else None, param_dtype, bias_metadata,
            use=bias_shape is not None,
        )
        # the shapes are kept as given (a list stays a list), as Flax keeps them
        self.einsum_str = einsum_str
        self.kernel_shape = kernel_shape
        self.bias_shape = bias_shape
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.promote_dtype = promote_dtype
        self.einsum_op = einsum_op
        self.preferred_element_type = preferred_element_type

    def __call__(
        self, inputs: Array, einsum_str: str | None = None, out_sharding: tp.Any = None
    ) -> Array:
        """Applies the einsum (``einsum_str`` here overrides the constructor's)."""
        spec = check_einsum_str(einsum_str if einsum_str is not None else self.einsum_str)
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel.value, _value(self.bias)), dtype=self.dtype
        )
        y = self.einsum_op(
            spec, inputs, kernel, precision=self.precision,
            **_contract_kwargs(self.preferred_element_type, out_sharding),
        )
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
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        embedding_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        self.embedding = new_param(
            "Embed", "embedding", embedding_init, rngs, (num_embeddings, features), param_dtype,
            embedding_metadata,
        )
        self.num_embeddings = num_embeddings
        self.features = features
        # the table's own dtype (a numpy dtype, as Flax stores it), not param_dtype
        self.dtype = dtype or self.embedding.value.dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: Array, out_sharding: tp.Any = None) -> Array:
        """Returns the rows for the integer ids ``inputs``: ``inputs.shape + (features,)``.

        ``out_sharding`` (explicit-sharding meshes) places the gathered rows.
        """
        check_ids(inputs, "Embed")
        (embedding,) = self.promote_dtype(
            (self.embedding.value,), dtype=self.dtype, inexact=False
        )
        if out_sharding is not None:
            return jax.sharding.auto_axes(lookup, out_sharding=out_sharding)(embedding, inputs)
        return lookup(embedding, inputs)

    def attend(self, query: Array, out_sharding: tp.Any = None) -> Array:
        """Returns ``query @ embedding.T``: one score per row, ``(..., num_embeddings)``."""
        if jnp.ndim(query) < 1 or jnp.shape(query)[-1] != self.features:
            raise ValueError(
                f"Embed.attend: query must have shape (..., features) with features="
                f"{self.features} (the table is ({self.num_embeddings}, {self.features})), but "
                f"got shape {jnp.shape(query)}. Project the query to {self.features} features."
            )
        query, embedding = self.promote_dtype(
            (query, self.embedding.value), dtype=self.dtype
        )
        if out_sharding is not None:
            return jnp.dot(query, embedding.T, out_sharding=out_sharding)
        return jnp.dot(query, embedding.T)


from flaxen.nnx.nn.conv import Conv, ConvTranspose  # noqa: E402  (re-export; no cycle)
