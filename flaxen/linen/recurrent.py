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

from typing import Any, TypeVar

import jax
from typing_extensions import Protocol  # Flax's Protocols are typing_extensions' ones

from flaxen.linen._cells import (
    ConvLSTMCell,
    DenseParams,
    GRUCell,
    LSTMCell,
    MGUCell,
    OptimizedLSTMCell,
    RNNCellBase,
    SimpleCell,
)
from flaxen.linen._rnn import RNN, Bidirectional, flip_sequences

A = TypeVar("A")
Carry = Any
CarryHistory = Any
Output = Any


class RNNBase(Protocol):
    """What ``Bidirectional`` expects of its forward and backward layers (``RNN`` fits).

    >>> import flaxen.linen as nn
    >>> nn.recurrent.RNNBase.__call__.__name__
    '__call__'
    """

    def __call__(
        self,
        inputs: jax.Array,
        *,
        initial_carry: Carry | None = None,
        init_key: Any | None = None,
        seq_lengths: Any | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Output | tuple[Carry, Output]: ...

__all__ = [
    "A",
    "Carry",
    "CarryHistory",
    "DenseParams",
    "Output",
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

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen.core import FrozenDict  # noqa: E402, F401
from flaxen.linen import initializers, transforms  # noqa: E402, F401
from flaxen.linen.dtypes import promote_dtype  # noqa: E402, F401
from flaxen.linen.linear import Conv, Dense  # noqa: E402, F401
from flaxen.linen.module import Module, compact, nowrap  # noqa: E402, F401

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import (  # noqa: E402, F401
    Array,
    Dtype,
    Initializer,
    InOutScanAxis,
    PrecisionLike,
    PRNGKey,
)
