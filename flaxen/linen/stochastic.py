"""``Dropout``: randomly zeroes inputs during training and rescales the survivors.

The mask is drawn from the ``'dropout'`` RNG stream (``rng_collection``), so training
calls need ``rngs={'dropout': key}``; with ``deterministic=True`` inputs pass through.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> layer = nn.Dropout(rate=0.5, deterministic=True)
>>> layer.apply({}, jnp.ones(3)).tolist()
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax, random

from flaxen.linen.module import Module, compact, merge_param

__all__ = ["Dropout"]


class Dropout(Module):
    """Zeroes each input with probability ``rate`` and scales the rest by ``1/(1-rate)``.

    Attributes:
      rate: probability of dropping an element (not of keeping it).
      broadcast_dims: axes along which the same mask is shared (e.g. ``(1,)`` drops
        whole time steps' features alike for ``(batch, time, features)``).
      deterministic: if True, return inputs unchanged; set it here or at call time
        (exactly one of the two).
      rng_collection: the RNG stream the mask is drawn from (default ``'dropout'``).

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> y = nn.Dropout(0.5).apply({}, jnp.ones((2, 4)), deterministic=False,
    ...                           rngs={'dropout': jax.random.key(0)})
    >>> sorted(set(y.ravel().tolist())) in ([0.0, 2.0], [0.0], [2.0])
    True
    """

    rate: float
    broadcast_dims: Sequence[int] = ()
    deterministic: bool | None = None
    rng_collection: str = "dropout"

    @compact
    def __call__(
        self, inputs: jax.Array, deterministic: bool | None = None, rng: jax.Array | None = None
    ) -> jax.Array:
        """Applies dropout; ``rng`` overrides the key drawn from ``rng_collection``."""
        deterministic = merge_param("deterministic", self.deterministic, deterministic)
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate == 1.0:
            # Everything is dropped; there is nothing to rescale and no key is needed.
            return jnp.zeros_like(inputs)
        keep_prob = 1.0 - self.rate
        if rng is None:
            rng = self.make_rng(self.rng_collection)
        mask_shape = list(jnp.shape(inputs))
        for dim in self.broadcast_dims:
            mask_shape[dim] = 1
        mask = random.bernoulli(rng, p=keep_prob, shape=mask_shape)
        mask = jnp.broadcast_to(mask, jnp.shape(inputs))
        return lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import PRNGKey  # noqa: E402, F401
