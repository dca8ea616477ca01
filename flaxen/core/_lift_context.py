"""Small helpers of the lifted transforms that Flax exposes from ``flax.core.lift``.

``TransformContext`` is a per-thread stack of values (a transform pushes what its inner
function needs while it runs); ``CountsHolder`` does arithmetic on nested RNG counters;
``set_from_dict`` merges nested dicts in place.

>>> ctx = TransformContext[int]()
>>> with ctx.push(3):
...     ctx.get()
3
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from flaxen import traverse_util

A = TypeVar("A")


def id_fn(x: Any) -> Any:
    """Returns ``x`` (the default variable mapping of ``map_variables``).

    >>> id_fn(3)
    3
    """
    return x


@dataclasses.dataclass
class TransformContext(Generic[A], threading.local):
    """A stack of values, one per thread; ``push`` adds one for the length of a block.

    >>> ctx = TransformContext[str]()
    >>> with ctx.push('outer'), ctx.push('inner'):
    ...     ctx.get(), len(ctx.stack)
    ('inner', 2)
    """

    stack: list[A] = dataclasses.field(default_factory=list)

    @contextlib.contextmanager
    def push(self, a: A) -> Iterator[None]:
        self.stack.append(a)
        try:
            yield
        finally:
            self.stack.pop()

    def get(self) -> A:
        """The innermost value (IndexError when nothing is pushed)."""
        return self.stack[-1]


class CountsHolder:
    """Nested counters (e.g. a Scope's ``rng_counters`` tree) kept flat for arithmetic.

    >>> a = CountsHolder.make({'params': 3, 'sub': {'dropout': 1}})
    >>> b = CountsHolder.make({'params': 1, 'sub': {'dropout': 1}})
    >>> a.sub(b).unflat()
    {'params': 2, 'sub': {'dropout': 0}}
    """

    def __init__(self, flat_d: dict) -> None:
        self.flat_d = flat_d

    @classmethod
    def make(cls, d: Any) -> CountsHolder:
        return cls(dict(traverse_util.flatten_dict(d)))

    def _combine(self, other: CountsHolder, sign: int) -> CountsHolder:
        mine = collections.defaultdict(int, self.flat_d)
        theirs = collections.defaultdict(int, other.flat_d)
        return CountsHolder({k: mine[k] + sign * theirs[k] for k in mine})

    def sub(self, other: CountsHolder) -> CountsHolder:
        """``self - other`` key by key (keys of ``self``; missing ones count 0)."""
        return self._combine(other, -1)

    def add(self, other: CountsHolder) -> CountsHolder:
        """``self + other`` key by key (keys of ``self``; missing ones count 0)."""
        return self._combine(other, 1)

    def unflat(self) -> Any:
        """The counters as a nested dict again."""
        return traverse_util.unflatten_dict(self.flat_d)


def set_from_dict(original: dict, updates: Any) -> None:
    """Writes ``updates`` into ``original`` in place, merging nested dicts.

    >>> d = {'a': {'x': 1}, 'b': 2}
    >>> set_from_dict(d, {'a': {'y': 3}, 'b': 4})
    >>> d
    {'a': {'x': 1, 'y': 3}, 'b': 4}
    """
    for key in updates:
        if key in original and isinstance(updates[key], dict):
            set_from_dict(original[key], updates[key])
        else:
            original[key] = updates[key]


__all__ = ["A", "CountsHolder", "TransformContext", "id_fn", "set_from_dict"]
