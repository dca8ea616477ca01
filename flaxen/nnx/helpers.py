"""``nnx.helpers``: the small conveniences today's ``flax.nnx.helpers`` gathers in one place.

``TrainState`` (the functional train state: graphdef + State + Optax) lives in
:mod:`flaxen.nnx.training.train_state`; the containers ``Dict``, ``List`` and ``Sequential``
in :mod:`flaxen.nnx.module`. This module re-exports them under Flax's path.

>>> from flaxen.nnx import helpers
>>> helpers.TrainState.__name__, helpers.Sequential.__name__
('TrainState', 'Sequential')
"""

from __future__ import annotations

from flaxen.nnx.module import Dict, List, Sequential
from flaxen.nnx.training.train_state import TrainState

__all__ = ["Dict", "List", "Sequential", "TrainState"]
