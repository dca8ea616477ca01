"""Functional normalisation layers on Scopes: ``batch_norm``, ``layer_norm``, ``group_norm``.

Statistics are computed in one pass (``var = E[x^2] - E[x]^2``); batch and layer norm fold the
scale into the reciprocal standard deviation before it multiplies the centred input, group norm
multiplies the normalised input by the scale. This is the same order of operations as Flax's
functional layers, so results agree to the last few ulps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import lax
from jax.nn import initializers

from flaxen.core.scope import Scope

_zeros = initializers.zeros
_ones = initializers.ones


def batch_norm(scope: Scope, x: Any, use_running_average: bool = False, axis: Any = -1,
               momentum: float = 0.99, epsilon: float = 1e-5, dtype: Any = jnp.float32,
               bias: bool = True, scale: bool = True,
               bias_init: Callable[..., Any] = _zeros, scale_init: Callable[..., Any] = _ones,
               axis_name: str | None = None, axis_index_groups: Any = None,
               kind: str = "batch_stats") -> Any:
    """Normalises ``x`` (in float32) over every axis except ``axis`` (an int or a tuple).

    Running statistics ``mean`` / ``var`` live in collection ``kind`` with the feature shape
    (the kept axes, size-1 axes squeezed away). With ``use_running_average`` they are used
    instead of the batch statistics; otherwise, on every call after the one that created them,
    they move by ``(1 - momentum) * (batch_stat - running)`` -- which requires ``kind`` to be
    mutable -- so ``init`` leaves them at zeros and ones. With ``axis_name`` the batch
    statistics are averaged across that mapped axis (``axis_index_groups`` as in
    ``lax.pmean``). Params ``scale`` / ``bias`` have the feature shape. Returns ``dtype``.
    """
    x = jnp.asarray(x, jnp.float32)
    axes = axis if isinstance(axis, tuple) else (axis,)
    axes = tuple(a % x.ndim for a in axes)
    reduce_axes = tuple(i for i in range(x.ndim) if i not in axes)

    def stat(v: Any) -> Any:
        m = jnp.mean(v, reduce_axes, keepdims=True)
        if axis_name is not None:
            m = lax.pmean(m, axis_name=axis_name, axis_index_groups=axis_index_groups)
        return m

    mean = stat(x)
    var = stat(jnp.square(x)) - jnp.square(mean)
    keep_shape = mean.shape
    features = jnp.squeeze(mean).shape
    creating = not scope.has_variable(kind, "mean")
    ra_mean = scope.variable(kind, "mean", jnp.zeros, features)
    ra_var = scope.variable(kind, "var", jnp.ones, features)
    if use_running_average:
        mean = ra_mean.value.reshape(keep_shape)
        var = ra_var.value.reshape(keep_shape)
    elif not creating:
        step = 1.0 - momentum
        ra_mean.value += step * (jnp.squeeze(mean) - ra_mean.value)
        ra_var.value += step * (jnp.squeeze(var) - ra_var.value)
    y = x - mean
    mul = lax.rsqrt(var + epsilon)
    if scale:
        mul = mul * scope.param("scale", scale_init, features).reshape(keep_shape)
    y = y * mul
    if bias:
        y = y + scope.param("bias", bias_init, features).reshape(keep_shape)
    return jnp.asarray(y, dtype)


def layer_norm(scope: Scope, x: Any, epsilon: float = 1e-6, dtype: Any = jnp.float32,
               bias: bool = True, scale: bool = True,
               bias_init: Callable[..., Any] = _zeros,
               scale_init: Callable[..., Any] = _ones) -> Any:
    """Normalises ``x`` over its last axis, each example independently.

    Params ``scale`` / ``bias`` have shape (features,) and are cast to ``dtype``; ``x`` itself
    is not cast, so the result has the promoted dtype of ``x`` and the params.
    """
    features = x.shape[-1]
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(lax.square(x), axis=-1, keepdims=True) - lax.square(mean)
    mul = lax.rsqrt(var + epsilon)
    if scale:
        mul = mul * jnp.asarray(scope.param("scale", scale_init, (features,)), dtype)
    y = (x - mean) * mul
    if bias:
        y = y + jnp.asarray(scope.param("bias", bias_init, (features,)), dtype)
    return y


def group_norm(scope: Scope, x: Any, num_groups: int | None = 32,
               group_size: int | None = None, epsilon: float = 1e-6, dtype: Any = jnp.float32,
               bias: bool = True, scale: bool = True,
               bias_init: Callable[..., Any] = _zeros,
               scale_init: Callable[..., Any] = _ones) -> Any:
    """Normalises (batch, ..., channels) ``x`` (in float32) over the non-batch axes within
    groups of channels, independently per example.

    Give exactly one of ``num_groups`` and ``group_size`` (channels per group); otherwise, or
    when the channels do not split evenly, ``ValueError``. Params ``scale`` / ``bias`` have
    shape (1, ..., 1, channels) (rank of ``x``). Returns ``dtype``.
    """
    x = jnp.asarray(x, jnp.float32)
    channels = x.shape[-1]
    if (num_groups is None) == (group_size is None):
        raise ValueError(
            "group_norm: give exactly one of num_groups and group_size "
            f"(got num_groups={num_groups}, group_size={group_size})."
        )
    if group_size is not None:
        if channels % group_size:
            raise ValueError(
                f"group_norm: {channels} channels are not a multiple of group_size={group_size}."
            )
        num_groups = channels // group_size
    if channels % num_groups:
        raise ValueError(
            f"group_norm: {channels} channels cannot be split into {num_groups} groups; "
            "num_groups must divide the number of channels."
        )
    shape = x.shape
    g = x.reshape(shape[:-1] + (num_groups, channels // num_groups))
    axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
    mean = jnp.mean(g, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(g), axis=axes, keepdims=True) - jnp.square(mean)
    y = ((g - mean) * lax.rsqrt(var + epsilon)).reshape(shape)
    param_shape = (1,) * (len(shape) - 1) + (channels,)
    if scale:
        y = y * scope.param("scale", scale_init, param_shape)
    if bias:
        y = y + scope.param("bias", bias_init, param_shape)
    return y.astype(dtype)
