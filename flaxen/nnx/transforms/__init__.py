"""NNX lifted transforms: today's ``flax.nnx`` faces, one file per family.

The public files carry Flax 0.12.8's module names (``autodiff``, ``compilation``,
``iteration``, ``transforms``, ``general``); the private ones hold one transform family each
and are re-exported by the public file Flax names. All of them are thin faces over the
lifting primitive in ``flaxen/nnx/_lift.py``; Flax 0.8.3's faces are in
``flaxen.experimental.nnx``.
"""

from flaxen.nnx.transforms.autodiff import (
    DiffState,
    remat,
    custom_vjp,
    grad,
    jvp,
    value_and_grad,
    vjp,
)
from flaxen.nnx.transforms.compilation import StateSharding, cached_partial, jit, jit_partial
from flaxen.nnx.transforms.transforms import PrefixMapping, checkify, eval_shape, make_jaxpr

__all__ = [
    "DiffState", "PrefixMapping", "StateSharding", "cached_partial", "checkify", "custom_vjp",
    "eval_shape", "grad", "jit", "jit_partial", "jvp", "make_jaxpr", "remat", "value_and_grad",
    "vjp",
]
