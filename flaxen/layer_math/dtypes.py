"""Dtype inference for layers (shared by Linen and NNX).

The rules of Flax's "Default dtypes" design note.

A layer built with ``dtype=None`` computes in the dtype that JAX's type promotion gives
for its inputs and parameters together, made inexact (an integer input is computed in
float32). Parameters are stored in ``param_dtype`` (float32 unless told otherwise).

>>> import jax.numpy as jnp
>>> x = jnp.ones((2,), jnp.bfloat16)
>>> canonicalize_dtype(x, None)
dtype(bfloat16)
>>> [a.dtype.name for a in promote_dtype(x, jnp.ones((2,), jnp.float32))]
['float32', 'float32']
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

Dtype = Any
T = TypeVar("T")

__all__ = ["canonicalize_dtype", "promote_dtype"]


def _describe(dtype: Any) -> str:
    try:
        return jnp.dtype(dtype).name
    except TypeError:
        return repr(dtype)


def canonicalize_dtype(*args: Any, dtype: Dtype | None = None, inexact: bool = True) -> Dtype:
    """Returns the dtype a computation on ``args`` should run in.

    With ``dtype=None`` the result is ``jnp.result_type`` of the non-``None`` arguments;
    when ``inexact`` is set, an integer or boolean result is promoted together with
    float32 (so ``int32`` gives ``float32``). An explicit ``dtype`` is returned as given,
    after checking that it is inexact when ``inexact`` asks for that.

    Raises ``ValueError`` when nothing is given to infer from, or when ``inexact=True`` and
    the explicit ``dtype`` is an integer or boolean type.

    >>> import jax.numpy as jnp
    >>> canonicalize_dtype(jnp.ones(2, jnp.int32))
    dtype('float32')
    >>> canonicalize_dtype(jnp.ones(2, jnp.int32), inexact=False)
    dtype('int32')
    """
    if dtype is None:
        # Nested Python sequences count as the arrays they would become.
        present = [
            np.asarray(a) if isinstance(a, list | tuple) else a for a in args if a is not None
        ]
        if not present:
            raise ValueError(
                "canonicalize_dtype: no array or dtype to infer a dtype from (every "
                "argument was None and dtype=None). Pass at least one array, or an "
                "explicit dtype=..."
            )
        dtype = jnp.result_type(*present)
        if inexact and not jnp.issubdtype(dtype, jnp.inexact):
            dtype = jnp.promote_types(jnp.float32, dtype)
    if inexact and not jnp.issubdtype(dtype, jnp.inexact):
        raise ValueError(
            f"Dtype must be inexact: {dtype}. canonicalize_dtype was asked for a floating "
            f"or complex dtype (inexact=True) but got {_describe(dtype)}. Pass a float "
            "dtype such as jnp.float32 or jnp.bfloat16, or inexact=False."
        )
    return dtype


def promote_dtype(*args: Any, dtype: Dtype | None = None, inexact: bool = True) -> list[Any]:
    """Converts every non-``None`` argument to one common dtype; ``None`` stays ``None``.

    The dtype is ``canonicalize_dtype(*args, dtype=dtype, inexact=inexact)``. Layers call
    this on ``(inputs, kernel, bias)`` so that, for example, a bfloat16 input and float32
    parameters compute in float32 unless the layer's ``dtype`` says otherwise.

    >>> import jax.numpy as jnp
    >>> x, k, b = promote_dtype(jnp.ones(2, jnp.int32), jnp.ones(2), None)
    >>> x.dtype.name, k.dtype.name, b
    ('float32', 'float32', None)
    """
    if _already_promoted(args, dtype, inexact):
        # every layer call lands here with matching float dtypes: the promotion below
        # would hand back the very same arrays, only after a result_type and a cast each
        return list(args)
    dtype = canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    return [None if x is None else jnp.asarray(x, dtype) for x in args]


_INEXACT: dict[Any, bool] = {}


def _already_promoted(args: tuple, dtype: Any, inexact: bool) -> bool:
    """True when every argument is a strongly typed JAX array (or None) of one dtype, which
    is ``dtype`` when given and inexact when asked: then promotion changes nothing."""
    first = None
    for x in args:
        if x is None:
            continue
        # weak types are left to the general path: casting makes them strong
        if not isinstance(x, jax.Array) or x.weak_type:
            return False
        if first is None:
            first = x.dtype
        elif x.dtype != first:
            return False
    if first is None:
        return False
    if dtype is not None:
        try:
            if jnp.dtype(dtype) != first:
                return False
        except TypeError:
            return False
    if inexact:
        ok = _INEXACT.get(first)
        if ok is None:
            ok = _INEXACT[first] = bool(jnp.issubdtype(first, jnp.inexact))
        return ok
    return True
