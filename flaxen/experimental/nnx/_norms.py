"""Flax 0.8.3's faces of the NNX norm layers (``flaxen.experimental.nnx`` only).

Today's layers pass ``(x, [stats,] scale, bias)`` through ``promote_dtype`` before the
statistics; 0.8.3's computed the statistics on the inputs as given (as Linen does). These
subclasses keep that: their ``promote_dtype`` default leaves the arrays unchanged.

>>> import jax.numpy as jnp
>>> from flaxen.experimental import nnx
>>> nnx.LayerNorm(2, dtype=jnp.float16, rngs=nnx.Rngs(0))(jnp.ones((1, 2))).dtype
dtype('float16')
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx.nn import normalization as _today

__all__ = ["BatchNorm", "GroupNorm", "LayerNorm", "RMSNorm"]


def _as_given(args: tuple, /, **kwargs: tp.Any) -> tuple:
    """No promotion: the arrays as they are."""
    del kwargs
    return tuple(args)


class BatchNorm(_today.BatchNorm):
    __doc__ = _today.BatchNorm.__doc__

    def __init__(self, *args: tp.Any, promote_dtype: tp.Callable = _as_given,
                 **kwargs: tp.Any) -> None:
        super().__init__(*args, promote_dtype=promote_dtype, **kwargs)


class LayerNorm(_today.LayerNorm):
    __doc__ = _today.LayerNorm.__doc__

    def __init__(self, *args: tp.Any, promote_dtype: tp.Callable = _as_given,
                 **kwargs: tp.Any) -> None:
        super().__init__(*args, promote_dtype=promote_dtype, **kwargs)


class RMSNorm(_today.RMSNorm):
    __doc__ = _today.RMSNorm.__doc__

    def __init__(self, *args: tp.Any, promote_dtype: tp.Callable = _as_given,
                 **kwargs: tp.Any) -> None:
        super().__init__(*args, promote_dtype=promote_dtype, **kwargs)


class GroupNorm(_today.GroupNorm):
    __doc__ = _today.GroupNorm.__doc__

    def __init__(self, *args: tp.Any, promote_dtype: tp.Callable = _as_given,
                 **kwargs: tp.Any) -> None:
        super().__init__(*args, promote_dtype=promote_dtype, **kwargs)
