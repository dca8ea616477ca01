"""Normalisation statistics and the normalise-scale-shift step shared by the norm layers.

``compute_stats`` reduces in at least float32 (unless ``force_float32_reductions`` is
off), uses ``E[x^2] - E[x]^2`` when ``use_fast_variance`` is set (one pass, one
collective) and ``E[(x - E[x])^2]`` otherwise, averages across devices with ``lax.pmean``
when an ``axis_name`` is given, and treats complex inputs through ``|x|^2``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.linen._layer_errors import LayerAxisError
from flaxen.linen.dtypes import canonicalize_dtype

Axes = int | Iterable[int]


def canonicalize_axes(rank: int, axes: Axes, layer: str = "", what: str = "axes") -> tuple:
    """Non-negative, de-duplicated axes in the order given."""
    if not isinstance(axes, Iterable):
        axes = (axes,)
    out = []
    for ax in axes:
        if not -rank <= ax < rank:
            raise LayerAxisError(
                f"{layer or 'normalization'}: {what} {tuple(axes)} names axis {ax}, but the "
                f"input has {rank} dimensions (valid axes are {-rank}..{rank - 1})."
            )
        ax = ax % rank
        if ax not in out:
            out.append(ax)
    return tuple(out)


def abs_sq(x: jax.Array) -> jax.Array:
    """``|x|^2`` element-wise; real-valued even for complex ``x``."""
    if jnp.iscomplexobj(x):
        return lax.square(lax.real(x)) + lax.square(lax.imag(x))
    return lax.square(x)


def compute_stats(
    x: jax.Array,
    axes: Axes,
    dtype: Any,
    axis_name: str | None = None,
    axis_index_groups: Any = None,
    use_mean: bool = True,
    use_fast_variance: bool = True,
    mask: jax.Array | None = None,
    force_float32_reductions: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """Returns ``(mean, var)`` of ``x`` over ``axes`` (reduced axes removed).

    With ``use_mean=False`` the mean is zeros and ``var`` is ``E[|x|^2]`` (RMSNorm).
    """
    if dtype is None:
        dtype = jnp.result_type(x)
    if force_float32_reductions:
        dtype = jnp.promote_types(dtype, jnp.float32)
    x = jnp.asarray(x, dtype)
    axes = canonicalize_axes(x.ndim, axes)

    def mean(*arrays):
        mus = tuple(jnp.mean(a, axes, where=mask) for a in arrays)
        if axis_name is not None:
            mus = lax.pmean(mus, axis_name, axis_index_groups=axis_index_groups)
        return mus if len(mus) > 1 else mus[0]

    if not use_mean:
        var = mean(abs_sq(x))
        return jnp.zeros_like(var), var
    if use_fast_variance:
        mu, mu2 = mean(x, abs_sq(x))
        var = jnp.maximum(0.0, mu2 - abs_sq(mu))
    else:
        mu = mean(x)
        var = mean(abs_sq(x - jnp.expand_dims(mu, axes)))
    return mu, var


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
    """``(x - mean) * rsqrt(var + eps) * scale + bias``, creating ``scale``/``bias``.

    The parameters (``scale`` first, then ``bias``) have one axis per feature axis; the
    result has ``dtype``, or the promoted dtype of ``x`` and the parameters. The
    statistics arrive already in their reduction dtype, so ``force_float32_reductions``
    (accepted for Flax's private ``_normalize`` signature) changes nothing here.
    """
    reduction_axes = canonicalize_axes(x.ndim, reduction_axes)
    feature_axes = canonicalize_axes(x.ndim, feature_axes)
    feature_shape = [1] * x.ndim
    param_shape = []
    for ax in feature_axes:
        feature_shape[ax] = x.shape[ax]
        param_shape.append(x.shape[ax])
    param_shape = tuple(param_shape)
    mean = jnp.expand_dims(mean, reduction_axes)
    var = jnp.expand_dims(var, reduction_axes)
    y = x - mean
    mul = lax.rsqrt(var + epsilon)
    args = [x]
    if use_scale:
        scale = module.param("scale", scale_init, param_shape, param_dtype)
        scale = jnp.reshape(scale, feature_shape)
        mul *= scale
        args.append(scale)
    y *= mul
    if use_bias:
        bias = module.param("bias", bias_init, param_shape, param_dtype)
        bias = jnp.reshape(bias, feature_shape)
        y += bias
        args.append(bias)
    return jnp.asarray(y, canonicalize_dtype(*args, dtype=dtype))
