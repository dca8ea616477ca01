"""Snapshots: detached stand-ins for a Variable that are not Variables themselves.

Today's States hold Variables. Flax 0.8.3's face (``flaxen.experimental.nnx``) holds
``VariableState`` snapshots instead, and that class lives with its face. The engine knows
snapshot classes only through this registry and this protocol:

- ``snap.type``: the Variable class it stands for; ``snap.value``: the value (never a
  Variable); ``snap._var_metadata``: a dict of metadata;
- ``cls._from_parts(type, value, metadata)``: a new snapshot owning a copy of ``metadata``.

A class registers itself once, when its module is imported; until then no snapshot exists
and none is looked for.

>>> from flaxen.nnx import _snapshots
>>> class Snap:
...     def __init__(self, type, value, metadata):
...         self.type, self.value, self._var_metadata = type, value, dict(metadata)
...     _from_parts = classmethod(lambda cls, t, v, m: cls(t, v, m))
>>> _ = _snapshots.register(Snap)
>>> _snapshots.is_snapshot(Snap(int, 1, {})), _snapshots.is_snapshot(1)
(True, False)
>>> _snapshots.SNAPSHOT_TYPES.discard(Snap)
"""

from __future__ import annotations

import typing as tp

T = tp.TypeVar("T", bound=type)

# read by exact type in hot loops (``type(x) in SNAPSHOT_TYPES``): a set lookup, no isinstance
SNAPSHOT_TYPES: set[type] = set()


def register(cls: T) -> T:
    """Marks ``cls`` as a snapshot class (see the module docstring for the protocol)."""
    if not callable(getattr(cls, "_from_parts", None)):
        raise TypeError(f"{cls.__name__} has no _from_parts(type, value, metadata) "
                        "classmethod, which the engine builds snapshots with.")
    SNAPSHOT_TYPES.add(cls)
    return cls


def is_snapshot(x: tp.Any) -> bool:
    """True when ``x`` is an instance of a registered snapshot class."""
    return type(x) in SNAPSHOT_TYPES
