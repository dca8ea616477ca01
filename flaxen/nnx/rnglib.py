"""RNG streams as module state: ``Rngs``, ``RngStream`` and the key/count Variables.

Each stream holds a base key (:class:`RngKey`) and a counter (:class:`RngCount`); calling it
returns ``jax.random.fold_in(key, count)`` and increments the count, so the keys a model
draws are reproducible and, inside transforms, traced like any other state.

>>> import jax
>>> from flaxen import nnx
>>> rngs = nnx.Rngs(0, dropout=1)
>>> k1, k2 = rngs.params(), rngs.params()     # 'params' falls back to the default stream
>>> bool((jax.random.key_data(k1) != jax.random.key_data(k2)).any())
True
>>> int(rngs.default.count.value), int(rngs['dropout'].count.value)
(2, 0)
"""

from __future__ import annotations

import typing as tp

import jax
import numpy as np

from flaxen.errors import NNXArgumentError, RngStreamNotFoundError, TraceContextError
from flaxen.nnx import filterlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._trace import current_trace as _current_trace
from flaxen.nnx.state import State
from flaxen.nnx.variables import Variable

SplitPattern = int | tuple[int, ...] | None


class RngState(Variable[jax.Array]):
    """Base kind of RNG state; the ``tag`` metadata names the stream."""

    __slots__ = ()


class RngKey(RngState):
    __slots__ = ()


class RngCount(RngState):
    """A stream's draw counter. A string filter naming the stream picks its key, not this
    counter (select counters with ``nnx.RngCount``)."""

    __slots__ = ()
    _string_filter_exempt = True


# Eager ``jax.random.fold_in`` converts and checks its arguments in Python and dispatches a
# primitive (~8x the cost of a jitted call), and model construction draws one key per
# parameter. The jitted function computes the same bits; it is used only on concrete keys
# with the stream's own uint32 counts, so traced code and unusual counts keep the public path.
_fold_in_jit = jax.jit(jax.random.fold_in)
_Tracer = jax.core.Tracer


def _to_key(value: tp.Any, tag: str) -> jax.Array:
    if isinstance(value, (int, np.integer)):
        return jax.random.key(int(value))
    if isinstance(value, jax.Array) or isinstance(value, np.ndarray):
        return value
    raise NNXArgumentError(
        f"/{tag}", f"Rngs stream {tag!r}: expected an int seed or a JAX PRNG key, got a "
        f"{type(value).__name__}", f"Pass e.g. nnx.Rngs({tag}=0) or a jax.random.key(0).")


class RngStream(GraphNode):
    """One named stream: ``stream()`` gives a fresh key; ``stream.fork(n)`` n split keys."""

    def __init__(self, tag: str, key: tp.Any, count: tp.Any = 0) -> None:
        self.tag = tag
        self.key = RngKey(_to_key(key, tag), tag=tag)
        self.count = RngCount(np.uint32(count) if isinstance(count, int) else count, tag=tag)

    def __call__(self) -> jax.Array:
        if self._nnx_trace is not _current_trace():
            raise TraceContextError(
                f"Cannot call RngStream from a different trace level: the {self.tag!r} stream "
                "was created under another JAX trace than the current one (captured by "
                "closure inside a transform, or created inside one and used outside). Pass "
                "the Rngs as an argument of the nnx transform instead.")
        count = self.count
        c = count.value
        base = self.key.value
        if type(c) is np.uint32 and not isinstance(base, _Tracer):
            key = _fold_in_jit(base, c)
        else:
            key = jax.random.fold_in(base, c)
        count.value = c + 1
        return key

    def fork(self, pattern: SplitPattern = None) -> jax.Array:
        key = self()
        if pattern is None:
            return key
        return jax.random.split(key, pattern)

    def __repr__(self) -> str:
        return f"RngStream(tag={self.tag!r}, count={self.count.value!r})"


class Rngs(GraphNode):
    """Named RNG streams. ``Rngs(0)`` or ``Rngs(params=0, dropout=1)`` or both.

    ``rngs.name()`` / ``rngs['name']()`` / ``rngs()`` (the ``default`` stream) return fresh
    keys; a stream that was not given falls back to ``default`` when there is one.
    """

    def __init__(self, default: tp.Any = None, /, **rngs: tp.Any) -> None:
        if default is not None:
            rngs = {"default": default, **rngs}
        for tag, key in rngs.items():
            if isinstance(key, RngStream):
                key = key.key.value
            object.__setattr__(self, tag, RngStream(tag, key))
        from flaxen.nnx._trace import bump

        bump()

    def _stream(self, name: str) -> RngStream:
        d = self.__dict__
        stream = d.get(name)
        if stream is None:
            stream = d.get("default")
            if stream is None:
                raise RngStreamNotFoundError(
                    "", f"No RNG named {name!r} in this Rngs (it has {sorted(d) or 'none'}), "
                    "and no 'default' stream to fall back to",
                    f"Create it with nnx.Rngs({name}=seed), or give a default: "
                    "nnx.Rngs(seed).")
        return stream

    def __getattr__(self, name: str) -> RngStream:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._stream(name)

    def __getitem__(self, name: str) -> RngStream:
        try:
            return self._stream(name)
        except AttributeError as e:
            raise KeyError(str(e)) from None

    def __call__(self) -> jax.Array:
        return self._stream("default")()

    def __contains__(self, name: str) -> bool:
        return name in self.__dict__

    def __iter__(self) -> tp.Iterator[str]:
        return iter(self.__dict__)

    def __len__(self) -> int:
        return len(self.__dict__)

    def items(self) -> tp.Iterator[tuple[str, RngStream]]:
        return iter(self.__dict__.items())

    def fork(self, pattern: SplitPattern = None, /, **per_stream: SplitPattern
             ) -> dict[str, jax.Array]:
        """A new key (or ``split`` keys, by ``pattern``) per stream, advancing each stream."""
        return {tag: s.fork(per_stream.get(tag, pattern)) for tag, s in self.__dict__.items()}

    def __repr__(self) -> str:
        return f"Rngs({', '.join(self.__dict__)})"


def _split_shape(pattern: SplitPattern) -> tuple[int, ...]:
    """``(4, None, 3)`` -> ``(4, 1, 3)``: None marks an axis the keys are broadcast along."""
    if isinstance(pattern, int):
        return (pattern,)
    return tuple(1 if p is None else p for p in pattern)


def fork(state: State, split_filter: filterlib.Filter, split_pattern: SplitPattern
         ) -> tuple[State, State]:
    """Splits the RNG keys matching ``split_filter`` into ``split_pattern`` keys.

    Returns ``(split_state, broadcast_state)``: each matching stream's key becomes
    ``split(fold_in(key, count), shape)`` (``None`` entries of the pattern give size-1 axes)
    in ``split_state``; every count and the other keys stay as they are in
    ``broadcast_state``.
    """
    pred = filterlib.to_predicate(split_filter)
    flat = state.flat_state()
    shape = _split_shape(split_pattern)
    n = int(np.prod(shape))
    split_items, bcast_items = [], []
    for path, leaf in flat.items():
        if leaf.type is RngKey and pred(path, leaf):
            count_leaf = flat.get((*path[:-1], "count"))
            count = count_leaf.value if count_leaf is not None else 0
            keys = jax.random.split(jax.random.fold_in(leaf.value, count), n)
            split_items.append((path, leaf.replace(keys.reshape(shape))))
        else:
            bcast_items.append((path, leaf))
    return State.from_flat_path(split_items), State.from_flat_path(bcast_items)
