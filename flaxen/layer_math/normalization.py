"""Normalisation statistics and the normalise-scale-shift step, shared by Linen and NNX norms.

``compute_stats`` reduces in at least float32 (unless ``force_float32_reductions`` is
off), uses ``E[x^2] - E[x]^2`` when ``use_fast_variance`` is set (one pass, one
collective) and ``E[(x - E[x])^2]`` otherwise, averages across devices with ``lax.pmean``
when an ``axis_name`` is given, and treats complex inputs through ``|x|^2``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.layer_math.dtypes import canonicalize_dtype
from flaxen.layer_math.errors import LayerAxisError

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


def param_shape(x: jax.Array, feature_axes: Axes) -> tuple[int, ...]:
    """The shape of a norm layer's ``scale``/``bias``: the sizes of ``x``'s feature axes.

    >>> import jax.numpy as jnp
    >>> param_shape(jnp.ones((2, 3, 4)), (-1, 1))
    (4, 3)
    """
    return tuple(x.shape[ax] for ax in canonicalize_axes(x.ndim, feature_axes))


def normalize(
    x: jax.Array,
    mean: jax.Array,
    var: jax.Array,
    reduction_axes: Axes,
    feature_axes: Axes,
    dtype: Any,
    epsilon: float,
    scale: jax.Array | None = None,
    bias: jax.Array | None = None,
) -> jax.Array:
    """``(x - mean) * rsqrt(var + eps) * scale + bias`` in ``dtype`` (or the promoted dtype).

    ``mean``/``var`` come from :func:`compute_stats` (reduced axes removed); ``scale`` and
    ``bias`` (either may be ``None``) have :func:`param_shape`. With ``dtype=None`` the result
    takes the promoted dtype of ``x`` and the parameters given.

    >>> import jax.numpy as jnp
    >>> x = jnp.array([[1.0, 3.0]])
    >>> mean, var = compute_stats(x, -1, None)
    >>> normalize(x, mean, var, (1,), (1,), None, 0.0).tolist()
    [[-1.0, 1.0]]
    """
    reduction_axes = canonicalize_axes(x.ndim, reduction_axes)
    feature_axes = canonicalize_axes(x.ndim, feature_axes)
    feature_shape = [1] * x.ndim
    for ax in feature_axes:
        feature_shape[ax] = x.shape[ax]
    mean = jnp.expand_dims(mean, reduction_axes)
    var = jnp.expand_dims(var, reduction_axes)
    y = x - mean
    mul = lax.rsqrt(var + epsilon)
    args = [x]
    if scale is not None:
        scale = jnp.reshape(scale, feature_shape)
        mul *= scale
        args.append(scale)
    y *= mul
    if bias is not None:
        bias = jnp.reshape(bias, feature_shape)
        y += bias
        args.append(bias)
    return jnp.asarray(y, canonicalize_dtype(*args, dtype=dtype))
