"""Checkpoint file naming, natural sorting, listing and clean-up (the legacy Flax rules).

A checkpoint for ``step`` lives at ``{ckpt_dir}/{prefix}{step}``: a msgpack file (legacy) or an
Orbax directory. A save first writes ``{prefix}tmp`` and renames it, so that name is never a
checkpoint; neither are ``*_gda`` multiprocess-array folders nor Orbax's in-progress
``*.orbax-checkpoint-tmp-*`` folders. These rules match Flax's, so flaxen and Flax see the same
checkpoints in a shared directory. Local directories are made absolute before use (Orbax
refuses relative paths).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterable

from flaxen import io

logger = logging.getLogger("flaxen.training.checkpoints")

SIGNED_FLOAT_RE = re.compile(r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)")
# The sign sits outside the group: re.split drops it, so "-2" sorts as 2.
UNSIGNED_FLOAT_RE = re.compile(r"[-+]?((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)")
MODULE_NUM_RE = re.compile(r"(.*)_\d+$")
MP_ARRAY_POSTFIX = "_gda"
# What Flax's legacy (pre-Orbax) multiprocess save writes in the msgpack file in place of each
# multiprocess array, whose data goes to a `<checkpoint>_gda` folder instead.
MP_ARRAY_PH = "//GDAPlaceholder:"
# An optional URL scheme (`gs://`) and the path after it.
SCHEME_RE = re.compile(r"^(?P<scheme>[a-z][a-z0-9.+-]+://)?(?P<path>.*)", re.DOTALL)
ORBAX_TMP_MARKER = ".orbax-checkpoint-tmp"
ORBAX_CKPT_FILENAME = "checkpoint"
ORBAX_METADATA_FILENAME = "_METADATA"
ORBAX_MANIFEST_OCDBT = "manifest.ocdbt"
# Old checkpoint folders are renamed to this (Flax and flaxen both skip ORBAX_TMP_MARKER names)
# before they are deleted, so a deletion cut short never leaves a half-deleted checkpoint.
_TRASH_SUFFIX = ORBAX_TMP_MARKER + "-flaxen-removing"
# An Orbax checkpoint re-saved with overwrite=True is written under `{path}{STAGING_SUFFIX}` and
# swapped in when complete; a writer killed before the swap leaves it (and Orbax's own temporary
# folder inside that name) behind, up to a full checkpoint in size: the next clean-up sweeps it.
STAGING_SUFFIX = ORBAX_TMP_MARKER + "-flaxen-new"
_STEP_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def natural_sort(file_list: Iterable[str], signed: bool = True) -> list[str]:
    """Sorts names so that embedded numbers compare as numbers.

    >>> natural_sort(['ckpt_10', 'ckpt_9', 'ckpt_1e5', 'ckpt_-1.0'])
    ['ckpt_-1.0', 'ckpt_9', 'ckpt_10', 'ckpt_1e5']
    """
    float_re = SIGNED_FLOAT_RE if signed else UNSIGNED_FLOAT_RE

    def key(name: str):
        # re.split with one group alternates text, number, text, ...: the odd slots are
        # numbers, so two keys never compare a str with a float.
        parts = float_re.split(name)
        return [float(p) if i % 2 else p for i, p in enumerate(parts)]

    return sorted(file_list, key=key)


def safe_normpath(path: str | os.PathLike) -> str:
    """``os.path.normpath`` that leaves a URL scheme (``gs://``) intact."""
    path = os.fspath(path)
    match = SCHEME_RE.match(path)
    assert match is not None  # the pattern matches every string
    scheme = match.group("scheme") or ""
    return scheme + os.path.normpath(match.group("path"))


def absolute_path(path: str | os.PathLike) -> str:
    """:func:`safe_normpath`, made absolute unless it is a URL (``gs://...``).

    >>> absolute_path('ckpts/../tmp') == os.path.join(os.getcwd(), 'tmp')
    True
    >>> absolute_path('gs://bucket/ckpts/')
    'gs://bucket/ckpts'
    """
    path = safe_normpath(path)
    match = SCHEME_RE.match(path)
    if match is not None and match.group("scheme"):
        return path
    return os.path.abspath(path)


def checkpoint_path(ckpt_dir: str, step: int | float | str, prefix: str) -> str:
    return os.path.join(ckpt_dir, f"{prefix}{step}")


def tmp_path(ckpt_dir: str, prefix: str) -> str:
    return checkpoint_path(ckpt_dir, "tmp", prefix)


def step_of(path: str, prefix: str, step_type: type = float) -> int | float:
    """The step encoded in a checkpoint name; a clear ValueError when it is not a number."""
    suffix = os.path.basename(path)[len(prefix):]
    try:
        return step_type(suffix)
    except ValueError:
        raise ValueError(
            f'Checkpoint "{path}" does not end in a {step_type.__name__} step after the prefix '
            f'"{prefix}" (found "{suffix}"). Move unrelated files out of the checkpoint '
            "directory, or pass the prefix (and step_type=float for float steps) it was saved with."
        ) from None


def _is_candidate(name: str, prefix: str) -> bool:
    # Only "{prefix}<number>" is a checkpoint. Flax also lists other names that start with the
    # prefix ("checkpoint_notes.txt"), which then win the natural sort: latest_checkpoint
    # returns the stray file and every later save is refused as "not newer". flaxen skips them.
    return (
        name.startswith(prefix)
        and _STEP_RE.fullmatch(name[len(prefix):]) is not None
        and not name.endswith(MP_ARRAY_POSTFIX)
        and ORBAX_TMP_MARKER not in name
    )


def list_names(ckpt_dir: str) -> list[str]:
    """The entry names in ``ckpt_dir``; none when it is missing or not a directory.

    Remote paths (``gs://``, or any path in ``flaxen.io``'s TF mode) are listed through
    ``flaxen.io``; object stores mark folders with a trailing ``/``, which is dropped.
    """
    if io._use_tf(ckpt_dir):
        if not io.isdir(ckpt_dir):
            return []
        return [name.rstrip("/") for name in io.listdir(ckpt_dir)]
    try:
        return os.listdir(ckpt_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []


def list_checkpoints(ckpt_dir: str, prefix: str) -> list[str]:
    """Full paths of the finished checkpoints in ``ckpt_dir``, oldest first."""
    names = list_names(ckpt_dir)
    return natural_sort(os.path.join(ckpt_dir, n) for n in names if _is_candidate(n, prefix))


def check_overwrite(ckpt_dir: str, prefix: str, ckpt_path: str, step: int | float) -> None:
    """Raises InvalidCheckpointError if a checkpoint at ``step`` or a later one exists."""
    from flaxen import errors

    existing = list_checkpoints(ckpt_dir, prefix)
    if ckpt_path in existing or natural_sort([*existing, ckpt_path])[-1] != ckpt_path:
        raise errors.InvalidCheckpointError(ckpt_path, step)


def remove_path(path: str) -> None:
    """Removes a checkpoint file, or a checkpoint folder as one atomic step.

    A folder is first renamed to a name no reader lists, then deleted: a process killed during
    the deletion leaves that ignored name behind (swept by the next clean-up), never a
    ``checkpoint_<step>`` folder with half of its files. (Remote paths are deleted through
    ``flaxen.io``, whose stores have no atomic folder rename.)
    """
    if io._use_tf(path):
        if io.isdir(path):
            io.rmtree(path)
        else:
            io.remove(path)
        return
    if os.path.isdir(path) and not os.path.islink(path):
        trash = path + _TRASH_SUFFIX
        if os.path.lexists(trash):
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(path, trash)
        shutil.rmtree(trash)
    else:
        os.remove(path)


def _sweep_leftovers(ckpt_dir: str, prefix: str) -> None:
    """Deletes what killed writers left: a clean-up cut short (see ``remove_path``), the staging
    folder of an Orbax overwrite (see ``STAGING_SUFFIX``) and Orbax's own temporary folders.

    Called once the new checkpoint is complete: saves run one at a time, so no other save of
    this directory and prefix is in progress, and every ``*.orbax-checkpoint-tmp*`` name left
    is the remains of a killed one.
    """
    try:
        names = list_names(ckpt_dir)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and ORBAX_TMP_MARKER in name:
            logger.info("Removing leftover of an interrupted save or clean-up: %s", name)
            path = os.path.join(ckpt_dir, name)
            if io._use_tf(path):
                remove_path(path)
            elif os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)


def remove_stale(
    ckpt_path: str,
    ckpt_dir: str,
    prefix: str,
    keep: int,
    overwrite: bool,
    keep_every_n_steps: int | None,
) -> None:
    """After ``ckpt_path`` was committed: drop newer ones (if overwriting) and old ones.

    Of the checkpoints older than the newest ``keep``, one every ``keep_every_n_steps`` steps
    survives. ``keep <= 0`` keeps everything (as Flax does), and the checkpoint just written is
    never removed, so the directory always keeps its latest good checkpoint.
    """
    _sweep_leftovers(ckpt_dir, prefix)
    files = list_checkpoints(ckpt_dir, prefix)
    if overwrite and ckpt_path in files:
        cut = files.index(ckpt_path) + 1
        for path in files[cut:]:
            logger.info("Removing checkpoint at %s (newer than the overwritten one)", path)
            remove_path(path)
        files = files[:cut]
    if keep <= 0 or len(files) <= keep:
        return
    last_kept = -float("inf")
    for path in files[:-keep]:
        if path == ckpt_path:
            continue
        if keep_every_n_steps:
            try:
                step = step_of(path, prefix)
            except ValueError:
                step = None
            # Step 0 is falsy and is not kept by this rule, exactly as in Flax.
            if step and step - last_kept >= keep_every_n_steps:
                last_kept = step
                continue
        logger.info("Removing checkpoint at %s", path)
        remove_path(path)


def is_orbax_checkpoint(path: str) -> bool:
    if not io.isdir(path):
        return False
    return any(
        io.exists(os.path.join(path, name))
        for name in (ORBAX_CKPT_FILENAME, ORBAX_METADATA_FILENAME, ORBAX_MANIFEST_OCDBT)
    )
