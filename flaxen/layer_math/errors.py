"""Exceptions for mistakes in layer arguments and input shapes, shared by Linen and NNX layers.

Flax reports these mistakes with whatever JAX or an ``assert`` happened to raise
(``AssertionError`` for a wrong input rank, ``RuntimeError`` for an unknown pooling
padding, ``TypeError`` for an int where a tuple is needed). The classes here subclass both
the natural built-in (``ValueError``) and the class Flax raises, so ``except`` clauses
written for Flax keep working while the message says what went wrong and how to fix it.
"""

from __future__ import annotations


class LayerRankError(ValueError, AssertionError):
    """An input or argument has the wrong number of dimensions for the layer."""


class LayerPaddingError(ValueError, RuntimeError):
    """A padding argument is neither a known string nor a sequence of (low, high) pairs."""


class LayerPaddingTypeError(LayerPaddingError, TypeError):
    """A padding argument of the wrong kind altogether (an int where pairs are needed)."""


class LayerPaddingCountError(LayerPaddingError, AssertionError):
    """A padding given as pairs, but not one ``(low, high)`` pair per window dimension."""


class LayerShapeError(ValueError, AssertionError):
    """An argument (mask, kernel size, strides...) has a shape that does not fit the layer."""


class LayerAxisError(ValueError, IndexError):
    """An axis argument names a dimension the input does not have."""


class LayerAxisOverlapError(ValueError, TypeError):
    """Two axis arguments claim the same input dimension."""
