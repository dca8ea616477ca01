"""``flaxen.nnx.ids``: the NNX path of the shared id counter (same objects as :mod:`flaxen.ids`).

>>> from flaxen.nnx import ids
>>> ids.uuid() != ids.uuid()
True
"""

from __future__ import annotations

import typing as tp

from flaxen.ids import FlaxId, UUIDManager, uuid


class UUID:
    """A hashable id whose copies are new ids (``copy``/``deepcopy`` draw a fresh one).

    >>> import copy
    >>> a = UUID(7)
    >>> a == UUID(7), copy.copy(a) == a
    (True, False)
    """

    def __init__(self, rawid: tp.Any):
        self.id = rawid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UUID) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"UUID({self.id})"

    # a copied object is a different object: it must not share the original's identity
    def __deepcopy__(self, memo: dict) -> tp.Any:
        return uuid()

    def __copy__(self) -> tp.Any:
        return uuid()


__all__ = ["UUID", "FlaxId", "UUIDManager", "uuid"]
