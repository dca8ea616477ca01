"""Today's ``nnx.Dropout``: zeroes inputs with probability ``rate`` while not deterministic.

Given ``rngs`` at construction (an ``Rngs`` or an ``RngStream``) the layer keeps its own
fork of the ``rng_collection`` stream (``self.rngs``, an ``RngStream``), so its keys do not
depend on how often the caller's ``Rngs`` is used elsewhere. A call's ``rngs`` (an ``Rngs``,
an ``RngStream`` or a key) takes precedence. Flax 0.8.3's version, which keeps the whole
``Rngs``, is ``flaxen.experimental.nnx.Dropout``.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
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
from flaxen.nnx.nn._common import data
from flaxen.nnx.rnglib import Rngs, RngStream

__all__ = ["Dropout"]


def _explicit(sharding: tp.Any) -> bool:
    """Whether ``sharding`` lives on a mesh with explicit axes (then ops need out_sharding)."""
    mesh = getattr(sharding, "mesh", None)
    return bool(getattr(mesh, "explicit_axes", ()))


class Dropout(Module):
    """Randomly zeroes ``rate`` of the inputs and rescales the rest by ``1 / (1 - rate)``.

    ``broadcast_dims`` share one mask value along those axes.
    """

    def __init__(
        self,
        rate: float,
        *,
        broadcast_dims: tp.Sequence[int] = (),
        deterministic: bool | None = False,
        rng_collection: str = "dropout",
        rngs: Rngs | RngStream | None = None,
    ) -> None:
        self.rate = rate
        self.broadcast_dims = broadcast_dims  # as given, as Flax keeps it
        self.deterministic = deterministic
        self.rng_collection = rng_collection
        # RngStream.fork explicitly: the 0.8.3 face's stream subclass forks into keys
        if isinstance(rngs, Rngs):
            self.rngs = RngStream.fork(rngs[rng_collection])
        elif isinstance(rngs, RngStream):
            self.rngs = RngStream.fork(rngs)
        elif rngs is None:
            self.rngs = data(None)
        else:
            raise TypeError(
                f"Dropout: rngs must be an nnx.Rngs, an nnx.RngStream or None, but got "
                f"{type(rngs).__name__}. Pass rngs=nnx.Rngs({rng_collection}=0)."
            )

    def __call__(
        self,
        inputs: jax.Array,
        *,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | jax.Array | None = None,
    ) -> jax.Array:
        """Applies a random dropout mask (or returns ``inputs`` when deterministic)."""
        deterministic = self.deterministic if deterministic is None else deterministic
        if deterministic is None:
            raise ValueError(
                "No `deterministic` argument was provided to Dropout: pass it to the "
                "constructor (nnx.Dropout(..., deterministic=True/False)), to the call "
                "(dropout(x, deterministic=...)), or set it with nnx.view(model, "
                "deterministic=...) / model.eval()."
            )
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
        if isinstance(rngs, Rngs):
            key = rngs[self.rng_collection]()
        elif isinstance(rngs, RngStream):
            key = rngs()
        elif isinstance(rngs, jax.Array):
            key = rngs
        else:
            raise TypeError(
                "Dropout: rngs must be an nnx.Rngs, an nnx.RngStream or a key, but got "
                f"{type(rngs).__name__}."
            )
        keep_prob = 1.0 - self.rate
        shape = list(inputs.shape)
        for d in self.broadcast_dims:
            shape[d] = 1
        # the mask takes the inputs' sharding (explicit-sharding meshes keep their layout)
        sharding = getattr(jax.typeof(inputs), "sharding", None)
        kw: dict[str, tp.Any] = {"out_sharding": sharding} if _explicit(sharding) else {}
        mask = jax.random.bernoulli(key, p=keep_prob, shape=shape, **kw)
        mask = jnp.broadcast_to(mask, inputs.shape)
        return lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))

    def set_view(self, deterministic: bool | None = None) -> None:
        """Hook of ``nnx.view``.

        Args:
          deterministic: if given, whether calls skip the dropout mask (True) or apply it.
        """
        if deterministic is not None:
            self.deterministic = deterministic
