"""Recurrent layers: cells (``LSTMCell``, ``GRUCell``, ...), ``RNN`` and ``Bidirectional``.

The cells live in ``flaxen.linen._cells`` and the sequence layers in
``flaxen.linen._rnn``; this module is Flax's public path for both.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> layer = nn.RNN(nn.LSTMCell(features=8))
>>> x = jnp.ones((4, 10, 3))
>>> layer.apply(layer.init(jax.random.PRNGKey(0), x), x).shape
(4, 10, 8)
"""

from __future__ import annotations

from flaxen.linen._cells import (
    ConvLSTMCell,
    GRUCell,
    LSTMCell,
    MGUCell,
    OptimizedLSTMCell,
    RNNCellBase,
    SimpleCell,
)
from flaxen.linen._rnn import RNN, Bidirectional, flip_sequences

RNNBase = RNN  # the type Bidirectional's fields expect (a Protocol in Flax)

__all__ = [
    "RNN",
    "Bidirectional",
    "ConvLSTMCell",
    "GRUCell",
    "LSTMCell",
    "MGUCell",
    "OptimizedLSTMCell",
    "RNNBase",
    "RNNCellBase",
    "SimpleCell",
    "flip_sequences",
]
