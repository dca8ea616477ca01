"""NNX activations: the element-wise functions of :mod:`flaxen.layer_math.activations` (the
ones Linen exports) and ``PReLU``, a leaky ReLU whose negative slope is a learned ``Param``.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> nnx.PReLU(0.5)(jnp.array([-2.0, 3.0])).tolist()
[-1.0, 3.0]
"""

from __future__ import annotations

import typing as tp
from types import MappingProxyType

import jax
import jax.numpy as jnp

from flaxen.layer_math.activations import *  # noqa: F403
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import metadata
from flaxen.nnx.variablelib import Param
from flaxen.typing import Dtype

Array = jax.Array


class PReLU(Module):
    """``x`` where ``x >= 0``, else ``negative_slope * x``; ``negative_slope`` is a scalar Param.

    With ``dtype=None`` the slope is cast to the inputs' dtype (Linen's rule); with a
    ``dtype`` both go through ``promote_dtype``.
    """

    def __init__(
        self,
        negative_slope_init: float = 0.01,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        promote_dtype: tp.Callable[..., tp.Any] = dtypes.promote_dtype,
        negative_slope_metadata: tp.Mapping[str, tp.Any] = MappingProxyType({}),
    ) -> None:
        self.negative_slope = Param(
            jnp.asarray(negative_slope_init, dtype=param_dtype),
            **metadata("PReLU", "negative_slope", negative_slope_metadata),
        )
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype

    def __call__(self, inputs: Array) -> Array:
        """Applies the activation element-wise."""
        slope = self.negative_slope.value
        if self.dtype is not None:
            inputs, slope = self.promote_dtype((inputs, slope), dtype=self.dtype)
        else:
            slope = jnp.asarray(slope, inputs.dtype)
        return jnp.where(inputs >= 0, inputs, slope * inputs)


from jax.nn import identity as identity  # noqa: E402 - Flax re-exports JAX's, as here
