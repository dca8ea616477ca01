"""NNX layers (``flaxen.nnx.nn``): linear, convolution, embedding, normalization, dropout and
attention. Their math (initializers, activations, dtypes, attention, pooling, norms) comes from
:mod:`flaxen.layer_math`, shared with Linen, so importing them never loads Linen."""
