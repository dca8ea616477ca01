"""NNX lifted transforms: today's ``flax.nnx`` faces, one file per family.

``legacy`` holds the Flax 0.8.3 faces that ``flaxen.experimental.nnx`` exports; the other
files hold today's (``graph=``/``graph_updates=`` modes, ``StateAxes``, ``Carry``). All of
them are thin faces over the one lifting primitive in ``flaxen/nnx/_lift.py``.
"""

from flaxen.nnx.transforms.autodiff import (
    DiffState,
    custom_vjp,
    grad,
    jvp,
    value_and_grad,
    vjp,
)
from flaxen.nnx.transforms.compilation import StateSharding, cached_partial, jit, jit_partial
from flaxen.nnx.transforms.legacy import remat
from flaxen.nnx.transforms.transforms import PrefixMapping, checkify, eval_shape, make_jaxpr

__all__ = [
    "DiffState", "PrefixMapping", "StateSharding", "cached_partial", "checkify", "custom_vjp",
    "eval_shape", "grad", "jit", "jit_partial", "jvp", "make_jaxpr", "remat", "value_and_grad",
    "vjp",
]
