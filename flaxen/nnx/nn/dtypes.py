"""Today's NNX dtype helpers: ``promote_dtype`` takes ONE tuple of arrays (not varargs).

Flax's NNX layers call ``promote_dtype((inputs, kernel, bias), dtype=...)``, and a layer's
``promote_dtype=`` argument receives that tuple; Linen's variadic version lives in
:mod:`flaxen.layer_math.dtypes`, and both cast with the same rule, so an NNX layer and its
Linen twin compute in the same dtype.

>>> import jax.numpy as jnp
>>> x, k, b = promote_dtype((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.float16), None))
>>> x.dtype.name, k.dtype.name, b
('float16', 'float16', None)
"""

from __future__ import annotations

import typing as tp

from flaxen.layer_math import dtypes as _dt
from flaxen.typing import Dtype as Dtype  # Flax imports it here from flax.typing

__all__ = ["canonicalize_dtype", "promote_dtype"]

T = tp.TypeVar("T", bound=tuple)

canonicalize_dtype = _dt.canonicalize_dtype


def promote_dtype(args: T, /, *, dtype: tp.Any = None, inexact: bool = True) -> T:
    """Casts every non-``None`` entry of the tuple ``args`` to one dtype; returns a tuple.

    The dtype is ``dtype`` when given, else JAX's promotion of the entries (made inexact
    when ``inexact``), exactly as :func:`flaxen.layer_math.dtypes.promote_dtype`.
    """
    if not isinstance(args, tuple | list):
        raise TypeError(
            "nnx promote_dtype takes one tuple of arrays, e.g. promote_dtype((x, kernel), "
            f"dtype=...), but got {type(args).__name__}. Wrap the arrays in a tuple (Linen's "
            "variadic form is flaxen.linen.dtypes.promote_dtype)."
        )
    return tuple(_dt.promote_dtype(*args, dtype=dtype, inexact=inexact))  # type: ignore
