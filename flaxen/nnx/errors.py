"""Errors NNX raises (the classes live in :mod:`flaxen.errors`)."""

from flaxen.errors import FlaxError, TraceContextError

__all__ = ["FlaxError", "TraceContextError"]
