"""Process-wide unique ids (``flaxen.ids``): one counter for Linen modules and NNX graph nodes.

``uuid()`` hands out a fresh :class:`FlaxId`. Ids compare and hash by their number, and copying
one (``copy.copy`` / ``copy.deepcopy``) gives a *new* id, so a copied object never shares an
identity with its original.

>>> from flaxen import ids
>>> a, b = ids.uuid(), ids.uuid()
>>> a == a, a == b
(True, False)
>>> import copy
>>> copy.copy(a) == a
False
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

__all__ = ["FlaxId", "UUIDManager", "uuid"]


class UUIDManager:
    """A thread-safe counter that returns increasing :class:`FlaxId` values when called.

    >>> new_id = UUIDManager()
    >>> new_id().rawid < new_id().rawid
    True
    """

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def __call__(self) -> FlaxId:
        with self._lock:
            return FlaxId(next(self._counter))


class FlaxId:
    """A unique integer id; copies are new ids (see the module docstring).

    The number is ``.rawid``; ``.id`` is the same number under the name Flax code reads.

    >>> FlaxId(7).id
    7
    """

    # no __slots__: Flax's FlaxId accepts extra attributes, and code that tags ids relies on it
    def __init__(self, rawid: int) -> None:
        self.rawid = rawid

    @property
    def id(self) -> int:
        return self.rawid

    @id.setter
    def id(self, value: int) -> None:
        self.rawid = value

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, FlaxId) and self.rawid == other.rawid

    def __hash__(self) -> int:
        return hash(self.rawid)

    def __repr__(self) -> str:
        return f"FlaxId({self.rawid})"

    def __copy__(self) -> FlaxId:
        return uuid()

    def __deepcopy__(self, memo: dict) -> FlaxId:
        del memo
        return uuid()


uuid = UUIDManager()
