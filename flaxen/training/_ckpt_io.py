"""Crash-safe writing and fast reading of legacy (msgpack) checkpoint files.

Writing streams the msgpack encoding straight to disk: small headers are batched, each array's
bytes go from the array's own memory to the file, so a 1 GiB state is never assembled as one
1 GiB ``bytes`` object (Flax builds it, then writes it). The file is written under a temporary
name, flushed with ``fsync`` and then atomically renamed, so a writer killed at any moment leaves
either the old set of checkpoints or the new one, never a half-written ``checkpoint_<step>``.

Reading fills one buffer with parallel positional reads and decodes it with the shared
Flax-compatible decoder; arrays come back as numpy arrays.

Paths that the local file system cannot serve (``gs://...``, or every path while
``flaxen.io`` is in TF mode) go through :mod:`flaxen.io` instead: the same bytes, written with
``io.GFile`` and committed with ``io.rename`` (as Flax does; object stores have no fsync).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import sys
from typing import Any

import numpy as np

from flaxen import _msgpack_ext, io, serialization

_READ_CHUNK = 64 << 20
_MAX_READERS = 8


def encode_parts(state_dict: Any, copy_arrays: bool = False) -> list[Any]:
    """The msgpack encoding of ``state_dict`` as a list of ``bytes`` and numpy arrays.

    Concatenating the parts' bytes gives exactly ``serialization.msgpack_serialize(state_dict)``
    (and Flax's ``to_bytes``). ``copy_arrays`` snapshots mutable numpy arrays, for writes that
    finish later on another thread (JAX arrays are immutable and are never copied).
    """
    parts = _msgpack_ext.encode_parts(state_dict, serialization.MAX_CHUNK_SIZE, sort_keys=False)
    if copy_arrays:
        parts = [p.copy() if type(p) is np.ndarray and p.flags.writeable else p for p in parts]
    return parts


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(path: str) -> None:
    """Makes a rename in ``path`` durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def is_remote(path: str) -> bool:
    """Whether ``path`` is handled by ``flaxen.io``'s TF backend rather than ``os``."""
    return io._use_tf(path)


def write_file(tmp_path: str, parts: list[Any]) -> None:
    """Writes ``parts`` to ``tmp_path`` (truncating it) and fsyncs the file."""
    if is_remote(tmp_path):
        with io.GFile(tmp_path, "wb") as f:
            for part in parts:
                f.write(bytes(_msgpack_ext.as_buffer(part)))
        return
    try:
        fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except PermissionError as e:
        raise PermissionError(
            e.errno,
            f'Cannot write checkpoint file "{tmp_path}": permission denied. Make the checkpoint '
            "directory writable or pass another ckpt_dir.",
            tmp_path,
        ) from e
    try:
        pending = bytearray()
        for part in parts:
            if type(part) is bytes and len(part) < (1 << 20):
                pending += part  # batch small headers into few write calls
                continue
            if pending:
                _write_all(fd, memoryview(pending))
                pending = bytearray()
            _write_all(fd, memoryview(_msgpack_ext.as_buffer(part)))
        if pending:
            _write_all(fd, memoryview(pending))
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps two existing paths (Linux ``renameat2(RENAME_EXCHANGE)``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def commit(tmp_path: str, final_path: str) -> None:
    """Atomically moves the finished temporary file (or folder) to its final name.

    An existing folder at ``final_path`` (an Orbax checkpoint being overwritten, or a folder
    replacing a file) cannot be replaced by ``os.replace``: the two are swapped atomically and
    the old one is deleted afterwards, so ``final_path`` always holds a complete checkpoint.
    """
    from flaxen.training._ckpt_paths import remove_path

    if is_remote(final_path):
        io.rename(tmp_path, final_path, overwrite=True)
        return
    if os.path.isdir(final_path) or (os.path.isdir(tmp_path) and os.path.lexists(final_path)):
        if _exchange(tmp_path, final_path):
            remove_path(tmp_path)
        else:  # no atomic swap here: a short window in which final_path is missing
            remove_path(final_path)
            os.rename(tmp_path, final_path)
    else:
        os.replace(tmp_path, final_path)
    fsync_dir(os.path.dirname(final_path) or ".")


def read_file(path: str, parallel: bool = True) -> memoryview:
    """The whole file as a read-only buffer, read by several threads when ``parallel``."""
    if is_remote(path):
        with io.GFile(path, "rb") as f:
            return memoryview(f.read()).toreadonly()
    size = os.path.getsize(path)
    buf = np.empty(size, np.uint8)  # uninitialised: the reads overwrite every byte
    view = buf.data
    fd = os.open(path, os.O_RDONLY)
    try:
        if not parallel or size <= _READ_CHUNK:
            _read_range(fd, view, 0)
        else:
            starts = range(0, size, _READ_CHUNK)
            with concurrent.futures.ThreadPoolExecutor(min(_MAX_READERS, len(starts))) as pool:
                jobs = [
                    pool.submit(_read_range, fd, view[s:s + _READ_CHUNK], s) for s in starts
                ]
                for job in jobs:
                    job.result()
    finally:
        os.close(fd)
    return view.toreadonly()


def _read_range(fd: int, view: memoryview, offset: int) -> None:
    while view:
        n = os.preadv(fd, [view], offset)
        if n == 0:
            raise EOFError(f"checkpoint file shrank while being read (at byte {offset})")
        view = view[n:]
        offset += n
