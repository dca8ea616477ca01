"""Functional linear layers on Scopes: ``dense``, ``dense_general``, ``conv``, ``conv_transpose``
and ``embedding``.

Every layer takes the scope first, creates its params on it (``kernel`` then ``bias``, or
``table``) and casts inputs and params to ``dtype`` before computing, so that parameters drawn
from the same key and outputs agree with Flax's functional layers.

>>> import jax, jax.numpy as jnp
>>> from flaxen.core import init
>>> y, v = init(dense)(jax.random.PRNGKey(0), jnp.ones((1, 3)), 4)
>>> v['params']['kernel'].shape, y.shape
((3, 4), (1, 4))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen import struct
from flaxen.core.scope import Scope

default_kernel_init = jax.nn.initializers.lecun_normal()
zeros = jax.nn.initializers.zeros
default_embed_init = jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


def _as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, Iterable) else (x,)


def _add_bias(scope: Scope, y: Any, features: int, bias_init: Callable[..., Any],
              dtype: Any) -> Any:
    b = jnp.asarray(scope.param("bias", bias_init, (features,)), dtype)
    return y + b.reshape((1,) * (y.ndim - 1) + (features,))


def dense(scope: Scope, inputs: Any, features: int, bias: bool = True, dtype: Any = jnp.float32,
          precision: Any = None, kernel_init: Callable[..., Any] = default_kernel_init,
          bias_init: Callable[..., Any] = zeros) -> Any:
    """``inputs @ kernel + bias`` over the last axis of ``inputs``.

    Params: ``kernel`` of shape (in_features, features) and, when ``bias``, ``bias`` of shape
    (features,). Inputs and params are cast to ``dtype``; ``precision`` goes to
    ``lax.dot_general``.
    """
    inputs = jnp.asarray(inputs, dtype)
    kernel = jnp.asarray(scope.param("kernel", kernel_init, (inputs.shape[-1], features)), dtype)
    y = lax.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())),
                        precision=precision)
    if bias:
        y = _add_bias(scope, y, features, bias_init, dtype)
    return y


def _per_batch_init(init_fn: Callable[..., Any], n_batch: int, n_lead: int,
                    n_features: int) -> Callable[..., Any]:
    """Wraps ``init_fn`` so a (*batch, *contracted, *features) param is drawn as one 2-d
    (contracted, features) block per batch index -- all from the same key -- stacked and
    reshaped. ``n_lead`` is the number of contracted axes (0 for a bias)."""

    def init(rng: Any, shape: Sequence[int], dtype: Any = jnp.float32) -> Any:
        shape = tuple(shape)
        batch = int(np.prod(shape[:n_batch], dtype=np.int32))
        block: tuple[int, ...]
        if n_lead:
            block = (int(np.prod(shape[n_batch:n_batch + n_lead])),
                     int(np.prod(shape[len(shape) - n_features:])))
        else:
            block = (int(np.prod(shape[len(shape) - n_features:])),)
        parts = [init_fn(rng, block, dtype) for _ in range(batch)]
        return jnp.reshape(jnp.concatenate(parts, axis=0), shape)

    return init


def dense_general(scope: Scope, inputs: Any, features: Any, axis: Any = -1,
                  batch_dims: Any = (), bias: bool = True, dtype: Any = jnp.float32,
                  kernel_init: Callable[..., Any] = default_kernel_init,
                  bias_init: Callable[..., Any] = zeros, precision: Any = None) -> Any:
    """A linear map contracting the ``axis`` axes of ``inputs`` into ``features`` (an int or
    a tuple of ints), with independent weights per index of the leading ``batch_dims``.

    ``batch_dims`` must be the consecutive leading axes ``0..k-1``. The output's axes are the
    batch axes, the remaining (free) input axes, then ``features``. Params: ``kernel`` of
    shape (*batch, *contracted, *features) -- initialised as a 2-d (contracted, features)
    matrix per batch index -- and ``bias`` of shape (*batch, *features), broadcast over the
    free axes (Flax mis-places it when contracted axes are not the trailing ones; here it is
    always added along the batch and feature axes of the output).
    """
    inputs = jnp.asarray(inputs, dtype)
    features, axis, batch_dims = _as_tuple(features), _as_tuple(axis), _as_tuple(batch_dims)
    if batch_dims and set(batch_dims) != set(range(max(batch_dims) + 1)):
        raise ValueError(f"dense_general: batch_dims {batch_dims} must be consecutive leading "
                         "dimensions starting from 0.")
    ndim = inputs.ndim
    axis = tuple(a % ndim for a in axis)
    batch_dims = tuple(b % ndim for b in batch_dims)
    n_batch, n_axis, n_feat = len(batch_dims), len(axis), len(features)
    batch_shape = tuple(inputs.shape[b] for b in batch_dims)
    kernel_shape = batch_shape + tuple(inputs.shape[a] for a in axis) + features
    kernel = scope.param("kernel", _per_batch_init(kernel_init, n_batch, n_axis, n_feat),
                         kernel_shape)
    kernel = jnp.asarray(kernel, dtype)
    batch_idx = tuple(range(n_batch))
    contract_idx = tuple(range(n_batch, n_batch + n_axis))
    y = lax.dot_general(inputs, kernel, ((axis, contract_idx), (batch_dims, batch_idx)),
                        precision=precision)
    if bias:
        b = scope.param("bias", _per_batch_init(bias_init, n_batch, 0, n_feat),
                        batch_shape + features)
        # The output is (*batch, *free input axes, *features): broadcast over the free axes.
        n_free = ndim - n_axis - n_batch
        b = jnp.reshape(b, batch_shape + (1,) * n_free + features)
        y = y + jnp.asarray(b, dtype)
    return y


def _conv_dims(ndim: int) -> lax.ConvDimensionNumbers:
    """Dimension numbers for channels-last inputs/outputs and (*spatial, in, out) kernels."""
    spatial = tuple(range(1, ndim - 1))
    lhs = (0, ndim - 1) + spatial
    rhs = (ndim - 1, ndim - 2) + tuple(range(ndim - 2))
    return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def conv(scope: Scope, inputs: Any, features: int, kernel_size: Sequence[int],
         strides: Sequence[int] | None = None, padding: Any = "SAME",
         input_dilation: Sequence[int] | None = None,
         kernel_dilation: Sequence[int] | None = None, feature_group_count: int = 1,
         bias: bool = True, dtype: Any = jnp.float32, precision: Any = None,
         kernel_init: Callable[..., Any] = default_kernel_init,
         bias_init: Callable[..., Any] = zeros) -> Any:
    """N-d convolution of (batch, *spatial, in_features) ``inputs``.

    Params: ``kernel`` of shape (*kernel_size, in_features // feature_group_count, features)
    and ``bias`` of shape (features,). ``padding`` is ``'SAME'``, ``'VALID'`` or per-dimension
    (low, high) pairs; ``input_dilation`` / ``kernel_dilation`` are ``lax``'s lhs / rhs
    dilations. ``in_features`` must be divisible by ``feature_group_count``.
    """
    inputs = jnp.asarray(inputs, dtype)
    if strides is None:
        strides = (1,) * (inputs.ndim - 2)
    in_features = inputs.shape[-1]
    if in_features % feature_group_count:
        raise ValueError(f"conv: {in_features} input features are not divisible by "
                         f"feature_group_count={feature_group_count}.")
    kernel_shape = tuple(kernel_size) + (in_features // feature_group_count, features)
    kernel = jnp.asarray(scope.param("kernel", kernel_init, kernel_shape), dtype)
    y = lax.conv_general_dilated(
        inputs, kernel, tuple(strides), padding, lhs_dilation=input_dilation,
        rhs_dilation=kernel_dilation, dimension_numbers=_conv_dims(inputs.ndim),
        feature_group_count=feature_group_count, precision=precision)
    if bias:
        y = _add_bias(scope, y, features, bias_init, dtype)
    return y


def conv_transpose(scope: Scope, inputs: Any, features: int, kernel_size: Sequence[int],
                   strides: Sequence[int] | None = None, padding: Any = "SAME",
                   kernel_dilation: Sequence[int] | None = None, bias: bool = True,
                   dtype: Any = jnp.float32, precision: Any = None,
                   kernel_init: Callable[..., Any] = default_kernel_init,
                   bias_init: Callable[..., Any] = zeros) -> Any:
    """Transposed convolution of (batch, *spatial, in_features) ``inputs``, as
    ``jax.lax.conv_transpose`` computes it (no kernel flip).

    Params: ``kernel`` of shape (*kernel_size, in_features, features) and ``bias`` of shape
    (features,). Empty or missing ``strides`` mean stride 1 everywhere.
    """
    inputs = jnp.asarray(inputs, dtype)
    strides = tuple(strides) if strides else (1,) * (inputs.ndim - 2)
    kernel_shape = tuple(kernel_size) + (inputs.shape[-1], features)
    kernel = jnp.asarray(scope.param("kernel", kernel_init, kernel_shape), dtype)
    y = lax.conv_transpose(inputs, kernel, strides, padding, rhs_dilation=kernel_dilation,
                           precision=precision)
    if bias:
        y = _add_bias(scope, y, features, bias_init, dtype)
    return y


@struct.dataclass
class Embedding:
    """A lookup table (a pytree): ``lookup(ids)`` gathers rows, ``attend(q)`` is
    ``q @ table.T`` (logits over the ``num_embeddings`` rows)."""

    table: Any

    def lookup(self, indices: Any) -> Any:
        """Rows of ``table`` for integer ``indices``: shape ``indices.shape + (features,)``.

        Raises ``ValueError`` for non-integer indices.
        """
        if jnp.asarray(indices).dtype not in (jnp.int32, jnp.int64, jnp.uint32, jnp.uint64):
            raise ValueError("Embedding.lookup: indices must be an integer or unsigned integer "
                             f"array, got dtype {jnp.asarray(indices).dtype}.")
        return self.table[indices]

    def attend(self, query: Any) -> Any:
        """Inner products of ``query`` (last axis = features) with every row of the table."""
        return jnp.dot(query, self.table.T)


def embedding(scope: Scope, num_embeddings: int, features: int,
              init_fn: Callable[..., Any] = default_embed_init) -> Embedding:
    """An :class:`Embedding` with a ``table`` param of (num_embeddings, features), drawn by
    default from ``variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)``."""
    return Embedding(scope.param("table", init_fn, (num_embeddings, features)))
