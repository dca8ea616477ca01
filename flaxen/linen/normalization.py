"""Normalisation layers: BatchNorm, LayerNorm, RMSNorm, GroupNorm, InstanceNorm (and the
wrapper layers SpectralNorm and WeightNorm, see below).

Statistics are computed in at least float32 (``force_float32_reductions``), optionally
across devices (``axis_name``/``axis_index_groups``, as inside ``jax.pmap`` or
``shard_map``), optionally only where ``mask`` is True. Learned ``scale`` (created first)
and ``bias`` live in ``params``; BatchNorm keeps running ``mean``/``var`` in the
``batch_stats`` collection and does not update them while initialising.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> bn = nn.BatchNorm(use_running_average=False)
>>> variables = bn.init(jax.random.key(0), jnp.ones((4, 3)))
>>> y, updates = bn.apply(variables, jnp.arange(12.0).reshape(4, 3), mutable=['batch_stats'])
>>> updates['batch_stats']['mean'].shape
(3,)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flaxen.linen import initializers
from flaxen.linen._norm_math import Axes, abs_sq, canonicalize_axes, compute_stats, normalize
from flaxen.linen.module import Module, compact, merge_param

Array = jax.Array
Dtype = Any
Initializer = initializers.Initializer
PRNGKey = jax.Array
Shape = tuple[int, ...]

def _check_mask(layer: str, x: Array, mask: Array | None) -> None:
    if mask is None:
        return
    try:
        ok = np.broadcast_shapes(np.shape(mask), x.shape) == x.shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{layer}: mask of shape {np.shape(mask)} does not broadcast to the inputs' "
            f"shape {x.shape}. Pass a boolean mask of shape {x.shape} (or one that "
            "broadcasts to it) marking the entries to include in the statistics."
        )


__all__ = [
    "BatchNorm",
    "GroupNorm",
    "InstanceNorm",
    "LayerNorm",
    "RMSNorm",
]


class BatchNorm(Module):
    """Normalises over the batch (every axis except ``axis``) with running averages.

    Attributes:
      use_running_average: use the stored ``batch_stats`` instead of the batch's own
        statistics; set it here or pass it to ``__call__`` (exactly one of the two).
      axis: the feature axis or axes (default -1); parameters and statistics have their
        shape.
      momentum: running average decay, ``new = momentum * old + (1 - momentum) * batch``.
      epsilon: added to the variance (default 1e-5).
      dtype: output dtype (``None``: promote input and parameters).
      param_dtype: dtype of ``scale`` and ``bias``.
      use_bias, use_scale: learn a shift / a scale (the scale can be skipped when the next
        layer is linear).
      bias_init, scale_init: their initializers (zeros, ones).
      axis_name, axis_index_groups: average statistics over this mapped axis (and device
        groups) so that all devices normalise with the same numbers.
      use_fast_variance: ``E[x^2] - E[x]^2`` (one pass) instead of ``E[(x - E[x])^2]``.
      force_float32_reductions: compute statistics in at least float32.

    Train with ``mutable=['batch_stats']`` and evaluate with ``use_running_average=True``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> v = nn.BatchNorm(use_running_average=True).init(jax.random.key(0), jnp.ones((2, 3)))
    >>> sorted(v), sorted(v['batch_stats'])
    (['batch_stats', 'params'], ['mean', 'var'])
    """

    use_running_average: bool | None = None
    axis: int = -1
    momentum: float = 0.99
    epsilon: float = 1e-5
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(
        self, x: Array, use_running_average: bool | None = None, *, mask: Array | None = None
    ) -> Array:
        """Normalises ``x``; ``mask`` (broadcastable to ``x``) limits the statistics."""
        use_running_average = merge_param(
            "use_running_average", self.use_running_average, use_running_average
        )
        _check_mask("BatchNorm", x, mask)
        feature_axes = canonicalize_axes(x.ndim, self.axis, "BatchNorm", "axis")
        reduction_axes = tuple(i for i in range(x.ndim) if i not in feature_axes)
        feature_shape = tuple(x.shape[ax] for ax in feature_axes)

        ra_mean = self.variable(
            "batch_stats", "mean", lambda s: jnp.zeros(s, jnp.float32), feature_shape
        )
        ra_var = self.variable("batch_stats", "var", lambda s: jnp.ones(s, jnp.float32),
                               feature_shape)

        if use_running_average:
            mean, var = ra_mean.value, ra_var.value
        else:
            initializing = self.is_initializing()
            mean, var = compute_stats(
                x,
                reduction_axes,
                dtype=self.dtype,
                # While initialising there may be no mapped axis to average over yet.
                axis_name=None if initializing else self.axis_name,
                axis_index_groups=self.axis_index_groups,
                use_fast_variance=self.use_fast_variance,
                mask=mask,
                force_float32_reductions=self.force_float32_reductions,
            )
            if not initializing:
                ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
                ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * var

        return normalize(
            self, x, mean, var, reduction_axes, feature_axes, self.dtype, self.param_dtype,
            self.epsilon, self.use_bias, self.use_scale, self.bias_init, self.scale_init,
        )


class LayerNorm(Module):
    """Normalises each example over ``reduction_axes`` (default: the last axis).

    Attributes:
      epsilon: added to the variance (default 1e-6).
      dtype, param_dtype, use_bias, use_scale, bias_init, scale_init: as in BatchNorm.
      reduction_axes: axes the statistics are taken over.
      feature_axes: axes the learned ``scale``/``bias`` have (default -1).
      axis_name, axis_index_groups: needed only when the reduced axes are split across
        devices.
      use_fast_variance, force_float32_reductions: as in BatchNorm.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> y, _ = nn.LayerNorm().init_with_output(jax.random.key(0), jnp.array([[1.0, 3.0]]))
    >>> [round(v, 3) for v in y[0].tolist()]
    [-1.0, 1.0]
    """

    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    reduction_axes: Axes = -1
    feature_axes: Axes = -1
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalises ``x``; ``mask`` limits which entries enter the statistics."""
        _check_mask("LayerNorm", x, mask)
        canonicalize_axes(x.ndim, self.reduction_axes, "LayerNorm", "reduction_axes")
        canonicalize_axes(x.ndim, self.feature_axes, "LayerNorm", "feature_axes")
        mean, var = compute_stats(
            x, self.reduction_axes, self.dtype, self.axis_name, self.axis_index_groups,
            use_fast_variance=self.use_fast_variance, mask=mask,
            force_float32_reductions=self.force_float32_reductions,
        )
        return normalize(
            self, x, mean, var, self.reduction_axes, self.feature_axes, self.dtype,
            self.param_dtype, self.epsilon, self.use_bias, self.use_scale, self.bias_init,
            self.scale_init,
        )


class RMSNorm(Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x^2) + eps) * scale`` (no centring,
    no bias).

    Attributes are LayerNorm's, without ``use_bias``/``bias_init``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> y, v = nn.RMSNorm().init_with_output(jax.random.key(0), jnp.array([[3.0, 4.0]]))
    >>> sorted(v['params']), [round(a, 3) for a in y[0].tolist()]
    (['scale'], [0.849, 1.131])
    """

    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_scale: bool = True
    scale_init: Initializer = initializers.ones
    reduction_axes: Axes = -1
    feature_axes: Axes = -1
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalises ``x`` by its root mean square over ``reduction_axes``."""
        _check_mask("RMSNorm", x, mask)
        canonicalize_axes(x.ndim, self.reduction_axes, "RMSNorm", "reduction_axes")
        mean, var = compute_stats(
            x, self.reduction_axes, self.dtype, self.axis_name, self.axis_index_groups,
            use_mean=False, use_fast_variance=self.use_fast_variance, mask=mask,
            force_float32_reductions=self.force_float32_reductions,
        )
        return normalize(
            self, x, mean, var, self.reduction_axes, self.feature_axes, self.dtype,
            self.param_dtype, self.epsilon, False, self.use_scale, None, self.scale_init,
        )


class GroupNorm(Module):
    """Normalises over groups of channels (and the other non-batch axes) per example.

    Give either ``num_groups`` (default 32) or ``group_size`` (then pass
    ``num_groups=None``); the channel count (last axis) must split evenly.

    Attributes:
      num_groups, group_size: how the channels are grouped.
      epsilon: added to the variance (default 1e-6).
      dtype, param_dtype, use_bias, use_scale, bias_init, scale_init: as in BatchNorm.
      reduction_axes: axes of the statistics; must include the last (channel) axis.
        Default: every axis but the first (the batch).
      axis_name, axis_index_groups, use_fast_variance, force_float32_reductions: as in
        BatchNorm.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> v = nn.GroupNorm(num_groups=2).init(jax.random.key(0), jnp.ones((1, 3, 4)))
    >>> v['params']['scale'].shape
    (4,)
    """

    num_groups: int | None = 32
    group_size: int | None = None
    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    reduction_axes: Axes | None = None
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalises ``x`` of shape ``(batch, ..., channels)``."""
        _check_mask("GroupNorm", x, mask)
        if (self.num_groups is None) == (self.group_size is None):
            raise ValueError(
                "Either `num_groups` or `group_size` should be specified. If "
                "`group_size` is to be specified, pass `num_groups=None` as argument to "
                "override the default `num_groups` value of 32. GroupNorm got "
                f"num_groups={self.num_groups}, group_size={self.group_size}."
            )
        channels = x.shape[-1]
        if self.group_size is not None:
            if channels % self.group_size != 0:
                raise ValueError(
                    f"Number of channels ({channels}) is not multiple of the group size "
                    f"({self.group_size}). GroupNorm needs the last axis of inputs "
                    f"{x.shape} to split into groups of {self.group_size}."
                )
            num_groups = channels // self.group_size
        else:
            assert self.num_groups is not None  # exactly one of the two is set (checked above)
            num_groups = self.num_groups
        if num_groups <= 0 or channels % num_groups != 0:
            raise ValueError(
                f"Number of groups ({num_groups}) does not divide the number of channels "
                f"({channels}). Choose num_groups among the divisors of {channels}, or set "
                "group_size instead."
            )
        group_size = channels // num_groups

        if self.reduction_axes is not None:
            reduction_axes = self.reduction_axes
        else:
            reduction_axes = list(range(1, x.ndim - 1)) + [-1]
        reduction_axes = canonicalize_axes(x.ndim, reduction_axes, "GroupNorm", "reduction_axes")
        if x.ndim - 1 not in reduction_axes:
            raise ValueError(
                "The reduction axes must include the final dimension as this is assumed to "
                f"be the feature axis. GroupNorm got reduction_axes={self.reduction_axes} "
                f"for inputs of shape {x.shape}; add -1."
            )
        other_axes = tuple(ax for ax in reduction_axes if ax != x.ndim - 1)

        group_shape = x.shape[:-1] + (num_groups, group_size)
        if mask is not None:
            mask = jnp.reshape(mask, mask.shape[:-1] + (num_groups, group_size))
        mean, var = compute_stats(
            jnp.reshape(x, group_shape),
            other_axes + (x.ndim,),
            self.dtype,
            self.axis_name,
            self.axis_index_groups,
            use_fast_variance=self.use_fast_variance,
            mask=mask,
            force_float32_reductions=self.force_float32_reductions,
        )

        def per_channel(stat: Array) -> Array:
            # (..., groups) -> (..., channels): every channel gets its group's statistic.
            spread = jnp.broadcast_to(stat[..., None], stat.shape + (group_size,))
            return jnp.reshape(spread, stat.shape[:-1] + (channels,))

        return normalize(
            self, x, per_channel(mean), per_channel(var), other_axes, -1, self.dtype,
            self.param_dtype, self.epsilon, self.use_bias, self.use_scale, self.bias_init,
            self.scale_init,
        )


class InstanceNorm(Module):
    """Normalises each example and each feature over the remaining (spatial) axes.

    Attributes:
      epsilon, dtype, param_dtype, use_bias, use_scale, bias_init, scale_init: as in
        LayerNorm.
      feature_axes: the axes kept out of the statistics (default -1); the first axis is the
        batch and may not be one of them.
      axis_name, axis_index_groups, use_fast_variance, force_float32_reductions: as in
        BatchNorm.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> y, _ = nn.InstanceNorm().init_with_output(jax.random.key(0), jnp.ones((2, 5, 3)))
    >>> y.shape
    (2, 5, 3)
    """

    epsilon: float = 1e-6
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros
    scale_init: Initializer = initializers.ones
    feature_axes: Axes = -1
    axis_name: str | None = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalises ``x`` of shape ``(batch, ..., features)``."""
        _check_mask("InstanceNorm", x, mask)
        feature_axes = canonicalize_axes(x.ndim, self.feature_axes, "InstanceNorm", "feature_axes")
        if 0 in feature_axes:
            raise ValueError(
                "The channel axes cannot include the leading dimension as this is assumed "
                f"to be the batch axis. InstanceNorm got feature_axes={self.feature_axes} "
                f"for inputs of shape {x.shape}."
            )
        reduction_axes = tuple(i for i in range(1, x.ndim) if i not in feature_axes)
        mean, var = compute_stats(
            x, reduction_axes, self.dtype, self.axis_name, self.axis_index_groups,
            use_fast_variance=self.use_fast_variance, mask=mask,
            force_float32_reductions=self.force_float32_reductions,
        )
        return normalize(
            self, x, mean, var, reduction_axes, feature_axes, self.dtype, self.param_dtype,
            self.epsilon, self.use_bias, self.use_scale, self.bias_init, self.scale_init,
        )


# The weight re-parameterising wrappers use lifted transforms; they live in their own file.
# field, canonicalize_dtype and map_variables: names Flax's module imports for its own use
# and code reaches for from here.
from dataclasses import field  # noqa: E402, F401

from flaxen.linen._wrapper_norms import (  # noqa: E402, F401
    SpectralNorm,
    WeightNorm,
    _l2_normalize,
)
from flaxen.linen.dtypes import canonicalize_dtype  # noqa: E402, F401
from flaxen.linen.transforms import map_variables  # noqa: E402, F401

# Flax's private helpers, used by some downstream code; same signatures.
_abs_sq = abs_sq
_canonicalize_axes = canonicalize_axes
_compute_stats = compute_stats
_normalize = normalize

__all__ += ["SpectralNorm", "WeightNorm"]

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen.linen import dtypes, module, transforms  # noqa: E402, F401
