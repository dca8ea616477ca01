"""Linen's path for the layer argument/shape exceptions; they live in
:mod:`flaxen.layer_math.errors` (shared with NNX) and are re-exported here unchanged."""

from flaxen.layer_math.errors import (
    LayerAxisError,
    LayerAxisOverlapError,
    LayerPaddingError,
    LayerRankError,
    LayerShapeError,
)

__all__ = [
    "LayerAxisError",
    "LayerAxisOverlapError",
    "LayerPaddingError",
    "LayerRankError",
    "LayerShapeError",
]
