"""Dtype inference for layers (``flax.linen.dtypes``): the rules of Flax's "Default dtypes"
design note. The functions live in :mod:`flaxen.layer_math.dtypes` (shared with NNX).

>>> import jax.numpy as jnp
>>> from flaxen.linen.dtypes import canonicalize_dtype
>>> canonicalize_dtype(jnp.ones((2,), jnp.int32))
dtype('float32')
"""

from typing import TypeVar

from flaxen.layer_math.dtypes import canonicalize_dtype, promote_dtype

T = TypeVar("T", bound=tuple)  # the tuple type promote_dtype returns

__all__ = ["T", "canonicalize_dtype", "promote_dtype"]

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import Dtype  # noqa: E402, F401
