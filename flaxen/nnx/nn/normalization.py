"""NNX normalization layers: ``BatchNorm`` (running statistics), ``LayerNorm``, ``RMSNorm``.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> bn = nnx.BatchNorm(3, rngs=nnx.Rngs(0))
>>> y = bn(jnp.arange(6.0).reshape(2, 3))      # training: updates mean/var
>>> [round(v, 3) for v in bn.mean.value.tolist()]
[0.015, 0.025, 0.035]
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.nnx.module import Module
from flaxen.nnx.nn._linen import canonicalize_dtype, initializers
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variables import BatchStat, Param

Array = jax.Array
Initializer = tp.Callable[..., Array]


def _canon_axes(ndim: int, axes: int | tp.Sequence[int]) -> tuple[int, ...]:
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(sorted({a % ndim for a in axes}))


def _compute_stats(x: Array, axes: tuple[int, ...], dtype: tp.Any, axis_name: tp.Any,
                   axis_index_groups: tp.Any, use_mean: bool = True,
                   use_fast_variance: bool = True) -> tuple[Array, Array]:
    # statistics in at least float32, even for half-precision inputs
    dtype = jnp.promote_types(dtype or x.dtype, jnp.float32)
    x = jnp.asarray(x, dtype)

    def pmean(v: Array) -> Array:
        if axis_name is None:
            return v
        return lax.pmean(v, axis_name, axis_index_groups=axis_index_groups)

    if use_mean and use_fast_variance:
        mean = pmean(jnp.mean(x, axes))
        mean2 = pmean(jnp.mean(lax.square(x), axes))
        var = jnp.maximum(0.0, mean2 - lax.square(mean))
    elif use_mean:
        mean = pmean(jnp.mean(x, axes))
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
        var = pmean(jnp.mean(lax.square(x - jnp.reshape(mean, shape)), axes))
    else:
        mean = jnp.zeros((), dtype)
        var = pmean(jnp.mean(lax.square(x), axes))
    return mean, var


def _normalize(x: Array, mean: Array, var: Array, scale: Array | None, bias: Array | None,
               reduction_axes: tuple[int, ...], feature_axes: tuple[int, ...], dtype: tp.Any,
               epsilon: float) -> Array:
    stats_shape = [1 if i in reduction_axes else d for i, d in enumerate(x.shape)]
    feature_shape = [x.shape[i] if i in feature_axes else 1 for i in range(x.ndim)]
    mean = jnp.reshape(mean, stats_shape) if jnp.ndim(mean) else mean  # RMSNorm: scalar 0
    var = jnp.reshape(var, stats_shape)
    y = x - mean
    mul = lax.rsqrt(var + epsilon)
    if scale is not None:
        mul = mul * jnp.reshape(scale, feature_shape)
    y = y * mul
    if bias is not None:
        y = y + jnp.reshape(bias, feature_shape)
    return jnp.asarray(y, canonicalize_dtype(x, scale, bias, dtype=dtype))


class BatchNorm(Module):
    """Normalizes over all axes but ``axis`` with batch statistics, tracked as BatchStats."""

    def __init__(
        self,
        num_features: int,
        *,
        use_running_average: bool = False,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-5,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros_init(),
        scale_init: Initializer = initializers.ones_init(),
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        rngs: Rngs,
    ) -> None:
        shape = (num_features,)
        self.mean = BatchStat(jnp.zeros(shape, jnp.float32))
        self.var = BatchStat(jnp.ones(shape, jnp.float32))
        self.scale = Param(scale_init(rngs.params(), shape, param_dtype)) if use_scale else None
        self.bias = Param(bias_init(rngs.params(), shape, param_dtype)) if use_bias else None
        self.num_features = num_features
        self.use_running_average = use_running_average
        self.axis = axis
        self.momentum = momentum
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.bias_init = bias_init
        self.scale_init = scale_init
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance

    def __call__(self, x: Array, use_running_average: bool | None = None, *,
                 mask: Array | None = None) -> Array:
        use_ra = self.use_running_average if use_running_average is None else use_running_average
        feature_axes = _canon_axes(x.ndim, self.axis)
        reduction_axes = tuple(i for i in range(x.ndim) if i not in feature_axes)
        if use_ra:
            mean, var = self.mean.value, self.var.value
        else:
            mean, var = _compute_stats(x, reduction_axes, self.dtype, self.axis_name,
                                       self.axis_index_groups,
                                       use_fast_variance=self.use_fast_variance)
            m = self.momentum
            self.mean.value = m * self.mean.value + (1 - m) * mean
            self.var.value = m * self.var.value + (1 - m) * var
        return _normalize(
            x, mean, var,
            self.scale.value if self.scale is not None else None,
            self.bias.value if self.bias is not None else None,
            reduction_axes, feature_axes, self.dtype, self.epsilon,
        )


class LayerNorm(Module):
    """Normalizes each example over ``reduction_axes``; learned scale/bias on ``feature_axes``."""

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros_init(),
        scale_init: Initializer = initializers.ones_init(),
        reduction_axes: int | tp.Sequence[int] = -1,
        feature_axes: int | tp.Sequence[int] = -1,
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        rngs: Rngs,
    ) -> None:
        shape = (num_features,)
        self.scale = Param(scale_init(rngs.params(), shape, param_dtype)) if use_scale else None
        self.bias = Param(bias_init(rngs.params(), shape, param_dtype)) if use_bias else None
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.bias_init = bias_init
        self.scale_init = scale_init
        self.reduction_axes = reduction_axes
        self.feature_axes = feature_axes
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        reduction_axes = _canon_axes(x.ndim, self.reduction_axes)
        feature_axes = _canon_axes(x.ndim, self.feature_axes)
        mean, var = _compute_stats(x, reduction_axes, self.dtype, self.axis_name,
                                   self.axis_index_groups,
                                   use_fast_variance=self.use_fast_variance)
        return _normalize(
            x, mean, var,
            self.scale.value if self.scale is not None else None,
            self.bias.value if self.bias is not None else None,
            reduction_axes, feature_axes, self.dtype, self.epsilon,
        )


class RMSNorm(Module):
    """Scales each example by the root mean square over ``reduction_axes`` (no centering)."""

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        use_scale: bool = True,
        scale_init: Initializer = initializers.ones_init(),
        reduction_axes: int | tp.Sequence[int] = -1,
        feature_axes: int | tp.Sequence[int] = -1,
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        rngs: Rngs,
    ) -> None:
        shape = (num_features,)
        self.scale = Param(scale_init(rngs.params(), shape, param_dtype)) if use_scale else None
        self.num_features = num_features
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_scale = use_scale
        self.scale_init = scale_init
        self.reduction_axes = reduction_axes
        self.feature_axes = feature_axes
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        reduction_axes = _canon_axes(x.ndim, self.reduction_axes)
        feature_axes = _canon_axes(x.ndim, self.feature_axes)
        mean, var = _compute_stats(x, reduction_axes, self.dtype, self.axis_name,
                                   self.axis_index_groups, use_mean=False)
        return _normalize(
            x, mean, var, self.scale.value if self.scale is not None else None, None,
            reduction_axes, feature_axes, self.dtype, self.epsilon,
        )
