"""``nnx.bridge``: NNX and Linen used together (today's Flax names).

- :mod:`.wrappers`: ``ToNNX`` / ``lazy_init`` (a Linen module inside NNX), ``ToLinen`` /
  ``to_linen`` (an NNX module inside Linen), ``functional``.
- :mod:`.module`: ``bridge.Module`` (NNX modules written Linen-style: ``setup``,
  ``@bridge.compact``, ``param``, ``init``/``apply``), ``MODULE_CONTEXT``.
- :mod:`.interop`: ``nnx_in_bridge_mdl`` / ``linen_in_bridge_mdl``.
- :mod:`.variables`: ``NNXMeta`` and the Variable <-> Linen leaf conversions.

Importing this package loads ``flaxen.linen`` (``import flaxen.nnx`` alone does not).

>>> import jax.numpy as jnp
>>> from flaxen import linen as nn, nnx
>>> model = nnx.bridge.ToNNX(nn.Dense(2), rngs=nnx.Rngs(0)).lazy_init(jnp.ones((1, 3)))
>>> model(jnp.ones((5, 3))).shape
(5, 2)
"""

from flaxen.layer_math import initializers as initializers
from flaxen.nnx.bridge.interop import linen_in_bridge_mdl, nnx_in_bridge_mdl
from flaxen.nnx.bridge.module import (
    MODULE_CONTEXT,
    AttrPriority,
    Module,
    Scope,
    compact,
    current_context,
    current_module,
)
from flaxen.nnx.bridge.variables import NNXMeta, with_partitioning
from flaxen.nnx.bridge.wrappers import (
    Functional,
    ToLinen,
    ToNNX,
    functional,
    lazy_init,
    linen_rngs_dict,
    to_linen,
    to_linen_class,
)
from flaxen.nnx.compatibility import collection_name, variable_type

__all__ = [
    "MODULE_CONTEXT", "AttrPriority", "Functional", "Module", "NNXMeta", "Scope", "ToLinen",
    "ToNNX", "collection_name", "compact", "current_context", "current_module", "functional",
    "initializers", "lazy_init", "linen_in_bridge_mdl", "linen_rngs_dict", "nnx_in_bridge_mdl",
    "to_linen", "to_linen_class", "variable_type", "with_partitioning",
]
