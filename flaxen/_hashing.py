"""Hashable stand-ins for unhashable values, shared by the Linen and NNX transform caches.

Transforms key their trace caches on static configuration (Module fields, graph
definitions). A value that cannot be hashed (an array field, a list in metadata) is held by
an :class:`Identity`: equal only to a holder of the very same object, so two calls share a
trace only when they pass that object itself.

>>> import numpy as np
>>> a = np.ones(2)
>>> hashable(a) == hashable(a), hashable(a) == hashable(np.ones(2)), hashable(3)
(True, False, 3)
>>> unwrap(hashable(a)) is a
True
"""

from __future__ import annotations

from typing import Any


class Identity:
    """Holds an unhashable value; equal only to a holder of the same object.

    It keeps the value alive, so its id cannot be reused by another object while a cache
    key containing the holder exists.
    """

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<unhashable {type(self.obj).__name__}>"


def hashable(value: Any) -> Any:
    """``value`` itself when it can be hashed, else an :class:`Identity` holding it."""
    try:
        hash(value)
    except TypeError:
        return Identity(value)
    return value


def unwrap(value: Any) -> Any:
    """The inverse of :func:`hashable`."""
    return value.obj if type(value) is Identity else value
