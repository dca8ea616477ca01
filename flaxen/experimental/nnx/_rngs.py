"""Flax 0.8.3's faces of ``Rngs`` and ``RngStream`` (``flaxen.experimental.nnx`` only).

They differ from today's (:mod:`flaxen.nnx.rnglib`) in three places, kept here as
subclasses so every layer accepts both: ``RngStream(tag, key, count)`` is built positionally,
``stream.fork(pattern)`` / ``rngs.fork(pattern, **per_stream)`` return keys (a dict of keys
for ``Rngs``) instead of new streams, and the error messages use 0.8.3's wording.

>>> from flaxen.experimental import nnx
>>> rngs = nnx.Rngs(params=0, dropout=1)
>>> keys = rngs.fork(4, dropout=None)
>>> keys['params'].shape, keys['dropout'].shape
((4,), ())
"""

from __future__ import annotations

import typing as tp

import jax
import numpy as np

from flaxen.errors import RngStreamNotFoundError, TraceContextError
from flaxen.experimental.nnx.filterlib import convert
from flaxen.nnx import _trace, filterlib, rnglib
from flaxen.nnx.rnglib import RngCount, RngKey, SplitPattern, _to_key
from flaxen.nnx.statelib import State


class RngStream(rnglib.RngStream):
    """One named stream: ``stream()`` gives a fresh key; ``stream.fork(n)`` n split keys."""

    _nnx_lenient_trace = True  # 0.8.3: usable under jax.grad / jax.vmap of its own level

    def __init__(self, tag: str, key: tp.Any, count: tp.Any = 0) -> None:
        self.tag = tag
        self.key = RngKey(_to_key(key, tag), tag=tag)
        self.count = RngCount(
            np.uint32(count) if isinstance(count, int) else count,  # type: ignore[arg-type]
            tag=tag)

    def __call__(self) -> jax.Array:
        if self._nnx_trace is not _trace.current_trace() and self._lenient_trace_ok():
            # 0.8.3 let a stream captured under jax.grad / jax.vmap of its own level draw
            # keys; the count is written past today's Variable trace check
            count = self.count
            c = count.get_raw_value()
            key = jax.random.fold_in(self.key.get_raw_value(), c)
            object.__setattr__(count, "raw_value", c + 1)
            return key
        return super().__call__()

    def _trace_error(self) -> TraceContextError:
        return TraceContextError(
            f"Cannot call RngStream from a different trace level: the {self.tag!r} stream "
            "was created under another JAX trace than the current one (captured by "
            "closure inside a transform, or created inside one and used outside). Pass "
            "the Rngs as an argument of the nnx transform instead.")

    def _new(self, key: jax.Array) -> RngStream:
        return type(self)(self.tag, key)

    def fork(self, pattern: SplitPattern = None) -> jax.Array:  # type: ignore[override]
        key = self()
        if pattern is None:
            return key
        return jax.random.split(key, pattern)


class Rngs(rnglib.Rngs):
    """Named RNG streams. ``Rngs(0)`` or ``Rngs(params=0, dropout=1)`` or both.

    ``rngs.name()`` / ``rngs['name']()`` / ``rngs()`` (the ``default`` stream) return fresh
    keys; a stream that was not given falls back to ``default`` when there is one.
    """

    _nnx_lenient_trace = True  # 0.8.3: usable under jax.grad / jax.vmap of its own level

    def _make_stream(self, tag: str, key: tp.Any) -> rnglib.RngStream:
        return RngStream(tag, key)

    def _missing(self, name: str) -> Exception:
        return RngStreamNotFoundError(
            "", f"No RNG named {name!r} in this Rngs (it has {sorted(self.__dict__) or 'none'}),"
            " and no 'default' stream to fall back to",
            f"Create it with nnx.Rngs({name}=seed), or give a default: nnx.Rngs(seed).")

    def fork(self, pattern: SplitPattern = None, /,  # type: ignore[override]
             **per_stream: SplitPattern) -> dict[str, jax.Array]:
        """A new key (or ``split`` keys, by ``pattern``) per stream, advancing each stream."""
        out = {}
        for tag, s in self.items():
            key = s()
            p = per_stream.get(tag, pattern)
            out[tag] = key if p is None else jax.random.split(key, p)
        return out


def fork(state: State, split_filter: filterlib.Filter, split_pattern: SplitPattern
         ) -> tuple[State, State]:
    """``(split_state, broadcast_state)``: the RNG keys of ``state`` matching ``split_filter``
    (a string names a stream, by 0.8.3's rule) become ``split_pattern`` keys; every count and
    the other keys stay as they are in ``broadcast_state``.

    >>> from flaxen.experimental import nnx
    >>> _, state = nnx.split(nnx.Rngs(params=0, dropout=1), nnx.RngState)
    >>> split, broadcast = nnx.fork(state, 'params', 4)
    >>> split.params.key.value.shape, len(broadcast.flat_state())
    ((4,), 3)
    """
    return rnglib.fork(state, convert(split_filter), split_pattern)
