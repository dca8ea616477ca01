"""Linen's side of the normalisation math: statistics come from
:mod:`flaxen.layer_math.normalization` (shared with NNX); ``normalize`` here creates the
``scale``/``bias`` params on a Linen module and then applies the shared normalise step.

>>> import jax.numpy as jnp
>>> mean, var = compute_stats(jnp.array([[1.0, 3.0]]), -1, None)
>>> mean.tolist(), var.tolist()
([2.0], [1.0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from flaxen.layer_math import normalization as _nm
from flaxen.layer_math.normalization import Axes, abs_sq, canonicalize_axes, compute_stats

__all__ = ["Axes", "abs_sq", "canonicalize_axes", "compute_stats", "normalize"]


def normalize(
    module: Any,
    x: jax.Array,
    mean: jax.Array,
    var: jax.Array,
    reduction_axes: Axes,
    feature_axes: Axes,
    dtype: Any,
    param_dtype: Any,
    epsilon: float,
    use_bias: bool,
    use_scale: bool,
    bias_init: Callable[..., Any] | None,
    scale_init: Callable[..., Any] | None,
    force_float32_reductions: bool = True,
) -> jax.Array:
    """``(x - mean) * rsqrt(var + eps) * scale + bias``, creating ``scale``/``bias`` on ``module``.

    The parameters (``scale`` first, then ``bias``) have one axis per feature axis; the
    result has ``dtype``, or the promoted dtype of ``x`` and the parameters. The
    statistics arrive already in their reduction dtype, so ``force_float32_reductions``
    (accepted for Flax's private ``_normalize`` signature) changes nothing here.
    """
    del force_float32_reductions
    shape = _nm.param_shape(x, feature_axes)
    scale = module.param("scale", scale_init, shape, param_dtype) if use_scale else None
    bias = module.param("bias", bias_init, shape, param_dtype) if use_bias else None
    return _nm.normalize(
        x, mean, var, reduction_axes, feature_axes, dtype, epsilon, scale=scale, bias=bias
    )
