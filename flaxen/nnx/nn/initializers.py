"""``nnx.initializers`` / ``nnx.nn.initializers``: JAX's initializers plus ``zeros_init`` and
``ones_init``, the same objects :mod:`flaxen.layer_math.initializers` gives Linen.

>>> import jax, jax.numpy as jnp
>>> from flaxen.nnx import initializers
>>> initializers.ones_init()(jax.random.key(0), (2,), jnp.float32).tolist()
[1.0, 1.0]
"""

import typing as tp

from flaxen.layer_math.initializers import *  # noqa: F403
from flaxen.layer_math.initializers import Initializer as Initializer
from flaxen.layer_math.initializers import __all__ as __all__
from flaxen.layer_math.initializers import ones_init as ones_init
from flaxen.layer_math.initializers import zeros_init as zeros_init

# the dtype parameter type of the initializers (any inexact dtype JAX accepts), as Flax names it
DtypeLikeInexact = tp.Any
