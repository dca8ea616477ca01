"""Hide flaxen's own frames from tracebacks, the way JAX hides its internal frames.

JAX filters the traceback of an exception that escapes one of its API boundaries
(``jax.jit``, ``jax.grad``, ...; see ``jax.config.jax_traceback_filtering``): frames whose
file lies under a registered path are dropped. flaxen's public entry points
(``Module.init``/``apply``/``bind``/..., ``nn.init``/``nn.apply``, ``core.init``/``apply``,
the NNX transforms, ``nnx.split``/``merge``) are such boundaries too (:func:`api_boundary`),
and this module registers flaxen's package directory, so a user's error surfaces with the
user's own frames, not flaxen's plumbing. It is on by default (flag
``flax_filter_frames``, env ``FLAX_FILTER_FRAMES``); turn it off to debug flaxen itself:

>>> from flaxen import traceback_util
>>> traceback_util.show_flax_in_tracebacks()
>>> traceback_util.is_hiding_flax_frames()
False
>>> traceback_util.hide_flax_in_tracebacks()
>>> traceback_util.is_hiding_flax_frames()
True
"""

from __future__ import annotations

import os

from jax._src import source_info_util as _source_info_util
from jax._src import traceback_util as _jax_traceback_util
from jax.extend import source_info_util  # noqa: F401 - importable from here in Flax

from flaxen.configurations import config

jax_traceback_util = _jax_traceback_util  # Flax's name for JAX's module

__all__ = [
    "api_boundary",
    "hide_flax_in_tracebacks",
    "is_hiding_flax_frames",
    "register_exclusion",
    "show_flax_in_tracebacks",
]

#: Marks a function as a traceback-filtering boundary (JAX's own decorator): an exception
#: escaping the outermost boundary loses the frames of every excluded path.
api_boundary = _jax_traceback_util.api_boundary

# The whole package directory: every flaxen file, present and future, is covered.
FLAXEN_DIR = os.path.dirname(os.path.abspath(__file__))

# Every path flaxen hides (the package directory, plus any registered by extensions).
_flax_exclusions: set[str] = set()
# Paths already handed to JAX's C++ side, which has no removal: hand each over only once.
_known_to_jax: set[str] = set()


def _remove_all(paths: list[str], path: str) -> None:
    while path in paths:
        paths.remove(path)


def _exclude(path: str) -> None:
    if path not in _known_to_jax:
        _jax_traceback_util.register_exclusion(path)
        _source_info_util.register_exclusion(path)
        _known_to_jax.add(path)
        return
    if path not in _jax_traceback_util._exclude_paths:
        _jax_traceback_util._exclude_paths.append(path)
    if path not in _source_info_util._exclude_paths:
        _source_info_util._exclude_paths.append(path)
        _source_info_util._exclude_path_regex.cache_clear()


def register_exclusion(path: str) -> None:
    """Hide the frames of files under ``path`` too (while flaxen frames are hidden).

    For libraries built on flaxen that want their own plumbing hidden the same way.
    """
    path = os.path.abspath(path)
    _flax_exclusions.add(path)
    if config.flax_filter_frames:
        _exclude(path)


def hide_flax_in_tracebacks() -> None:
    """Drop flaxen's frames from tracebacks of errors raised through API boundaries.

    Idempotent. Also makes JAX attribute operations to the user's line rather than a
    flaxen line in source info (jaxpr / HLO metadata).
    """
    for path in sorted(_flax_exclusions):
        _exclude(path)
    config.update("flax_filter_frames", True)


def show_flax_in_tracebacks() -> None:
    """Keep flaxen's frames in tracebacks (useful when debugging flaxen itself)."""
    for path in _flax_exclusions:
        _remove_all(_jax_traceback_util._exclude_paths, path)
        _remove_all(_source_info_util._exclude_paths, path)
    _source_info_util._exclude_path_regex.cache_clear()
    config.update("flax_filter_frames", False)


def is_hiding_flax_frames() -> bool:
    """Whether flaxen frames are currently filtered from tracebacks."""
    return FLAXEN_DIR in _jax_traceback_util._exclude_paths


_flax_exclusions.add(FLAXEN_DIR)
if config.flax_filter_frames:
    hide_flax_in_tracebacks()
