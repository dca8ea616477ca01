"""The NNX/Linen interop wrappers flaxen offered before today's ``nnx.bridge`` (the 0.8.3 face).

- ``ToNNX(linen_module, rngs=...)``: an NNX module around a Linen module, initialized lazily
  (by :func:`lazy_init` or on its first call) from the inputs it is given.
- ``ToLinen(nnx_class, args=(), kwargs=FrozenDict(), skip_rng=False)`` and
  ``to_linen(nnx_class, *args, name=None, **kwargs)``: a Linen module around an NNX class.

>>> import jax, jax.numpy as jnp
>>> from flaxen import linen as nn
>>> from flaxen.experimental import nnx
>>> model = nnx.bridge.lazy_init(nnx.bridge.ToNNX(nn.Dense(3), rngs=nnx.Rngs(0)),
...                              jnp.ones((1, 2)))
>>> model(jnp.ones((4, 2))).shape
(4, 3)
>>> layer = nnx.bridge.to_linen(nnx.Linear, 2, 3)
>>> variables = layer.init(jax.random.key(0), jnp.ones((1, 2)))
>>> layer.apply(variables, jnp.ones((4, 2))).shape
(4, 3)
"""

from __future__ import annotations

import typing as tp
from collections.abc import Mapping

from flaxen import linen
from flaxen.core.frozen_dict import FrozenDict
from flaxen.nnx.compatibility import (
    LinenWrapper,
    _call_nnx,
    collection_name,
    variable_type,
)
from flaxen.nnx.rnglib import Rngs

__all__ = ["ToNNX", "ToLinen", "to_linen", "lazy_init", "variable_type", "collection_name"]


class ToNNX(LinenWrapper, **({"pytree": False} if hasattr(  # type: ignore[misc]
        LinenWrapper, "_pytree__is_pytree") else {})):
    """A :class:`~flaxen.nnx.compatibility.LinenWrapper` that initializes on first use."""

    def __init__(self, module: linen.Module, rngs: Rngs | None = None) -> None:
        self.module = module
        self.rngs = rngs
        self.collections: tuple[str, ...] = ()

    def lazy_init(self, *args: tp.Any, **kwargs: tp.Any) -> ToNNX:
        """Initializes the Linen module from sample inputs (once); returns ``self``."""
        if not self.collections:
            self._initialize(args, kwargs)
        return self

    def __call__(self, *args: tp.Any, rngs: Rngs | None = None, method: tp.Any = None,
                 mutable: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        if not self.collections:
            self._initialize(args, dict(kwargs, method=method) if method is not None
                             else kwargs)
        return super().__call__(*args, rngs=rngs, method=method, mutable=mutable, **kwargs)


def lazy_init(module: ToNNX, *args: tp.Any, **kwargs: tp.Any) -> ToNNX:
    """``module.lazy_init(*args, **kwargs)``, for today's ``nnx.bridge.lazy_init(model, x)``."""
    return module.lazy_init(*args, **kwargs)


class ToLinen(linen.Module):
    """A Linen module building ``nnx_class(*args, **kwargs, rngs=...)`` in ``init`` and
    rebuilding it from the variables in ``apply`` (see :class:`compatibility.NNXWrapper`)."""

    nnx_class: tp.Any
    args: tuple = ()
    kwargs: Mapping[str, tp.Any] = FrozenDict({})  # noqa: RUF009 - immutable default
    skip_rng: bool = False

    @linen.compact
    def __call__(self, *args: tp.Any, nnx_method: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        return _call_nnx(self, self.nnx_class, tuple(self.args), self.kwargs, self.skip_rng,
                         nnx_method, args, kwargs)


def to_linen(nnx_class: tp.Any, *args: tp.Any, name: str | None = None,
             skip_rng: bool = False, **kwargs: tp.Any) -> ToLinen:
    """``ToLinen(nnx_class, args=args, kwargs=FrozenDict(kwargs), name=name)``."""
    return ToLinen(nnx_class, args=args, kwargs=FrozenDict(kwargs), skip_rng=skip_rng, name=name)
