"""Functional normalisation layers on Scopes: ``batch_norm``, ``layer_norm``, ``group_norm``.

Statistics are computed in float32 in one pass (``E[x^2] - E[x]^2``) and the scale is folded
into the reciprocal standard deviation before it multiplies the centred input: the same order
of operations as Flax's functional layers, so results agree to the last few ulps.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flaxen.core.scope import Scope


def _normalize(scope: Scope, x: Any, mean: Any, var: Any, epsilon: float, features: Any,
               param_shape: tuple[int, ...], bias: bool, scale: bool) -> Any:
    mul = jax.lax.rsqrt(var + epsilon)
    if scale:
        mul = mul * scope.param("scale", jax.nn.initializers.ones, features).reshape(param_shape)
    y = (x - mean) * mul
    if bias:
        y = y + scope.param("bias", jax.nn.initializers.zeros, features).reshape(param_shape)
    return y


def batch_norm(scope: Scope, x: Any, use_running_average: bool = False, axis: int = -1,
               momentum: float = 0.99, epsilon: float = 1e-5, bias: bool = True,
               scale: bool = True, axis_name: str | None = None) -> Any:
    """Normalises over all axes but ``axis``; running stats live in ``batch_stats``.

    The running averages move only on calls after the one that created them, so ``init``
    leaves them at zeros and ones.
    """
    x = jnp.asarray(x, jnp.float32)
    axis = axis % x.ndim
    reduce_axes = tuple(i for i in range(x.ndim) if i != axis)
    features = (x.shape[axis],)
    keep_shape = tuple(x.shape[i] if i == axis else 1 for i in range(x.ndim))
    mean = jnp.mean(x, reduce_axes, keepdims=True)
    mean2 = jnp.mean(jnp.square(x), reduce_axes, keepdims=True)
    if axis_name is not None:
        mean, mean2 = jax.lax.pmean((mean, mean2), axis_name)
    var = mean2 - jnp.square(mean)
    creating = not scope.has_variable("batch_stats", "mean")
    ra_mean = scope.variable("batch_stats", "mean", jnp.zeros, features)
    ra_var = scope.variable("batch_stats", "var", jnp.ones, features)
    if use_running_average:
        mean = ra_mean.value.reshape(keep_shape)
        var = ra_var.value.reshape(keep_shape)
    elif not creating and ra_mean.is_mutable():
        ra_mean.value = momentum * ra_mean.value + (1 - momentum) * mean.reshape(features)
        ra_var.value = momentum * ra_var.value + (1 - momentum) * var.reshape(features)
    return _normalize(scope, x, mean, var, epsilon, features, keep_shape, bias, scale)


def layer_norm(scope: Scope, x: Any, epsilon: float = 1e-6, bias: bool = True,
               scale: bool = True) -> Any:
    """Normalises over the last axis."""
    features = (x.shape[-1],)
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x), -1, keepdims=True) - jnp.square(mean)
    return _normalize(scope, x, mean, var, epsilon, features, features, bias, scale)


def group_norm(scope: Scope, x: Any, num_groups: int | None = 32, epsilon: float = 1e-6,
               bias: bool = True, scale: bool = True, group_size: int | None = None) -> Any:
    """Normalises over groups of channels (last axis) and the spatial axes.

    Give exactly one of ``num_groups`` and ``group_size``.
    """
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
    x = jnp.asarray(x, jnp.float32)
    g = x.reshape(x.shape[:-1] + (num_groups, channels // num_groups))
    axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
    mean = jnp.mean(g, axes, keepdims=True)
    var = jnp.mean(jnp.square(g), axes, keepdims=True) - jnp.square(mean)
    y = ((g - mean) * jax.lax.rsqrt(var + epsilon)).reshape(x.shape)
    if scale:
        y = y * scope.param("scale", jax.nn.initializers.ones, (channels,))
    if bias:
        y = y + scope.param("bias", jax.nn.initializers.zeros, (channels,))
    return y
