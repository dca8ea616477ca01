"""Pure layer math shared by :mod:`flaxen.linen` and :mod:`flaxen.nnx` (no Module system).

One job per file: ``initializers``, ``activations``, ``dtypes`` (dtype inference),
``attention`` (masks and dot-product attention), ``pooling``, ``normalization``
(statistics and the normalise step), ``convolution`` (padding and shape arithmetic) and
``errors`` (the exceptions they raise). Linen's public modules (``flaxen.linen.initializers``,
``flaxen.linen.activation``, ``flaxen.linen.dtypes``, ``flaxen.linen.pooling``, ...) re-export
these, and NNX layers import them from here, so ``import flaxen.nnx`` never loads Linen.

>>> from flaxen.layer_math import activations, initializers
>>> from flaxen import linen
>>> linen.initializers.lecun_normal is initializers.lecun_normal
True
"""
