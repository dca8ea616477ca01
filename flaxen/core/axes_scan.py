"""Helpers for scanning over pytrees along arbitrary axes, and the ``broadcast`` marker.

``in_axes`` of :func:`flaxen.core.lift.scan` may name an axis per input leaf, or
:data:`broadcast` for inputs passed whole to every iteration.

>>> import jax.numpy as jnp
>>> move_to_front({'a': jnp.zeros((2, 5))}, 1)['a'].shape
(5, 2)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


class _Broadcast:
    """Marks a scan input that is passed unchanged to every iteration."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "broadcast"

    def __reduce__(self):
        return (_Broadcast, ())


broadcast = _Broadcast()


def move_to_front(tree: Any, axis: int) -> Any:
    """Moves ``axis`` of every leaf to position 0."""
    if axis == 0:
        return tree
    return jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, axis, 0), tree)


def move_from_front(tree: Any, axis: int) -> Any:
    """Moves axis 0 of every leaf to position ``axis``."""
    if axis == 0:
        return tree
    return jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, 0, axis), tree)


def broadcast_prefix(prefix: Any, tree: Any) -> list:
    """One entry of the prefix tree ``prefix`` per leaf of ``tree`` (None/broadcast are leaves)."""
    out: list = []

    def add(p: Any, subtree: Any) -> None:
        out.extend([p] * len(jax.tree_util.tree_leaves(subtree)))

    jax.tree_util.tree_map(add, prefix, tree,
                           is_leaf=lambda x: x is None or x is broadcast)
    return out
