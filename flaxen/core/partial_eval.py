"""Lazy evaluation of functions whose inputs may be abstract (``flax.core.partial_eval``).

>>> import jax, jax.numpy as jnp
>>> f = lazy_init(lambda x, n: jnp.ones((x.shape[-1], n)))
>>> f(jax.ShapeDtypeStruct((8, 3), jnp.float32), 2).shape
(3, 2)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flaxen.core._partial_eval import lazy_call


def lazy_init(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps ``fn`` so that its inputs may be ``jax.ShapeDtypeStruct`` stand-ins.

    Only the work the outputs need runs; an output that depends on the value of a stand-in
    raises :class:`~flaxen.errors.LazyInitError` (its shape and dtype are all there is).

    >>> import jax, jax.numpy as jnp
    >>> g = lazy_init(lambda x: x.sum())
    >>> g(jnp.ones(3)).item()
    3.0
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return lazy_call(fn, args, kwargs)

    return wrapper


__all__ = ["lazy_init"]

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen import errors  # noqa: E402, F401
