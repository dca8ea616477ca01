"""Functional attention on Scopes: ``dot_product_attention`` and
``multi_head_dot_product_attention`` (with masks and an autoregressive ``cache``).

Arrays are laid out (batch, *attention_axes, heads, depth); ``axis`` names the attention axes,
by default every axis between the batch axis and the last two.

>>> import jax, jax.numpy as jnp
>>> from flaxen.core import init
>>> x = jnp.ones((1, 3, 4))
>>> y, v = init(multi_head_dot_product_attention)(jax.random.PRNGKey(0), x, x, num_heads=2)
>>> y.shape, sorted(v['params'])
((1, 3, 4), ['key', 'out', 'query', 'value'])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from flaxen import struct
from flaxen.core.nn.linear import default_kernel_init, dense_general
from flaxen.core.scope import Scope

_zeros = jax.nn.initializers.zeros


def _check_attention_axes(axes: tuple, ndim: int) -> None:
    for ax in axes:
        if not (ndim >= 3 and 1 <= ax < ndim - 2):
            raise ValueError(
                f"Attention axis {ax} must be between the batch axis and the last-two axes "
                f"(1 <= axis < {ndim - 2} for rank-{ndim} inputs)."
            )


def _inverse_permutation(perm: tuple) -> tuple:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def dot_product_attention(scope: Scope, query: Any, key: Any, value: Any,
                          dtype: Any = jnp.float32, bias: Any = None, axis: Any = None,
                          broadcast_dropout: bool = True, dropout_rng: Any = None,
                          dropout_rate: float = 0.0, deterministic: bool = False,
                          precision: Any = None) -> Any:
    """``softmax(q k^T / sqrt(depth) + bias) v`` over the attention ``axis`` axes.

    ``query``/``key``/``value`` are (batch, *axes, heads, depth) with the same rank; ``bias``
    broadcasts against the weights (batch, heads, *q_axes, *kv_axes). Unless
    ``deterministic`` or ``dropout_rate == 0``, the weights are dropped out with
    ``dropout_rng`` (default ``scope.make_rng('dropout')``), one mask shared over the batch
    and head axes when ``broadcast_dropout``. Returns (batch, *axes, heads, value_depth).
    """
    if key.shape[:-1] != value.shape[:-1]:
        raise ValueError(f"dot_product_attention: key {key.shape} and value {value.shape} "
                         "must agree on every axis but the last.")
    if query.shape[:1] != key.shape[:1] or query.shape[-1] != key.shape[-1]:
        raise ValueError(f"dot_product_attention: query {query.shape} and key {key.shape} "
                         "must agree on the batch axis and the depth.")
    if not (query.ndim == key.ndim == value.ndim):
        raise ValueError("dot_product_attention: query, key and value must have one rank.")
    n = key.ndim
    if axis is None:
        axis = tuple(range(1, n - 2))
    axis = tuple(axis) if isinstance(axis, Iterable) else (axis,)
    _check_attention_axes(axis, n)
    depth = query.shape[-1]
    batch_dims = tuple(i for i in range(n) if i not in axis + (n - 1,))
    qk_perm = batch_dims + axis + (n - 1,)
    query = query.transpose(qk_perm)
    key = key.transpose(qk_perm)
    value = value.transpose(batch_dims + (n - 1,) + axis)
    query = query / jnp.sqrt(depth).astype(dtype)
    bt = tuple(range(len(batch_dims)))
    weights = lax.dot_general(query, key, (((n - 1,), (n - 1,)), (bt, bt)),
                              precision=precision)
    if bias is not None:
        weights = weights + bias
    norm_dims = tuple(range(weights.ndim - len(axis), weights.ndim))
    weights = lax.exp(
        weights - jax.scipy.special.logsumexp(weights, axis=norm_dims, keepdims=True))
    weights = weights.astype(dtype)
    if not deterministic and dropout_rate > 0.0:
        if dropout_rng is None:
            dropout_rng = scope.make_rng("dropout")
        keep_prob = 1.0 - dropout_rate
        if broadcast_dropout:
            mask_shape = (1,) * len(bt) + weights.shape[-2 * len(axis):]
        else:
            mask_shape = weights.shape
        keep = random.bernoulli(dropout_rng, keep_prob, mask_shape)
        weights = weights * (keep.astype(weights.dtype) / jnp.asarray(keep_prob, dtype=dtype))
    v_dims = tuple(range(value.ndim - len(axis), value.ndim))
    y = lax.dot_general(weights, value, ((norm_dims, v_dims), (bt, bt)), precision=precision)
    return y.transpose(_inverse_permutation(qk_perm))


class CacheEntry(struct.PyTreeNode):
    """Decoding state in collection ``'cache'``: keys and values so far and the step ``i``."""

    key: Any
    value: Any
    i: Any


def make_padding_mask(padding_mask_query: Any, padding_mask_key: Any, query_shape: Any,
                      key_shape: Any, attention_axis: Any = None,
                      segmentation_mask: bool = False) -> Any:
    """A float32 (batch, 1, *q_axes, *kv_axes) mask: the outer product of the query and key
    padding masks, or -- with ``segmentation_mask`` -- their pairwise equality."""
    if query_shape[0] != key_shape[0] or len(query_shape) != len(key_shape):
        raise ValueError(f"make_padding_mask: query shape {query_shape} and key shape "
                         f"{key_shape} must have one rank and one batch size.")
    ndim = len(key_shape)
    if attention_axis is None:
        attention_axis = tuple(range(1, ndim - 2))
    attention_axis = tuple(attention_axis)
    _check_attention_axes(attention_axis, ndim)
    final_shape = ((query_shape[0], 1) + tuple(query_shape[a] for a in attention_axis)
                   + tuple(key_shape[a] for a in attention_axis))
    q = padding_mask_query[..., None]
    k = padding_mask_key[..., None]
    k = k.transpose((0,) + tuple(range(k.ndim - 1, 0, -1)))
    mask = jnp.equal(q, k) if segmentation_mask else jnp.multiply(q, k)
    return lax.convert_element_type(mask.reshape(final_shape), jnp.float32)


def _make_causal_mask(key: Any, attention_axis: Any = None, self_mask: bool = False) -> Any:
    """A boolean mask (1, ..., 1, *axes, *axes) letting position t attend to positions <= t
    of the flattened attention axes (< t with ``self_mask``)."""
    if attention_axis is None:
        attention_axis = tuple(range(1, key.ndim - 2))
    attention_axis = tuple(attention_axis)
    _check_attention_axes(attention_axis, key.ndim)
    lead = (1,) * (key.ndim - len(attention_axis) - 1)
    attn_shape = tuple(key.shape[a] for a in attention_axis)
    size = int(np.prod(attn_shape))
    rows = lax.broadcast_in_dim(jnp.arange(size, dtype=jnp.int32), (size, size), (0,))
    cols = lax.broadcast(jnp.arange(size, dtype=jnp.int32), [size])
    mask = lax.ge(rows + (-1 if self_mask else 0), cols)
    return mask.reshape(lead + attn_shape + attn_shape)


def multi_head_dot_product_attention(
    scope: Scope, inputs_q: Any, inputs_kv: Any, num_heads: int, dtype: Any = jnp.float32,
    qkv_features: int | None = None, out_features: int | None = None,
    attention_axis: Any = None, causal_mask: bool = False, padding_mask: Any = None,
    key_padding_mask: Any = None, segmentation: Any = None, key_segmentation: Any = None,
    cache: bool = False, broadcast_dropout: bool = True, dropout_rng: Any = None,
    dropout_rate: float = 0.0, deterministic: bool = False, precision: Any = None,
    kernel_init: Callable[..., Any] = default_kernel_init,
    bias_init: Callable[..., Any] = _zeros, bias: bool = True,
    attention_fn: Callable[..., Any] = dot_product_attention,
) -> Any:
    """Multi-head attention of ``inputs_q`` over ``inputs_kv`` (``None``: self-attention).

    Child scopes ``query``/``key``/``value`` project (batch, *axes, features) inputs to
    (num_heads, qkv_features // num_heads) with :func:`dense_general`; ``attention_fn`` (a
    child scope) attends over ``attention_axis``; ``out`` projects the heads back to
    ``out_features`` (default: the query features). ``causal_mask``, ``padding_mask`` /
    ``key_padding_mask`` and ``segmentation`` / ``key_segmentation`` combine into one additive
    bias (0 or -1e10). With ``cache`` (causal attention only) the first call creates a
    ``cache/entry`` initialiser taking the (batch, *axes) shape; later calls feed one step at a
    time, appending keys/values to the :class:`CacheEntry`.
    """
    if cache and not causal_mask:
        raise ValueError("multi_head_dot_product_attention: caching is only supported for "
                         "causal attention (causal_mask=True).")
    if inputs_kv is None:
        inputs_kv = inputs_q
    if attention_axis is None:
        attention_axis = tuple(range(1, inputs_q.ndim - 1))
    attention_axis = tuple(attention_axis)
    features = out_features or inputs_q.shape[-1]
    qkv_features = qkv_features or inputs_q.shape[-1]
    if qkv_features % num_heads:
        raise ValueError(f"multi_head_dot_product_attention: qkv_features={qkv_features} is "
                         f"not divisible by num_heads={num_heads}.")
    head_dim = qkv_features // num_heads

    def project(s: Scope, x: Any) -> Any:
        return dense_general(s, x, features=(num_heads, head_dim), axis=-1, dtype=dtype,
                             kernel_init=kernel_init, bias_init=bias_init, bias=bias,
                             precision=precision)

    query = scope.child(project, "query")(inputs_q)
    key = scope.child(project, "key")(inputs_kv)
    value = scope.child(project, "value")(inputs_kv)

    entry: Any = None
    if cache:
        if not scope.has_variable("cache", "entry"):
            ndim, tail = key.ndim, key.shape[-2:]

            def entry_init(shape: tuple, dtype: Any = jnp.float32) -> CacheEntry:
                full = tuple(shape) + tail
                if len(full) != ndim:
                    raise ValueError("cache init: the shape must be the (batch, "
                                     "*attention_axes) shape of the full sequence.")
                return CacheEntry(key=jnp.zeros(full, dtype), value=jnp.zeros(full, dtype),
                                  i=jnp.zeros((), jnp.uint32))

            entry = entry_init
        else:
            entry = scope.get_variable("cache", "entry")
            if not isinstance(entry, CacheEntry):
                raise ValueError("Cache is not initialized: call the cache/entry initialiser "
                                 "with the full (batch, *attention_axes) shape first.")
            cshape = entry.key.shape
            expected = list(cshape[:-2])
            for a in attention_axis:
                expected[a] = 1
            expected = tuple(expected) + inputs_q.shape[-1:]
            if expected != inputs_q.shape:
                raise ValueError(f"Invalid shape provided, expected shape {expected} instead "
                                 f"got {inputs_q.shape}.")
            indices: list[Any] = [0] * len(cshape)
            i = entry.i.astype(jnp.int32)  # dynamic_update_slice wants one index dtype
            remaining = int(np.prod([cshape[a] for a in attention_axis]))
            for a in attention_axis:
                remaining //= cshape[a]
                indices[a] = i // remaining
                i = i % remaining
            key = lax.dynamic_update_slice(entry.key, key, indices)
            value = lax.dynamic_update_slice(entry.value, value, indices)
            entry = entry.replace(i=entry.i + jnp.array(1, jnp.uint32), key=key, value=value)
            key_padding_mask = jnp.broadcast_to(jnp.arange(cshape[1]) < entry.i, cshape[:2])
            key_padding_mask = key_padding_mask.astype(jnp.float32)[..., None]
        scope.put_variable("cache", "entry", entry)

    masks = []
    if causal_mask:
        if cache and isinstance(entry, CacheEntry):
            attn_shape = tuple(key.shape[a] for a in attention_axis)
            steps = jnp.arange(int(np.prod(attn_shape)), dtype=jnp.uint32)
            masks.append((steps < entry.i).reshape((1,) * (key.ndim - 1) + attn_shape))
        else:
            masks.append(_make_causal_mask(key, attention_axis))
    if padding_mask is not None:
        if key_padding_mask is None:
            key_padding_mask = padding_mask
        masks.append(make_padding_mask(padding_mask, key_padding_mask, query.shape, key.shape,
                                       attention_axis))
    if segmentation is not None:
        if key_segmentation is None:
            key_segmentation = segmentation
        masks.append(make_padding_mask(segmentation, key_segmentation, query.shape, key.shape,
                                       attention_axis, segmentation_mask=True))
    attention_bias = None
    if masks:
        mask = masks[0]
        for m in masks[1:]:
            mask = jnp.logical_and(mask, m)
        attention_bias = lax.select(mask > 0, jnp.full(mask.shape, 0.0).astype(dtype),
                                    jnp.full(mask.shape, -1e10).astype(dtype))

    x = scope.child(attention_fn)(
        query, key, value, dtype=dtype, axis=attention_axis, bias=attention_bias,
        precision=precision, dropout_rng=dropout_rng, dropout_rate=dropout_rate,
        broadcast_dropout=broadcast_dropout, deterministic=deterministic)
    return scope.child(dense_general, name="out")(
        x, features=features, axis=(-2, -1), kernel_init=kernel_init, bias_init=bias_init,
        bias=bias, dtype=dtype, precision=precision)
