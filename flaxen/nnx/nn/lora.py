"""Low-rank adaptation: ``LoRA`` (``x @ lora_a @ lora_b``, optionally added to a wrapped
``base_module``), ``LoRALinear`` (a ``Linear`` with a ``lora`` adapter; its state holds the
Linear's ``kernel``/``bias`` under the same names, so a trained Linear's state loads into
it), and ``LoRAParam``, the Param type of the adapter matrices (filter on it to train only
the adapter).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> layer = nnx.LoRA(3, 2, 4, rngs=nnx.Rngs(0))
>>> layer.lora_a.value.shape, layer.lora_b.value.shape, layer(jnp.ones((5, 3))).shape
((3, 2), (2, 4), (5, 4))
"""

from __future__ import annotations

import typing as tp
from types import MappingProxyType

import jax
import jax.numpy as jnp

from flaxen.layer_math import initializers
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import new_param
from flaxen.nnx.nn.linear import Linear
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variablelib import Param, Variable
from flaxen.typing import Dtype, Initializer

__all__ = ["LoRA", "LoRALinear", "LoRAParam"]

A = tp.TypeVar("A")
Array = jax.Array
Axis = int
Size = int
_NO_META: tp.Mapping[str, tp.Any] = MappingProxyType({})

default_a_initializer = initializers.he_uniform()
default_b_initializer = initializers.zeros


class LoRAParam(Param[A]):
    """The Param type of LoRA's ``lora_a``/``lora_b`` (a ``Param``, so ``nnx.Param`` filters
    match it too; list ``nnx.LoRAParam`` first to pick out only the adapters)."""


class LoRA(Module):
    """A rank-``lora_rank`` adapter from ``in_features`` to ``out_features``.

    ``lora_a`` (``(in, rank)``, He-uniform) and ``lora_b`` (``(rank, out)``, zeros) are
    ``lora_param_type`` Variables; with a ``base_module`` the call returns
    ``base_module(x, **kwargs) + x @ lora_a @ lora_b``.
    """

    def __init__(
        self,
        in_features: int,
        lora_rank: int,
        out_features: int,
        *,
        base_module: Module | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = default_a_initializer,
        b_initializer: Initializer = default_b_initializer,
        lora_param_type: type[Variable] = LoRAParam,
        promote_dtype: tp.Callable[..., tp.Any] = dtypes.promote_dtype,
        rngs: Rngs,
        a_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        b_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        if base_module is not None and not callable(base_module):
            raise ValueError(
                f"LoRA: base_module must be callable (a layer), got {type(base_module).__name__}."
            )
        self.in_features = in_features
        self.out_features = out_features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.lora_param_type = lora_param_type
        self.base_module = base_module
        self.promote_dtype = promote_dtype
        self.lora_a = new_param(
            "LoRA", "a", a_initializer, rngs, (in_features, lora_rank), param_dtype, a_metadata,
            kind=lora_param_type,
        )
        self.lora_b = new_param(
            "LoRA", "b", b_initializer, rngs, (lora_rank, out_features), param_dtype,
            b_metadata, kind=lora_param_type,
        )

    def __call__(self, x: jax.Array, **kwargs: tp.Any) -> jax.Array:
        """``x @ lora_a @ lora_b`` (plus ``base_module(x, **kwargs)`` when wrapping one)."""
        x, lora_a, lora_b = self.promote_dtype(
            (x, self.lora_a.value, self.lora_b.value), dtype=self.dtype
        )
        out = x @ lora_a @ lora_b
        if self.base_module is not None:
            out += self.base_module(x, **kwargs)
        return out


class LoRALinear(Linear):
    """A :class:`~flaxen.nnx.Linear` whose output gets a ``lora`` adapter's output added.

    ``lora_dtype``/``lora_param_dtype``/``lora_promote_dtype`` configure the adapter; the
    other keyword arguments go to ``Linear``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        lora_rank: int,
        lora_dtype: Dtype | None = None,
        lora_param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = default_a_initializer,
        b_initializer: Initializer = default_b_initializer,
        lora_param_type: type[Variable] = LoRAParam,
        lora_promote_dtype: tp.Callable[..., tp.Any] = dtypes.promote_dtype,
        rngs: Rngs,
        a_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        b_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        **kwargs: tp.Any,
    ) -> None:
        super().__init__(in_features, out_features, rngs=rngs, **kwargs)
        self.lora = LoRA(
            in_features, lora_rank, out_features, dtype=lora_dtype,
            param_dtype=lora_param_dtype, a_initializer=a_initializer,
            b_initializer=b_initializer, lora_param_type=lora_param_type,
            promote_dtype=lora_promote_dtype, rngs=rngs, a_metadata=a_metadata,
            b_metadata=b_metadata,
        )

    def __call__(self, x: jax.Array, out_sharding: tp.Any = None) -> jax.Array:
        """``Linear(x) + lora(x)``."""
        y = super().__call__(x, out_sharding=out_sharding)
        return y + self.lora(x)
