"""``flaxen.nnx.ids``: the NNX path of the shared id counter (same objects as :mod:`flaxen.ids`).

>>> from flaxen.nnx import ids
>>> ids.uuid() != ids.uuid()
True
"""

from flaxen.ids import FlaxId, UUIDManager, uuid

__all__ = ["FlaxId", "UUIDManager", "uuid"]
