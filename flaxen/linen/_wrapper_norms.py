"""``SpectralNorm`` and ``WeightNorm``: wrappers that re-parameterise another layer's weights.

Both run the wrapped ``layer_instance`` through ``nn.map_variables``: its parameters stay
where they are (under the layer's own name), and each weight is transformed on the way in.
The extra state of a weight ``<layer>/<path>`` lives in the wrapper's scope under that
name: SpectralNorm keeps ``<layer>/<path>/u`` and ``/sigma`` in ``collection_name``,
WeightNorm learns ``<layer>/<path>/scale`` in ``params``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.linen import initializers, transforms
from flaxen.linen._norm_math import canonicalize_axes
from flaxen.linen.dtypes import canonicalize_dtype
from flaxen.linen.module import Module, compact

Array = jax.Array


def _l2_normalize(x: Array, axis: Any = None, eps: float = 1e-12) -> Array:
    return x * lax.rsqrt((x * x).sum(axis=axis, keepdims=True) + eps)


def _leaf_name(layer: Module, path: tuple) -> str:
    # path[0] is the collection ('params'); the layer's own name leads the key, as in Flax.
    keys = [str(getattr(p, "key", getattr(p, "name", p))) for p in path[1:]]
    return "/".join([str(layer.name)] + keys)


class SpectralNorm(Module):
    """Divides each weight matrix of ``layer_instance`` by its largest singular value.

    The singular value is estimated by ``n_steps`` of power iteration from a vector ``u``
    kept in ``collection_name`` (with the estimate ``sigma``); pass ``update_stats=True``
    while training (with that collection mutable) to refine and store them. Weights with
    more than two axes are flattened to ``(-1, last_axis)`` unless ``error_on_non_matrix``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> layer = nn.SpectralNorm(nn.Dense(3))
    >>> v = layer.init(jax.random.key(0), jnp.ones((1, 4)), update_stats=True)
    >>> sorted(v['batch_stats'])
    ['layer_instance/kernel/sigma', 'layer_instance/kernel/u']
    """

    layer_instance: Module
    n_steps: int = 1
    epsilon: float = 1e-12
    dtype: Any = None
    param_dtype: Any = jnp.float32
    error_on_non_matrix: bool = False
    collection_name: str = "batch_stats"

    @compact
    def __call__(self, *args: Any, update_stats: bool, **kwargs: Any) -> Any:
        """Calls the wrapped layer with spectrally normalised weights."""

        def forward(layer):
            return layer(*args, **kwargs)

        return transforms.map_variables(
            forward,
            trans_in_fn=lambda vs: jax.tree_util.tree_map_with_path(
                functools.partial(self._normalize, update_stats=update_stats), vs
            ),
            init=self.is_initializing(),
            mutable=True,
        )(self.layer_instance)

    def _normalize(self, path: tuple, value: Any, update_stats: bool) -> Array:
        value = jnp.asarray(value)
        shape = value.shape
        if value.ndim <= 1 or self.n_steps < 1:
            return value
        if value.ndim > 2:
            if self.error_on_non_matrix:
                raise ValueError(
                    f"Input is {value.ndim}D but error_on_non_matrix is True. SpectralNorm "
                    f"found weight {_leaf_name(self.layer_instance, path)} of shape {shape}; "
                    "set error_on_non_matrix=False to flatten it to a matrix."
                )
            value = jnp.reshape(value, (-1, shape[-1]))
        name = _leaf_name(self.layer_instance, path)
        u_key = None
        if not self.has_variable(self.collection_name, name + "/u"):
            u_key = self.make_rng("params")
        u_var = self.variable(
            self.collection_name, name + "/u", jax.random.normal, u_key, (1, shape[-1]),
            self.param_dtype,
        )
        u0 = u_var.value
        for _ in range(self.n_steps):
            v0 = _l2_normalize(jnp.matmul(u0, value.transpose([1, 0])), eps=self.epsilon)
            u0 = _l2_normalize(jnp.matmul(v0, value), eps=self.epsilon)
        u0 = lax.stop_gradient(u0)
        v0 = lax.stop_gradient(v0)
        sigma = jnp.matmul(jnp.matmul(v0, value), jnp.transpose(u0))[0, 0]
        value /= jnp.where(sigma != 0, sigma, 1)
        sigma_var = self.variable(
            self.collection_name, name + "/sigma", jnp.ones, (), self.param_dtype
        )
        if update_stats:
            u_var.value = u0
            sigma_var.value = sigma
        dtype = canonicalize_dtype(value, u0, v0, sigma, dtype=self.dtype)
        return jnp.asarray(jnp.reshape(value, shape), dtype)


class WeightNorm(Module):
    """Rewrites selected weights of ``layer_instance`` as ``scale * w / ||w||``.

    The norm is taken over every axis except ``feature_axes`` (``None``: over all axes, with
    a scalar scale). Only weights whose name contains an entry of ``variable_filter``
    (default ``{'kernel'}``) are touched; ``scale`` is learned unless ``use_scale=False``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> v = nn.WeightNorm(nn.Dense(3)).init(jax.random.key(0), jnp.ones((1, 4)))
    >>> v['params']['layer_instance/kernel/scale'].shape
    (3,)
    """

    layer_instance: Module
    epsilon: float = 1e-12
    dtype: Any = None
    param_dtype: Any = jnp.float32
    use_scale: bool = True
    scale_init: Any = initializers.ones
    feature_axes: Any = -1
    variable_filter: Iterable | None = dataclasses.field(default_factory=lambda: {"kernel"})

    @compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped layer with weight-normalised weights."""

        def forward(layer):
            return layer(*args, **kwargs)

        return transforms.map_variables(
            forward,
            trans_in_fn=lambda vs: jax.tree_util.tree_map_with_path(self._normalize, vs),
            init=self.is_initializing(),
        )(self.layer_instance)

    def _normalize(self, path: tuple, value: Any) -> Array:
        name = _leaf_name(self.layer_instance, path)
        if self.variable_filter:
            if not any(f in name for f in self.variable_filter):
                return value
        value = jnp.asarray(value)
        if self.feature_axes is None:
            feature_axes: tuple = ()
            reduction_axes = tuple(range(value.ndim))
        else:
            feature_axes = canonicalize_axes(value.ndim, self.feature_axes, "WeightNorm",
                                             "feature_axes")
            reduction_axes = tuple(i for i in range(value.ndim) if i not in feature_axes)
        value_bar = _l2_normalize(value, axis=reduction_axes, eps=self.epsilon)
        args = [value]
        if self.use_scale:
            scale_shape = tuple(value.shape[ax] for ax in feature_axes)
            scale = self.param(name + "/scale", self.scale_init, scale_shape, self.param_dtype)
            broadcast = [1] * value.ndim
            for ax in feature_axes:
                broadcast[ax] = value.shape[ax]
            value_bar = value_bar * jnp.reshape(scale, broadcast)
            args.append(scale)
        dtype = canonicalize_dtype(*args, dtype=self.dtype)
        return jnp.asarray(value_bar, dtype)
