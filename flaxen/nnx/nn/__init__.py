"""NNX layers (``flaxen.nnx.nn``): linear, convolution, embedding, normalization, dropout,
attention, plus the activation, initializer and pooling functions shared with Linen."""
