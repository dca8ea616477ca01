"""``nnx.WeightNorm`` and ``nnx.SpectralNorm``: wrappers that re-parameterise the weights of
another layer (``layer_instance``) on every call.

Both look at the wrapped layer's ``Param``s (by path, as ``nnx.iter_graph`` gives them) and
compute the re-parameterised value. ``WeightNorm`` does as Flax's: it writes the normalised
value into the wrapped layer's Param and leaves it there (after a call the kernel's columns
have the learned scales as norms), then runs the layer. ``SpectralNorm`` does the same with
``w / sigma``: after a call the wrapped layer's weights are the normalised ones (a later call
normalises them again, which gives the same result, since the estimate scales with them).
The numbers match Linen's ``WeightNorm`` / ``SpectralNorm`` (same ``_l2_normalize``, power
iteration and dtype rule).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> layer = nnx.WeightNorm(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
>>> layer(jnp.ones((2, 4))).shape, layer.scales[('kernel',)].shape
((2, 3), (3,))
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.layer_math import initializers
from flaxen.layer_math.dtypes import canonicalize_dtype
from flaxen.layer_math.normalization import canonicalize_axes
from flaxen.nnx import filterlib
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import data
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variablelib import BatchStat, Param
from flaxen.typing import Axes, Dtype, Initializer

Array = jax.Array

__all__ = ["SpectralNorm", "WeightNorm"]


def _l2_normalize(x: Array, axis: tp.Any = None, eps: float = 1e-12) -> Array:
    return x * lax.rsqrt((x * x).sum(axis=axis, keepdims=True) + eps)


def _params(layer: tp.Any) -> list[tuple[tuple, Param]]:
    from flaxen.nnx._graph_ops import iter_graph  # the graph walk (engine level)

    return [(path, v) for path, v in iter_graph(layer) if isinstance(v, Param)]


def _init_scale(scale_init: Initializer, rngs: Rngs, shape: tuple) -> Array:
    # Flax hands the init the params stream itself and draws no key (the stream's count, so
    # every later parameter of the same Rngs, stays as in Flax)
    try:
        return scale_init(rngs["params"], shape)  # type: ignore[arg-type]  # Flax's call
    except TypeError as e:
        raise TypeError(
            f"WeightNorm: scale_init {scale_init!r} failed on the 'params' RngStream: as in "
            "Flax, WeightNorm passes it the stream, not a key, so it must not draw random "
            "numbers. Use a deterministic init such as nnx.initializers.ones or constant(c), "
            "or set wn.scales[path] yourself after construction."
        ) from e


class WeightNorm(Module):
    """Rewrites selected weights of ``layer_instance`` in place as ``scale * w / ||w||``,
    then runs it.

    The norm is over every axis except ``feature_axes`` (``None``: all axes, scalar scale).
    ``variable_filter`` (an NNX filter, default ``PathContains('kernel')``) picks the
    weights; their scales are ``scales[path]``: plain arrays in a data dict, as Flax keeps
    them (not Params: ``nnx.state(wn, nnx.Param)`` leaves them out), made by
    ``scale_init(rngs['params'], shape)``, which gets the stream, not a key, as in Flax (so
    a deterministic init such as ``ones`` / ``constant`` is needed and no key is drawn). As
    in Flax the normalised value stays in the wrapped layer's Param after the call.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> wn = nnx.WeightNorm(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
    >>> _ = wn(jnp.ones((1, 3)))
    >>> jnp.linalg.norm(wn.layer_instance.kernel[...], axis=0).round(4).tolist()
    [1.0, 1.0]
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        feature_axes: Axes | None = -1,
        use_scale: bool = True,
        scale_init: Initializer = initializers.ones,
        epsilon: float = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        variable_filter: filterlib.Filter = filterlib.PathContains("kernel"),  # noqa: B008
        promote_dtype: tp.Callable[..., tp.Any] = dtypes.promote_dtype,
        rngs: Rngs,
    ) -> None:
        self.layer_instance: tp.Any = layer_instance  # any callable Module
        self.feature_axes = () if feature_axes is None else feature_axes
        self.use_scale = use_scale
        self.scale_init = scale_init
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.variable_filter = filterlib.to_predicate(variable_filter)
        self.promote_dtype = promote_dtype
        scales: dict = {}
        if use_scale:
            for path, param in _params(layer_instance):
                if self.variable_filter(path, param):
                    axes = canonicalize_axes(param.value.ndim, self.feature_axes)
                    shape = tuple(param.value.shape[ax] for ax in axes)
                    scales[path] = _init_scale(scale_init, rngs, shape)
        self.scales: dict | None = data(scales) if use_scale else None

    def _normalized(self, path: tuple, param: Param) -> Array:
        value = param.value
        axes = canonicalize_axes(value.ndim, self.feature_axes)
        reduction = tuple(i for i in range(value.ndim) if i not in axes)
        value_bar = _l2_normalize(value, axis=reduction, eps=self.epsilon)
        args = [value]
        if self.use_scale and self.scales is not None:
            if path not in self.scales:
                raise RuntimeError(
                    f"WeightNorm: no scale for the weight at {path}: the wrapped layer's "
                    "parameters changed after WeightNorm was built. Build a new WeightNorm "
                    "around the layer."
                )
            scale = self.scales[path]
            broadcast = [1] * value.ndim
            for ax in axes:
                broadcast[ax] = value.shape[ax]
            scale = jnp.reshape(scale, broadcast)
            value_bar = value_bar * scale
            args.append(scale)
        return jnp.asarray(value_bar, canonicalize_dtype(*args, dtype=self.dtype))

    def __call__(self, x: Array, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        """Calls the wrapped layer with weight-normalised weights."""
        for path, param in _params(self.layer_instance):
            if self.variable_filter(path, param):
                param.set_value(self._normalized(path, param))
        return self.layer_instance(x, *args, **kwargs)


class SpectralNorm(Module):
    """Divides each weight matrix of ``layer_instance`` in place by its largest singular
    value, then runs it.

    The singular value is estimated by ``n_steps`` of power iteration from a vector kept in
    ``batch_stats[path + ('u',)]`` (and the estimate in ``path + ('sigma',)``); with
    ``update_stats`` (default: the constructor's) both are refined and stored. Weights with
    more than two axes are flattened to ``(-1, last_axis)`` unless ``error_on_non_matrix``.
    As in Flax the normalised value stays in the wrapped layer's Param after the call.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> sn = nnx.SpectralNorm(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
    >>> sn(jnp.ones((2, 4))).shape, sorted(sn.batch_stats)
    ((2, 3), [('kernel', 'sigma'), ('kernel', 'u')])
    """

    def __init__(
        self,
        layer_instance: Module,
        *,
        n_steps: int = 1,
        epsilon: float = 1e-12,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        error_on_non_matrix: bool = False,
        update_stats: bool = True,
        rngs: Rngs,
    ) -> None:
        self.layer_instance: tp.Any = layer_instance  # any callable Module
        self.n_steps = n_steps
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.error_on_non_matrix = error_on_non_matrix
        self.use_running_average = not update_stats
        stats: dict = {}
        for path, param in _params(layer_instance):
            matrix = self._as_matrix(path, param.value)
            if matrix is None:
                continue
            key = rngs.params()
            stats[path + ("u",)] = BatchStat(
                initializers.normal()(key, (1, matrix.shape[-1]), param_dtype)
            )
            stats[path + ("sigma",)] = BatchStat(jnp.ones((), param_dtype))
        self.batch_stats = data(stats)

    def _as_matrix(self, path: tuple, value: Array) -> Array | None:
        if value.ndim <= 1 or self.n_steps < 1:
            return None
        if value.ndim > 2:
            if self.error_on_non_matrix:
                raise ValueError(
                    f"SpectralNorm: layer_instance parameter {path} is {value.ndim}D but "
                    "error_on_non_matrix is True; set error_on_non_matrix=False to flatten "
                    "it to (-1, last_axis)."
                )
            value = jnp.reshape(value, (-1, value.shape[-1]))
        return value

    def _normalized(self, path: tuple, value: Array, update_stats: bool) -> Array:
        shape = value.shape
        matrix = self._as_matrix(path, value)
        assert matrix is not None
        for name in ("u", "sigma"):
            if path + (name,) not in self.batch_stats:
                raise RuntimeError(
                    f"SpectralNorm: no {name!r} batch stat for the weight at {path}: the "
                    "wrapped layer's parameters changed after SpectralNorm was built. Build "
                    "a new SpectralNorm around the layer."
                )
        u = self.batch_stats[path + ("u",)].value
        v = u
        for _ in range(self.n_steps):
            v = _l2_normalize(jnp.matmul(u, matrix.T), eps=self.epsilon)
            u = _l2_normalize(jnp.matmul(v, matrix), eps=self.epsilon)
        u = lax.stop_gradient(u)
        v = lax.stop_gradient(v)
        sigma = jnp.matmul(jnp.matmul(v, matrix), u.T)[0, 0]
        matrix = matrix / jnp.where(sigma != 0, sigma, 1)
        if update_stats:
            self.batch_stats[path + ("u",)].value = u
            self.batch_stats[path + ("sigma",)].value = sigma
        dtype = canonicalize_dtype(matrix, u, v, sigma, dtype=self.dtype)
        return jnp.asarray(jnp.reshape(matrix, shape), dtype)

    def __call__(self, x: Array, update_stats: bool | None = None) -> tp.Any:
        """Calls the wrapped layer with spectrally normalised weights."""
        if update_stats is None:
            update_stats = not self.use_running_average
        for path, param in _params(self.layer_instance):
            if self._as_matrix(path, param.value) is not None:
                param.set_value(self._normalized(path, param.value, update_stats))
        return self.layer_instance(x)
