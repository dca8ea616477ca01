"""The 0.8.3 face's attention: always the weights, then an einsum with the values.

Today's ``nnx.dot_product_attention`` hands the case without dropout or sown weights to
``jax.nn.dot_product_attention``, as Flax 0.12.8 does. Flax 0.8.3's NNX computed the weights
itself in every case, so its outputs equal Linen's bit for bit; this face keeps that.
"""

from __future__ import annotations

import inspect
import typing as tp

from flaxen.nnx.nn import attention as _today

dot_product_attention = _today.weights_then_values


class MultiHeadAttention(_today.MultiHeadAttention):
    """Today's :class:`~flaxen.nnx.MultiHeadAttention` whose default ``attention_fn`` is the
    0.8.3 face's :func:`dot_product_attention`.

    >>> import jax.numpy as jnp
    >>> from flaxen.experimental import nnx
    >>> mha = nnx.MultiHeadAttention(2, 4, decode=False, rngs=nnx.Rngs(0))
    >>> mha.attention_fn is nnx.dot_product_attention, mha(jnp.ones((1, 3, 4))).shape
    (True, (1, 3, 4))
    """

    def __init__(self, *args: tp.Any, **kwargs: tp.Any) -> None:
        kwargs.setdefault("attention_fn", dot_product_attention)
        super().__init__(*args, **kwargs)


def _signature() -> inspect.Signature:
    sig = inspect.signature(_today.MultiHeadAttention.__init__)
    params = [p.replace(default=dot_product_attention) if p.name == "attention_fn" else p
              for p in sig.parameters.values()]
    return sig.replace(parameters=params)


MultiHeadAttention.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
