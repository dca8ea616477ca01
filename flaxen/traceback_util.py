"""Hide flaxen's own frames from tracebacks, the way JAX hides its internal frames.

JAX filters the traceback of an exception that escapes one of its API boundaries
(``jax.jit``, ``jax.grad``, ...; see ``jax.config.jax_traceback_filtering``): frames whose
file lies under a registered path are dropped. This module registers flaxen's package
directory, so a user's error surfaces with the user's own frames, not flaxen's plumbing.
It is on by default (flag ``flax_filter_frames``, env ``FLAX_FILTER_FRAMES``); turn it off
to debug flaxen itself:

>>> from flaxen import traceback_util
>>> traceback_util.show_flax_in_tracebacks()
>>> traceback_util.is_hiding_flax_frames()
False
>>> traceback_util.hide_flax_in_tracebacks()
>>> traceback_util.is_hiding_flax_frames()
True

flaxen entry points may wrap themselves with :func:`api_boundary` (JAX's) to become
filtering boundaries of their own.
"""

from __future__ import annotations

import os

from jax._src import source_info_util as _source_info_util
from jax._src import traceback_util as _jax_traceback_util

from flaxen.configurations import config

__all__ = [
    "api_boundary",
    "hide_flax_in_tracebacks",
    "is_hiding_flax_frames",
    "show_flax_in_tracebacks",
]

api_boundary = _jax_traceback_util.api_boundary

# The whole package directory: every flaxen file, present and future, is covered.
FLAXEN_DIR = os.path.dirname(os.path.abspath(__file__))

_registered_with_jax = False


def _remove_all(paths: list[str], path: str) -> None:
    while path in paths:
        paths.remove(path)


def hide_flax_in_tracebacks() -> None:
    """Drop flaxen's frames from tracebacks of errors raised through JAX boundaries.

    Idempotent. Also makes JAX attribute operations to the user's line rather than a
    flaxen line in source info (jaxpr / HLO metadata).
    """
    global _registered_with_jax
    if not _registered_with_jax:
        # JAX's own registration also informs its C++ side; do it once, since that side
        # has no removal and would otherwise accumulate duplicates.
        _jax_traceback_util.register_exclusion(FLAXEN_DIR)
        _source_info_util.register_exclusion(FLAXEN_DIR)
        _registered_with_jax = True
    else:
        if FLAXEN_DIR not in _jax_traceback_util._exclude_paths:
            _jax_traceback_util._exclude_paths.append(FLAXEN_DIR)
        if FLAXEN_DIR not in _source_info_util._exclude_paths:
            _source_info_util._exclude_paths.append(FLAXEN_DIR)
            _source_info_util._exclude_path_regex.cache_clear()
    config.update("flax_filter_frames", True)


def show_flax_in_tracebacks() -> None:
    """Keep flaxen's frames in tracebacks (useful when debugging flaxen itself)."""
    _remove_all(_jax_traceback_util._exclude_paths, FLAXEN_DIR)
    _remove_all(_source_info_util._exclude_paths, FLAXEN_DIR)
    _source_info_util._exclude_path_regex.cache_clear()
    config.update("flax_filter_frames", False)


def is_hiding_flax_frames() -> bool:
    """Whether flaxen frames are currently filtered from tracebacks."""
    return FLAXEN_DIR in _jax_traceback_util._exclude_paths


if config.flax_filter_frames:
    hide_flax_in_tracebacks()
