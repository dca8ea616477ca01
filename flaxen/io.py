"""A small file-system layer (``flax.io``): local files by default, TensorFlow's gfile on demand.

Checkpointing and other file users call these functions instead of ``os``/``shutil`` so that one
switch moves them between backends:

* ``BackendMode.DEFAULT``: Python's own ``open``/``os``/``shutil``/``glob``. A path with a URL
  scheme (``gs://bucket/...``) is still handed to TensorFlow's ``tf.io.gfile`` when TensorFlow is
  installed, since the local file system cannot open it.
* ``BackendMode.TF``: every call goes through ``tf.io.gfile`` (local paths included).

TensorFlow is imported only when a call needs it, so ``import flaxen.io`` stays cheap.

>>> import os, tempfile
>>> from flaxen import io
>>> d = tempfile.mkdtemp()
>>> with io.GFile(os.path.join(d, 'a.txt'), 'w') as f:
...     _ = f.write('hello')
>>> io.listdir(d), io.getsize(os.path.join(d, 'a.txt'))
(['a.txt'], 5)
>>> with io.override_mode(io.BackendMode.DEFAULT):
...     io.io_mode is io.BackendMode.DEFAULT
True
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import glob as _glob
import importlib  # noqa: F401 - importable from here in Flax
import os
import re
import shutil
from collections.abc import Iterator
from enum import Enum  # noqa: F401 - importable from here in Flax
from typing import IO, Any

from flaxen import errors

__all__ = [
    "BackendMode",
    "GFile",
    "NotFoundError",
    "copy",
    "exists",
    "getsize",
    "gfile",  # noqa: F822 - resolved lazily by __getattr__
    "glob",
    "io_mode",
    "isdir",
    "listdir",
    "makedirs",
    "override_mode",
    "remove",
    "rename",
    "rmtree",
    "set_mode",
]


glob_module = _glob  # Flax's name for the standard glob module


class BackendMode(enum.Enum):
    """Which file-system implementation the functions of this module use."""

    DEFAULT = 0
    TF = 1


io_mode: BackendMode = BackendMode.DEFAULT

# What a missing file raises in the default backend. Flax binds TensorFlow's NotFoundError here
# when TensorFlow is installed because its default backend is then TF; flaxen's default backend
# is always the local one (TensorFlow is imported only on demand), so the local error applies.
NotFoundError = FileNotFoundError

_URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9.+-]*://")


def set_mode(override: BackendMode) -> None:
    """Makes ``override`` the backend of every later call (see :func:`override_mode`)."""
    global io_mode
    io_mode = _check_mode(override)


@contextlib.contextmanager
def override_mode(override: BackendMode) -> Iterator[None]:
    """Uses ``mode`` inside the ``with`` block, then restores the previous backend.

    >>> from flaxen import io
    >>> with io.override_mode(io.BackendMode.TF):
    ...     io.io_mode.name
    'TF'
    """
    global io_mode
    previous = io_mode
    io_mode = _check_mode(override)
    try:
        yield
    finally:
        io_mode = previous


def _check_mode(mode: Any) -> BackendMode:
    if not isinstance(mode, BackendMode):
        raise ValueError(
            f"Unknown io backend {mode!r}: expected flaxen.io.BackendMode.DEFAULT or "
            "flaxen.io.BackendMode.TF."
        )
    return mode


def _gfile() -> Any:
    try:
        from tensorflow.io import gfile
    except ImportError as e:
        raise ImportError(
            "flaxen.io's TF backend needs TensorFlow (`pip install tensorflow-cpu`). Without it, "
            "use flaxen.io.BackendMode.DEFAULT and local paths."
        ) from e
    return gfile


def _use_tf(*paths: Any) -> bool:
    if io_mode is BackendMode.TF:
        return True
    # Remote paths cannot be served by the local file system; TensorFlow can, when present.
    return any(isinstance(p, str) and _URL_RE.match(p) for p in paths)


def GFile(name: str | os.PathLike, mode: str) -> IO[Any]:  # noqa: N802 (Flax's public name)
    """Opens a file; text modes read and write UTF-8. Use it as a context manager."""
    name = os.fspath(name)
    if _use_tf(name):
        return _gfile().GFile(name, mode)
    if "b" in mode:
        return builtins.open(name, mode)
    return builtins.open(name, mode, encoding="utf-8")


open = GFile  # noqa: A001 (the same name as gfile's alias)


def listdir(path: str | os.PathLike) -> list[str]:
    """The names (not paths) of the entries in the directory ``path``."""
    path = os.fspath(path)
    if _use_tf(path):
        return list(_gfile().listdir(path))
    return os.listdir(path)


def isdir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an existing directory."""
    path = os.fspath(path)
    if _use_tf(path):
        return bool(_gfile().isdir(path))
    return os.path.isdir(path)


def exists(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists (file or directory)."""
    path = os.fspath(path)
    if _use_tf(path):
        return bool(_gfile().exists(path))
    return os.path.exists(path)


def makedirs(path: str | os.PathLike) -> None:
    """Creates the directory ``path`` and any missing parents; an existing one is fine."""
    path = os.fspath(path)
    if _use_tf(path):
        _gfile().makedirs(path)
        return
    os.makedirs(path, exist_ok=True)


def glob(pattern: str | os.PathLike) -> list[str]:
    """The paths matching the shell pattern ``pattern``."""
    pattern = os.fspath(pattern)
    if _use_tf(pattern):
        return list(_gfile().glob(pattern))
    return _glob.glob(pattern)


def remove(path: str | os.PathLike) -> None:
    """Deletes the file ``path``."""
    path = os.fspath(path)
    if _use_tf(path):
        _gfile().remove(path)
        return
    os.remove(path)


def rmtree(path: str | os.PathLike) -> None:
    """Deletes the directory ``path`` and everything in it."""
    path = os.fspath(path)
    if _use_tf(path):
        _gfile().rmtree(path)
        return
    shutil.rmtree(path)


def getsize(path: str | os.PathLike) -> int:
    """The size of the file ``path`` in bytes."""
    path = os.fspath(path)
    if _use_tf(path):
        return int(_gfile().stat(path).length)
    return os.path.getsize(path)


def copy(src: str | os.PathLike, dst: str | os.PathLike, overwrite: bool = False) -> None:
    """Copies the file ``src`` to ``dst``.

    An existing ``dst`` raises ``flaxen.errors.AlreadyExistsError`` (TensorFlow's own
    ``AlreadyExistsError`` in TF mode) unless ``overwrite=True``.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if _use_tf(src, dst):
        _gfile().copy(src, dst, overwrite=overwrite)
        return
    if not overwrite and os.path.exists(dst):
        raise errors.AlreadyExistsError(dst)
    shutil.copy(src, dst)


def rename(src: str | os.PathLike, dst: str | os.PathLike, overwrite: bool = False) -> None:
    """Renames (moves) ``src`` to ``dst``; an existing ``dst`` is an error unless ``overwrite``."""
    src, dst = os.fspath(src), os.fspath(dst)
    if _use_tf(src, dst):
        _gfile().rename(src, dst, overwrite=overwrite)
        return
    if not overwrite and os.path.exists(dst):
        raise errors.AlreadyExistsError(dst)
    os.replace(src, dst)


def __getattr__(name: str) -> Any:
    # `gfile` is TensorFlow's tf.io.gfile when TensorFlow is installed, else None (as in Flax);
    # looking it up lazily keeps `import flaxen.io` from importing TensorFlow.
    if name == "gfile":
        try:
            from tensorflow.io import gfile
        except ImportError:
            return None
        return gfile
    if name == "logging":  # absl's logging, as Flax's module binds it (absl comes with optax)
        from absl import logging

        return logging
    raise AttributeError(f"module 'flaxen.io' has no attribute {name!r}")
