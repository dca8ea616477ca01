"""flaxen.core.nn: functional layers written against Scopes (no Module classes).

Each layer is a plain function whose first argument is the :class:`~flaxen.core.Scope` its
params live on; names, signatures and numerics follow ``flax.core.nn``.

>>> import jax, jax.numpy as jnp
>>> from flaxen.core import init, nn
>>> y, v = init(nn.dense)(jax.random.PRNGKey(0), jnp.ones((2, 3)), 4)
>>> sorted(v['params'])
['bias', 'kernel']
"""

from flaxen.layer_math import initializers

from flaxen.core.nn import activation, attention, linear, normalization, pooling, stochastic
from flaxen.core.nn.activation import (
    celu,
    elu,
    gelu,
    glu,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    relu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    swish,
    tanh,
)
from flaxen.core.nn.attention import dot_product_attention, multi_head_dot_product_attention
from flaxen.core.nn.linear import (
    Embedding,
    conv,
    conv_transpose,
    dense,
    dense_general,
    embedding,
)
from flaxen.core.nn.normalization import batch_norm, group_norm, layer_norm
from flaxen.core.nn.pooling import avg_pool, max_pool
from flaxen.core.nn.stochastic import dropout

__all__ = [
    "Embedding", "activation", "attention", "avg_pool", "batch_norm", "celu", "conv",
    "conv_transpose", "dense", "dense_general", "dot_product_attention", "dropout", "elu",
    "embedding", "gelu", "glu", "group_norm", "initializers", "layer_norm", "leaky_relu",
    "linear", "log_sigmoid", "log_softmax", "max_pool", "multi_head_dot_product_attention",
    "normalization", "pooling", "relu", "sigmoid", "silu", "soft_sign", "softmax", "softplus",
    "stochastic", "swish", "tanh",
]
