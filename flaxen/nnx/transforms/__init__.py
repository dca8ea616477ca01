"""NNX lifted transforms: today's ``flax.nnx`` faces, one file per family.

``legacy`` holds the Flax 0.8.3 faces that ``flaxen.experimental.nnx`` exports; the other
files hold today's (``graph=``/``graph_updates=`` modes, ``StateAxes``, ``Carry``). All of
them are thin faces over the one lifting primitive in ``flaxen/nnx/_lift.py``.
"""

from flaxen.nnx.transforms.legacy import eval_shape, grad, jit, remat, value_and_grad

__all__ = ["eval_shape", "grad", "jit", "remat", "value_and_grad"]
