"""flaxen.core.nn: functional layers written against Scopes (no Module classes).

>>> import jax, jax.numpy as jnp
>>> from flaxen.core import init, nn
>>> y, v = init(nn.dense)(jax.random.PRNGKey(0), jnp.ones((2, 3)), 4)
>>> sorted(v['params'])
['bias', 'kernel']
"""

from jax.nn import (
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
)
from jax.nn import initializers
from jax.numpy import tanh

from flaxen.core.nn.linear import Embedding, conv, dense, embedding
from flaxen.core.nn.normalization import batch_norm, group_norm, layer_norm
from flaxen.core.nn.stochastic import dropout

__all__ = [
    "Embedding", "batch_norm", "celu", "conv", "dense", "dropout", "elu", "embedding", "gelu",
    "glu", "group_norm", "initializers", "layer_norm", "leaky_relu", "log_sigmoid",
    "log_softmax", "relu", "sigmoid", "silu", "soft_sign", "softmax", "softplus", "swish",
    "tanh",
]
