"""Errors NNX raises (the classes live in :mod:`flaxen.errors`; this path is kept)."""

from flaxen.errors import (
    FlaxError,
    GraphStateMismatchError,
    GraphUpdateStaticError,
    NNXArgumentError,
    NNXError,
    NNXFilterError,
    NNXTransformError,
    NotAGraphNodeError,
    RngStreamNotFoundError,
    SetAttributesNotFoundError,
    SowTypeError,
    TraceContextError,
)

__all__ = [
    "FlaxError", "GraphStateMismatchError", "GraphUpdateStaticError", "NNXArgumentError",
    "NNXError", "NNXFilterError", "NNXTransformError", "NotAGraphNodeError",
    "RngStreamNotFoundError", "SetAttributesNotFoundError", "SowTypeError", "TraceContextError",
]
