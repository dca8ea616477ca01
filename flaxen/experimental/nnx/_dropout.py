"""Flax 0.8.3's ``nnx.Dropout`` (``flaxen.experimental.nnx`` only): it keeps the whole ``Rngs``
given at construction (today's keeps a fork of one stream, see
:mod:`flaxen.nnx.nn.stochastic`) and takes ``broadcast_dims`` positionally.

Keys come from ``rngs`` passed to the call, else from the ``rngs`` given at construction,
stream ``rng_collection`` (default ``'dropout'``).

>>> import jax.numpy as jnp
>>> from flaxen.experimental import nnx
>>> drop = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=0))
>>> y = drop(jnp.ones(8))
>>> sorted(set(y.tolist())) in ([0.0, 2.0], [2.0], [0.0])
True
>>> drop(jnp.ones(2), deterministic=True).tolist()
[1.0, 1.0]
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.nnx.module import Module
from flaxen.nnx.rnglib import Rngs


class Dropout(Module):
    """Randomly zeroes ``rate`` of the inputs and rescales the rest by ``1 / (1 - rate)``."""

    def __init__(
        self,
        rate: float,
        broadcast_dims: tp.Sequence[int] = (),
        deterministic: bool = False,
        rng_collection: str = "dropout",
        rngs: Rngs | None = None,
    ) -> None:
        self.rate = rate
        self.broadcast_dims = tuple(broadcast_dims)
        self.deterministic = deterministic
        self.rng_collection = rng_collection
        self.rngs = rngs

    def __call__(self, inputs: jax.Array, *, deterministic: bool | None = None,
                 rngs: Rngs | None = None) -> jax.Array:
        deterministic = self.deterministic if deterministic is None else deterministic
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        rngs = rngs if rngs is not None else self.rngs
        if rngs is None:
            raise ValueError(
                "`deterministic` is False, but no `rngs` argument was provided to Dropout as "
                "either a __call__ argument or class attribute. Dropout draws its mask from the "
                f"{self.rng_collection!r} stream: pass rngs=nnx.Rngs({self.rng_collection}=0) "
                "to the constructor or to the call, or call it with deterministic=True "
                "(model.eval())."
            )
        key = rngs[self.rng_collection]()
        keep_prob = 1.0 - self.rate
        shape = list(inputs.shape)
        for d in self.broadcast_dims:
            shape[d] = 1
        mask = jax.random.bernoulli(key, p=keep_prob, shape=shape)
        mask = jnp.broadcast_to(mask, inputs.shape)
        return lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))
