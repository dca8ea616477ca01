"""NNX normalization layers (today's Flax 0.12.8 API): ``BatchNorm`` (running statistics),
``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``InstanceNorm``; the weight re-parameterising
wrappers ``WeightNorm`` and ``SpectralNorm`` live in :mod:`flaxen.nnx.nn.reparam`.

The statistics and the normalise step are :mod:`flaxen.layer_math.normalization`, the same
functions Linen's norm layers run. Each layer first passes ``(x, [running stats,] scale,
bias)`` through its ``promote_dtype`` (one tuple, today's NNX form); with
``promote_dtype=lambda t, **kw: t`` an NNX layer and a Linen layer with the same parameters
give bit-identical outputs (``mask`` and ``use_fast_variance`` included).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> bn = nnx.BatchNorm(3, rngs=nnx.Rngs(0))
>>> y = bn(jnp.arange(6.0).reshape(2, 3))      # training: updates mean/var
>>> [round(v, 3) for v in bn.mean.value.tolist()]
[0.015, 0.025, 0.035]
"""

from __future__ import annotations

import typing as tp
from types import MappingProxyType

import jax
import jax.numpy as jnp
import numpy as np

from flaxen.layer_math import initializers
from flaxen.layer_math.normalization import abs_sq, canonicalize_axes, compute_stats, normalize
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import _value, new_param
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variablelib import BatchStat
from flaxen.typing import Axes, Dtype, Initializer

Array = jax.Array
PromoteDtypeFn = tp.Callable[..., tp.Any]
_NO_META: tp.Mapping[str, tp.Any] = MappingProxyType({})

__all__ = [
    "BatchNorm", "GroupNorm", "InstanceNorm", "LayerNorm", "RMSNorm", "SpectralNorm",
    "WeightNorm",
]


def _check_mask(layer: str, x: Array, mask: Array | None) -> None:
    if mask is None:
        return
    try:
        ok = np.broadcast_shapes(np.shape(mask), x.shape) == x.shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{layer}: mask of shape {np.shape(mask)} does not broadcast to the inputs' shape "
            f"{x.shape}. Pass a boolean mask of shape {x.shape} (or one that broadcasts to it) "
            "marking the entries that count in the statistics."
        )


# constructor arguments that only build the parameters; every other one is kept as an attribute
_NOT_KEPT = frozenset(
    {"self", "rngs", "scale_init", "bias_init", "scale_metadata", "bias_metadata"}
)


def _setup(layer: Module, name: str, args: dict[str, tp.Any]) -> None:
    """Creates ``scale`` then ``bias`` (Flax's key order) of shape ``(num_features,)`` and
    keeps the other constructor arguments as attributes, in signature order.

    ``args`` is ``dict(locals())`` taken first thing in the layer's ``__init__`` (its
    parameters). A parameter turned off (``use_scale``/``use_bias`` false) is ``None`` data;
    a layer without a ``use_bias`` argument gets no ``bias`` attribute.
    """
    shape = (args["num_features"],)
    for param in ("scale", "bias"):
        if f"use_{param}" in args:
            setattr(layer, param, new_param(
                name, param, args[f"{param}_init"], args["rngs"], shape, args["param_dtype"],
                args[f"{param}_metadata"], use=args[f"use_{param}"],
            ))
    for arg, value in args.items():
        if arg not in _NOT_KEPT:
            setattr(layer, arg, value)


def _stats(layer: tp.Any, x: Array, axes: tp.Any, mask: Array | None, **kw: tp.Any
           ) -> tuple[Array, Array]:
    """``compute_stats`` over ``axes`` with the layer's dtype, axis name and variance mode."""
    return compute_stats(
        x, axes, layer.dtype, layer.axis_name, layer.axis_index_groups,
        use_fast_variance=layer.use_fast_variance, mask=mask, **kw,
    )


# Flax's private helpers ``_canonicalize_axes``, ``_compute_stats`` and ``_normalize``: user
# code writing its own norm layer (BatchRenorm, masked norms...) imports them from
# ``flax.nnx.nn.normalization`` and calls them with Flax's positional order. They are thin
# adapters over the shared math above, so a custom layer and ``nnx.BatchNorm`` agree bit for bit.


def _canonicalize_axes(rank: int, axes: Axes) -> tuple[int, ...]:
    """``axes`` (one int or several) made non-negative against ``rank`` and de-duplicated.

    The result is built from a set, as Flax's is, so the order of the returned tuple is the
    same as Flax's for every input (ascending for the small axes of a norm layer). Axes out of
    range are not checked here: the reduction that uses them raises.

    >>> _canonicalize_axes(3, (-1, 0, 2))
    (0, 2)
    """
    if not isinstance(axes, tp.Iterable):
        axes = (axes,)
    return tuple({rank + ax if ax < 0 else ax for ax in axes})


def _compute_stats(
    x: Array,
    axes: Axes,
    dtype: Dtype | None,
    axis_name: str | None = None,
    axis_index_groups: tp.Any = None,
    use_mean: bool = True,
    use_fast_variance: bool = True,
    mask: Array | None = None,
) -> tuple[Array, Array]:
    """``(mean, var)`` of ``x`` over ``axes``, reduced axes removed, in at least float32.

    ``axis_name`` averages across a ``pmap``/``shard_map`` axis; ``use_mean=False`` gives a
    zero mean and ``var = E[|x|^2]``; ``mask`` selects the entries that count.

    >>> import jax.numpy as jnp
    >>> mean, var = _compute_stats(jnp.array([[1.0, 3.0]]), -1, None)
    >>> mean.tolist(), var.tolist()
    ([2.0], [1.0])
    """
    return compute_stats(
        x, axes, dtype, axis_name, axis_index_groups,
        use_mean=use_mean, use_fast_variance=use_fast_variance, mask=mask,
    )


def _normalize(
    x: Array,
    mean: Array,
    var: Array,
    scale: Array | None,
    bias: Array | None,
    reduction_axes: Axes,
    feature_axes: Axes,
    dtype: Dtype | None,
    epsilon: float,
) -> Array:
    """``(x - mean) * rsqrt(var + epsilon) * scale + bias`` in ``dtype``.

    ``mean``/``var`` may come with the reduced axes removed (as :func:`_compute_stats` gives
    them) or kept as size-1 axes: only their number of entries must match. ``scale``/``bias``
    (either may be ``None``) hold one entry per feature position. With ``dtype=None`` the
    result takes the promoted dtype of ``x`` and the parameters given.

    >>> import jax.numpy as jnp
    >>> x = jnp.array([[1.0, 3.0]])
    >>> mean, var = _compute_stats(x, -1, None)
    >>> _normalize(x, mean, var, None, None, -1, -1, None, 0.0).tolist()
    [[-1.0, 1.0]]
    """
    reduced = canonicalize_axes(x.ndim, reduction_axes)
    # the shared step re-inserts the reduced axes itself, so drop them from the statistics
    # first: Flax accepts the statistics with or without those size-1 axes
    kept_shape = tuple(n for ax, n in enumerate(x.shape) if ax not in reduced)
    return normalize(
        x, jnp.reshape(mean, kept_shape), jnp.reshape(var, kept_shape), reduced, feature_axes,
        dtype, epsilon, scale=scale, bias=bias,
    )


class BatchNorm(Module):
    """Normalizes over every axis but ``axis`` with batch statistics, tracked as BatchStats.

    While ``use_running_average`` is false, each call updates ``mean``/``var`` with
    ``momentum``; ``model.eval()`` (or ``use_running_average=True``) uses them instead.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> bn = nnx.BatchNorm(2, use_running_average=True, rngs=nnx.Rngs(0))
    >>> bn(jnp.ones((4, 2))).shape
    (4, 2)
    """

    def __init__(
        self,
        num_features: int,
        *,
        use_running_average: bool | None = False,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-5,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros_init(),
        scale_init: Initializer = initializers.ones_init(),
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        scale_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        args = dict(locals())
        self.mean = BatchStat(jnp.zeros((num_features,), jnp.float32))
        self.var = BatchStat(jnp.ones((num_features,), jnp.float32))
        _setup(self, "BatchNorm", args)

    def __call__(
        self, x: Array, use_running_average: bool | None = None, *, mask: Array | None = None
    ) -> Array:
        """Normalizes ``x``; ``mask`` (broadcastable to ``x``) limits the statistics."""
        use_ra = self.use_running_average if use_running_average is None else use_running_average
        if use_ra is None:
            raise ValueError(
                "No `use_running_average` argument was provided to BatchNorm: pass it to the "
                "constructor, to the call (bn(x, use_running_average=True/False)), or set it "
                "with nnx.view(model, use_running_average=...) / model.eval()."
            )
        _check_mask("BatchNorm", x, mask)
        feature_axes = canonicalize_axes(x.ndim, self.axis, "BatchNorm", "axis")
        reduction_axes = tuple(i for i in range(x.ndim) if i not in feature_axes)
        x, mean, var, scale, bias = self.promote_dtype(
            (x, self.mean.value, self.var.value, _value(self.scale), _value(self.bias)),
            dtype=self.dtype,
        )
        if not use_ra:
            mean, var = _stats(self, x, reduction_axes, mask)
            m = self.momentum
            self.mean.value = jax.lax.stop_gradient(m * self.mean.value + (1 - m) * mean)
            self.var.value = jax.lax.stop_gradient(m * self.var.value + (1 - m) * var)
        return normalize(
            x, mean, var, reduction_axes, feature_axes, self.dtype, self.epsilon,
            scale=scale, bias=bias,
        )

    def set_view(self, use_running_average: bool | None = None) -> None:
        """Hook of ``nnx.view``.

        Args:
          use_running_average: if given, whether calls use the stored statistics (True)
            or compute and record batch statistics (False).
        """
        if use_running_average is not None:
            self.use_running_average = use_running_average


class LayerNorm(Module):
    """Normalizes each example over ``reduction_axes``; learned scale/bias on ``feature_axes``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> ln = nnx.LayerNorm(2, rngs=nnx.Rngs(0))
    >>> [round(v, 3) for v in ln(jnp.array([[1.0, 3.0]]))[0].tolist()]
    [-1.0, 1.0]
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros_init(),
        scale_init: Initializer = initializers.ones_init(),
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        scale_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        _setup(self, "LayerNorm", dict(locals()))

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalizes ``x``; ``mask`` limits which entries enter the statistics."""
        _check_mask("LayerNorm", x, mask)
        canonicalize_axes(x.ndim, self.reduction_axes, "LayerNorm", "reduction_axes")
        canonicalize_axes(x.ndim, self.feature_axes, "LayerNorm", "feature_axes")
        x, scale, bias = self.promote_dtype(
            (x, _value(self.scale), _value(self.bias)), dtype=self.dtype
        )
        mean, var = _stats(self, x, self.reduction_axes, mask)
        return normalize(
            x, mean, var, self.reduction_axes, self.feature_axes, self.dtype, self.epsilon,
            scale=scale, bias=bias,
        )


class RMSNorm(Module):
    """Scales each example by its root mean square over ``reduction_axes`` (no centering).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> rms = nnx.RMSNorm(2, rngs=nnx.Rngs(0))
    >>> [round(v, 3) for v in rms(jnp.array([[3.0, 4.0]]))[0].tolist()]
    [0.849, 1.131]
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_scale: bool = True,
        scale_init: Initializer = initializers.ones_init(),
        reduction_axes: Axes = -1,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        scale_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        _setup(self, "RMSNorm", dict(locals()))

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalizes ``x`` by its root mean square; ``mask`` limits the statistics."""
        _check_mask("RMSNorm", x, mask)
        canonicalize_axes(x.ndim, self.reduction_axes, "RMSNorm", "reduction_axes")
        x, scale = self.promote_dtype((x, _value(self.scale)), dtype=self.dtype)
        mean, var = _stats(self, x, self.reduction_axes, mask, use_mean=False)
        return normalize(
            x, mean, var, self.reduction_axes, self.feature_axes, self.dtype, self.epsilon,
            scale=scale,
        )


class GroupNorm(Module):
    """Normalizes groups of channels (last axis) together with the other non-batch axes.

    Give ``num_groups`` (default 32) or ``group_size`` (then pass ``num_groups=None``);
    ``num_features`` must split evenly into the groups.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> gn = nnx.GroupNorm(4, num_groups=2, rngs=nnx.Rngs(0))
    >>> gn(jnp.ones((1, 3, 4))).shape
    (1, 3, 4)
    """

    def __init__(
        self,
        num_features: int,
        num_groups: int | None = 32,
        group_size: int | None = None,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros_init(),
        scale_init: Initializer = initializers.ones_init(),
        reduction_axes: Axes | None = None,
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        scale_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        # Flax's attributes, in Flax's order: no num_features (the Params' shape holds it)
        self.feature_axis = -1
        if (num_groups is None) == (group_size is None):
            raise ValueError(
                "Either `num_groups` or `group_size` should be specified. GroupNorm got "
                f"num_groups={num_groups}, group_size={group_size}; to give group_size, pass "
                "num_groups=None as well."
            )
        if group_size is not None:
            if num_features % group_size:
                raise ValueError(
                    f"Number of features ({num_features}) is not multiple of the group size "
                    f"({group_size}). Choose a group_size that divides {num_features}."
                )
            num_groups = num_features // group_size
        n_groups = tp.cast(int, num_groups)  # exactly one of the two was given (checked above)
        if n_groups <= 0 or num_features % n_groups:
            raise ValueError(
                f"Number of groups ({n_groups}) does not divide the number of features "
                f"({num_features}). Choose num_groups among the divisors of {num_features}."
            )
        self.num_groups = n_groups
        self.group_size = num_features // n_groups
        shape = (num_features,)
        self.scale = new_param(
            "GroupNorm", "scale", scale_init, rngs, shape, param_dtype, scale_metadata,
            use=use_scale,
        )
        self.bias = new_param(
            "GroupNorm", "bias", bias_init, rngs, shape, param_dtype, bias_metadata,
            use=use_bias,
        )
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.reduction_axes = reduction_axes
        self.axis_name = axis_name
        self.axis_index_groups = axis_index_groups
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalizes ``x`` of shape ``(batch, ..., num_features)``."""
        _check_mask("GroupNorm", x, mask)
        if self.reduction_axes is not None:
            reduction_axes = self.reduction_axes
        else:
            reduction_axes = list(range(1, x.ndim - 1)) + [-1]
        reduction_axes = canonicalize_axes(x.ndim, reduction_axes, "GroupNorm", "reduction_axes")
        if x.ndim - 1 not in reduction_axes:
            raise ValueError(
                "The reduction axes must include the final dimension as this is assumed to be "
                f"the feature axis. GroupNorm got reduction_axes={self.reduction_axes} for "
                f"inputs of shape {x.shape}; add -1."
            )
        other_axes = tuple(ax for ax in reduction_axes if ax != x.ndim - 1)
        x, scale, bias = self.promote_dtype(
            (x, _value(self.scale), _value(self.bias)), dtype=self.dtype
        )
        groups, size = self.num_groups, self.group_size
        group_shape = x.shape[:-1] + (groups, size)
        if mask is not None:
            mask = jnp.reshape(mask, mask.shape[:-1] + (groups, size))
        mean, var = _stats(self, jnp.reshape(x, group_shape), other_axes + (x.ndim,), mask)

        def per_channel(stat: Array) -> Array:
            spread = jnp.broadcast_to(stat[..., None], stat.shape + (size,))
            return jnp.reshape(spread, stat.shape[:-1] + (groups * size,))

        return normalize(
            x, per_channel(mean), per_channel(var), other_axes, -1, self.dtype, self.epsilon,
            scale=scale, bias=bias,
        )


class InstanceNorm(Module):
    """Normalizes each example and each feature over the remaining (spatial) axes.

    The first axis is the batch; ``feature_axes`` (default -1) keep their own statistics
    and carry the learned ``scale``/``bias`` of shape ``(num_features,)``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> norm = nnx.InstanceNorm(3, rngs=nnx.Rngs(0))
    >>> norm(jnp.ones((2, 5, 3))).shape
    (2, 5, 3)
    """

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros,
        scale_init: Initializer = initializers.ones,
        feature_axes: Axes = -1,
        axis_name: str | None = None,
        axis_index_groups: tp.Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        scale_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        _setup(self, "InstanceNorm", dict(locals()))

    def __call__(self, x: Array, *, mask: Array | None = None) -> Array:
        """Normalizes ``x`` of shape ``(batch, ..., features)``."""
        _check_mask("InstanceNorm", x, mask)
        feature_axes = canonicalize_axes(x.ndim, self.feature_axes, "InstanceNorm", "feature_axes")
        if 0 in feature_axes:
            raise ValueError(
                "The channel axes cannot include the leading dimension as this is assumed to "
                f"be the batch axis. InstanceNorm got feature_axes={self.feature_axes} for "
                f"inputs of shape {x.shape}; pick feature axes among 1..{x.ndim - 1}."
            )
        reduction_axes = tuple(i for i in range(1, x.ndim) if i not in feature_axes)
        x, scale, bias = self.promote_dtype(
            (x, _value(self.scale), _value(self.bias)), dtype=self.dtype
        )
        mean, var = _stats(self, x, reduction_axes, mask)
        return normalize(
            x, mean, var, reduction_axes, feature_axes, self.dtype, self.epsilon,
            scale=scale, bias=bias,
        )


from flaxen.nnx.nn.reparam import (  # noqa: E402  (re-export)
    SpectralNorm,
    WeightNorm,
    _l2_normalize,  # noqa: F401 - Flax's private helper, imported from here
)

_abs_sq = abs_sq  # Flax's private name: |x|^2, real for complex x
