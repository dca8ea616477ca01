"""Functional normalisation layers on Scopes: ``batch_norm``, ``layer_norm``, ``group_norm``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flaxen.core.scope import Scope


def _affine(scope: Scope, y: Any, features: Any, bias: bool, scale: bool) -> Any:
    if scale:
        y = y * scope.param("scale", jax.nn.initializers.ones, features)
    if bias:
        y = y + scope.param("bias", jax.nn.initializers.zeros, features)
    return y


def batch_norm(scope: Scope, x: Any, use_running_average: bool = False, axis: int = -1,
               momentum: float = 0.99, epsilon: float = 1e-5, bias: bool = True,
               scale: bool = True, axis_name: str | None = None) -> Any:
    """Normalises over all axes but ``axis``; running stats live in ``batch_stats``."""
    axis = axis % x.ndim
    reduce_axes = tuple(i for i in range(x.ndim) if i != axis)
    features = (x.shape[axis],)
    ra_mean = scope.variable("batch_stats", "mean", jnp.zeros, features)
    ra_var = scope.variable("batch_stats", "var", jnp.ones, features)
    if use_running_average:
        mean, var = ra_mean.value, ra_var.value
    else:
        mean = jnp.mean(x, reduce_axes)
        mean2 = jnp.mean(jnp.square(x), reduce_axes)
        if axis_name is not None:
            mean, mean2 = jax.lax.pmean((mean, mean2), axis_name)
        var = mean2 - jnp.square(mean)
        if not scope.is_mutable_collection("params") and ra_mean.is_mutable():
            ra_mean.value = momentum * ra_mean.value + (1 - momentum) * mean
            ra_var.value = momentum * ra_var.value + (1 - momentum) * var
    y = (x - mean) * jax.lax.rsqrt(var + epsilon)
    return _affine(scope, y, features, bias, scale)


def layer_norm(scope: Scope, x: Any, epsilon: float = 1e-6, bias: bool = True,
               scale: bool = True) -> Any:
    """Normalises over the last axis."""
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + epsilon)
    return _affine(scope, y, (x.shape[-1],), bias, scale)


def group_norm(scope: Scope, x: Any, num_groups: int = 32, epsilon: float = 1e-6,
               bias: bool = True, scale: bool = True) -> Any:
    """Normalises over groups of channels (last axis) and the spatial axes."""
    channels = x.shape[-1]
    if channels % num_groups:
        raise ValueError(
            f"group_norm: {channels} channels cannot be split into {num_groups} groups; "
            "num_groups must divide the number of channels."
        )
    g = x.reshape(x.shape[:-1] + (num_groups, channels // num_groups))
    axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
    mean = jnp.mean(g, axes, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axes, keepdims=True)
    y = ((g - mean) * jax.lax.rsqrt(var + epsilon)).reshape(x.shape)
    return _affine(scope, y, (channels,), bias, scale)
