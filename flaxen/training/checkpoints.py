"""Save and restore training checkpoints keyed by step (or any number) in the file name.

Two on-disk formats, both compatible with Flax's ``flax.training.checkpoints``:

* **legacy**: one msgpack file ``{ckpt_dir}/{prefix}{step}`` holding
  ``serialization.to_state_dict(target)``, byte-identical to what Flax writes;
* **Orbax**: a directory of the same name written by ``orbax-checkpoint``. Used when an
  ``orbax_checkpointer`` is passed, or when ``config.flax_use_orbax_checkpointing`` is on (the
  default, as in Flax) and the optional ``orbax-checkpoint`` package is installed.

``restore_checkpoint`` detects the format by itself. Saves are crash-safe: a legacy checkpoint is
written to ``{prefix}tmp``, fsynced and atomically renamed, and only then are older checkpoints
removed, so an interrupted save never loses the previous latest checkpoint.

>>> import tempfile, warnings, numpy as np
>>> from flaxen import config
>>> with config.temp_flip_flag('use_orbax_checkpointing', False), warnings.catch_warnings():
...     warnings.simplefilter('ignore', DeprecationWarning)  # the legacy format is deprecated
...     d = tempfile.mkdtemp()
...     path = save_checkpoint(d, {'w': np.arange(3)}, step=10)
...     restored = restore_checkpoint(d, target=None)
>>> os.path.basename(path), restored['w'].tolist()
('checkpoint_10', [0, 1, 2])
"""

from __future__ import annotations

import concurrent.futures
import errno
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any

import jax

from flaxen import _tree_compare, errors, io, serialization
from flaxen.training import _ckpt_io, _ckpt_paths
from flaxen.training._ckpt_paths import (
    MODULE_NUM_RE,
    MP_ARRAY_PH,
    MP_ARRAY_POSTFIX,
    ORBAX_CKPT_FILENAME,
    ORBAX_MANIFEST_OCDBT,
    ORBAX_METADATA_FILENAME,
    SCHEME_RE,
    SIGNED_FLOAT_RE,
    UNSIGNED_FLOAT_RE,
    check_overwrite,
    checkpoint_path,
    is_orbax_checkpoint,
    list_checkpoints,
    natural_sort,
    remove_stale,
    safe_normpath,
    step_of,
    tmp_path,
)

__all__ = [
    "AsyncManager",
    "MODULE_NUM_RE",
    "MP_ARRAY_PH",
    "MP_ARRAY_POSTFIX",
    "ORBAX_CKPT_FILENAME",
    "ORBAX_MANIFEST_OCDBT",
    "ORBAX_METADATA_FILENAME",
    "SCHEME_RE",
    "SIGNED_FLOAT_RE",
    "UNSIGNED_FLOAT_RE",
    "available_steps",
    "convert_pre_linen",
    "latest_checkpoint",
    "natural_sort",
    "restore_checkpoint",
    "safe_normpath",
    "save_checkpoint",
    "save_checkpoint_multiprocess",
]

logger = logging.getLogger("flaxen.training.checkpoints")
PyTree = Any
# a jax.Array that is not fully addressable from this process (spread over several hosts)
MultiprocessArrayType = Any
COMMIT_SUCCESS_FILE = "commit_success.txt"


def _reject_multiprocess_placeholders(state_dict: Any, ckpt_path: str) -> None:
    """Raises if the legacy file holds :data:`MP_ARRAY_PH` placeholders: Flax's pre-Orbax
    multiprocess save kept those arrays in ``<checkpoint>_gda`` folders, which flaxen does not
    read (its multiprocess checkpoints are Orbax ones)."""
    leaves = jax.tree_util.tree_flatten_with_path(state_dict)[0]
    paths = [jax.tree_util.keystr(path) for path, leaf in leaves
             if isinstance(leaf, str) and leaf.startswith(MP_ARRAY_PH)]
    if paths:
        raise ValueError(
            f'Checkpoint "{ckpt_path}" keeps {len(paths)} multiprocess array(s) ({paths[0]}'
            f"{', ...' if len(paths) > 1 else ''}) in {MP_ARRAY_POSTFIX} folders, Flax's legacy "
            "multiprocess format, which flaxen does not read. Restore it with the Flax release "
            "that wrote it and save it again through Orbax (orbax_checkpointer=...), which "
            "flaxen restores."
        )


class AsyncManager:
    """Runs checkpoint writes on a background thread, one at a time.

    A new save first waits for the previous one, so ``keep``/``overwrite`` decisions always see
    a finished directory. An exception raised by a background save is re-raised by the next
    ``wait_previous_save`` (or the next save) instead of being lost.

    >>> manager = AsyncManager()
    >>> manager.save_async(lambda: None)
    >>> manager.wait_previous_save()
    """

    def __init__(self, max_workers: int = 1) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)
        self.save_future: concurrent.futures.Future | None = None

    def wait_previous_save(self) -> None:
        """Blocks until the last submitted save finished; re-raises its error if it failed."""
        future, self.save_future = self.save_future, None
        if future is not None:
            future.result()

    def save_async(self, task: Callable[[], Any]) -> None:
        """Waits for the previous save, then starts ``task`` in the background."""
        self.wait_previous_save()
        self.save_future = self.executor.submit(task)


def _orbax_module():
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        return None
    return ocp


def _use_orbax(orbax_checkpointer: Any) -> bool:
    if orbax_checkpointer is not None:
        return True
    from flaxen.configurations import config

    if not config.flax_use_orbax_checkpointing:
        return False
    if _orbax_module() is None:
        # The flag defaults to on, as in Flax; without the optional package the legacy format
        # is the only one available, and it is what Flax wrote before Orbax existed.
        logger.info("orbax-checkpoint is not installed; writing a legacy msgpack checkpoint.")
        return False
    return True


_STAGING_SUFFIX = _ckpt_paths.STAGING_SUFFIX


def _wait_orbax(checkpointer: Any) -> None:
    wait = getattr(checkpointer, "wait_until_finished", None)
    if callable(wait):
        wait()


def _default_orbax_checkpointer():
    ocp = _orbax_module()
    return ocp.Checkpointer(ocp.PyTreeCheckpointHandler())


def _exists(path: str) -> bool:
    return io.exists(path) if _ckpt_io.is_remote(path) else os.path.lexists(path)


def _prepare_dir(ckpt_dir: str) -> None:
    if _ckpt_io.is_remote(ckpt_dir):
        io.makedirs(ckpt_dir)  # object stores: nothing to check before the first write
        return
    fix = "Pass a directory path (it is created when missing)."
    if os.path.exists(ckpt_dir) and not os.path.isdir(ckpt_dir):
        raise NotADirectoryError(
            errno.ENOTDIR,
            f'Checkpoint directory "{ckpt_dir}" is an existing file, not a directory. {fix}',
            ckpt_dir,
        )
    try:
        os.makedirs(ckpt_dir, exist_ok=True)
    except (NotADirectoryError, FileExistsError) as e:
        raise NotADirectoryError(
            errno.ENOTDIR,
            f'Cannot create checkpoint directory "{ckpt_dir}": a part of the path is a file. '
            f"{fix}",
            ckpt_dir,
        ) from e
    except PermissionError as e:
        raise PermissionError(
            errno.EACCES,
            f'Cannot create checkpoint directory "{ckpt_dir}": permission denied. Pass a '
            "ckpt_dir you can write to.",
            ckpt_dir,
        ) from e
    if not os.access(ckpt_dir, os.W_OK | os.X_OK):
        raise PermissionError(
            errno.EACCES,
            f'Checkpoint directory "{ckpt_dir}" is not writable. Make it writable or pass '
            "another ckpt_dir.",
            ckpt_dir,
        )


def _has_multiprocess_array(target: PyTree) -> bool:
    return any(
        isinstance(x, jax.Array) and not x.is_fully_addressable for x in jax.tree.leaves(target)
    )


def _save(
    ckpt_dir: str | os.PathLike,
    target: PyTree,
    step: int | float,
    prefix: str,
    keep: int,
    overwrite: bool,
    keep_every_n_steps: int | None,
    async_manager: AsyncManager | None,
    orbax_checkpointer: Any,
    writer: bool,
) -> str:
    # The caller gets the path in the form it gave (as Flax returns it: the spec's guide
    # prints 'tmp/flax-checkpointing/checkpoint_0'); the work uses the absolute one, which
    # Orbax requires and which a later chdir cannot redirect.
    shown = checkpoint_path(safe_normpath(ckpt_dir), step, prefix)
    ckpt_dir = _ckpt_paths.absolute_path(ckpt_dir)
    if async_manager is not None:
        async_manager.wait_previous_save()
    ckpt_path = checkpoint_path(ckpt_dir, step, prefix)
    if writer:
        _prepare_dir(ckpt_dir)

    if _use_orbax(orbax_checkpointer):
        if orbax_checkpointer is None and jax.tree_util.treedef_is_leaf(
            jax.tree_util.tree_structure(target)
        ):
            raise ValueError(
                f'Cannot save the single value {type(target).__name__} as Orbax checkpoint '
                f'"{ckpt_path}": the Orbax backend saves pytrees. Wrap it in a dict '
                "({'value': x}), pass an Orbax checkpointer built with ArrayCheckpointHandler, "
                "or turn off config.flax_use_orbax_checkpointing."
            )
        if not overwrite and _exists(ckpt_path):
            # Orbax refuses an existing destination with a ValueError; older steps are allowed,
            # as in Flax's Orbax mode.
            raise ValueError(
                f'Checkpoint "{ckpt_path}" already exists. Pass overwrite=True to replace it, '
                "or save at another step."
            )
        checkpointer = orbax_checkpointer or _default_orbax_checkpointer()
        _wait_orbax(checkpointer)
        if overwrite and not _ckpt_io.is_remote(ckpt_path) and os.path.lexists(ckpt_path):
            # Orbax's `force=True` deletes the old folder before writing the new one: a crash
            # in between would lose that step. Write next to it, then swap atomically (local
            # disks only: object stores have no atomic folder swap).
            staging = ckpt_path + _STAGING_SUFFIX
            if os.path.lexists(staging):
                _ckpt_paths.remove_path(staging)
            checkpointer.save(staging, target)
            _wait_orbax(checkpointer)
            if writer:
                _ckpt_io.commit(staging, ckpt_path)
        else:
            # Orbax writes to its own temporary folder and renames it when complete.
            checkpointer.save(ckpt_path, target, force=overwrite)
            # An async checkpointer must finish before old checkpoints are removed, or
            # `keep` could delete the previous latest checkpoint while the new one is unwritten.
            _wait_orbax(checkpointer)
        if writer:
            remove_stale(ckpt_path, ckpt_dir, prefix, keep, overwrite, keep_every_n_steps)
        return shown

    warnings.warn(
        "Flax Checkpointing will soon be deprecated in favor of Orbax: this writes the "
        "legacy msgpack format. Save through Orbax instead (pass orbax_checkpointer=..., or "
        "keep config.flax_use_orbax_checkpointing on), see Flax's Orbax upgrade guide.",
        DeprecationWarning,
    )
    if not overwrite:
        check_overwrite(ckpt_dir, prefix, ckpt_path, step)
    if _has_multiprocess_array(target):
        raise errors.MPACheckpointingRequiredError(ckpt_path, step)
    if not writer:
        return shown
    try:
        parts = _ckpt_io.encode_parts(
            serialization.to_state_dict(target), copy_arrays=async_manager is not None
        )
    except (TypeError, ValueError, OverflowError) as e:
        if type(e) in (TypeError, ValueError, OverflowError):
            # Name the file in the same error (a new one would add a chained traceback).
            e.args = (f'Cannot save checkpoint "{shown}": {e}',)
        raise
    tmp = tmp_path(ckpt_dir, prefix)

    def write_and_commit() -> None:
        _ckpt_io.write_file(tmp, parts)
        _ckpt_io.commit(tmp, ckpt_path)
        logger.info("Saved checkpoint at %s", ckpt_path)
        remove_stale(ckpt_path, ckpt_dir, prefix, keep, overwrite, keep_every_n_steps)

    if async_manager is not None:
        async_manager.save_async(write_and_commit)
    else:
        write_and_commit()
    return shown


def save_checkpoint(
    ckpt_dir: str | os.PathLike,
    target: PyTree,
    step: int | float,
    prefix: str = "checkpoint_",
    keep: int = 1,
    overwrite: bool = False,
    keep_every_n_steps: int | None = None,
    async_manager: AsyncManager | None = None,
    orbax_checkpointer: Any | None = None,
) -> str:
    """Saves ``target`` as ``{ckpt_dir}/{prefix}{step}`` and returns that path.

    For a single process (each process writes its own files). ``keep`` newest checkpoints are
    kept (``keep <= 0`` keeps all), plus one every ``keep_every_n_steps`` steps among older
    ones. Without ``overwrite``, saving at a step not later than an existing checkpoint raises
    ``InvalidCheckpointError``; with it, that step is replaced and later ones are removed.
    ``async_manager`` moves the write to a background thread; ``orbax_checkpointer`` (or the
    ``flax_use_orbax_checkpointing`` flag) saves in Orbax's format instead.

    >>> import tempfile, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> os.path.basename(save_checkpoint(d, {'w': np.ones(2)}, step=3))
    'checkpoint_3'
    """
    return _save(
        ckpt_dir, target, step, prefix, keep, overwrite, keep_every_n_steps,
        async_manager, orbax_checkpointer, writer=True,
    )


def save_checkpoint_multiprocess(
    ckpt_dir: str | os.PathLike,
    target: PyTree,
    step: int | float,
    prefix: str = "checkpoint_",
    keep: int = 1,
    overwrite: bool = False,
    keep_every_n_steps: int | None = None,
    async_manager: AsyncManager | None = None,
    gda_manager: Any | None = None,
    orbax_checkpointer: Any | None = None,
) -> str:
    """Like :func:`save_checkpoint`, for several processes sharing one ``ckpt_dir``.

    Call it on every process. Process 0 writes the legacy file and removes old checkpoints;
    with Orbax every process takes part in the save. Multiprocess (not fully addressable)
    arrays need Orbax: pass ``orbax_checkpointer`` (the legacy ``gda_manager`` route of old
    Flax versions is not supported and raises ``MPACheckpointingRequiredError``).
    """
    del gda_manager  # multiprocess arrays go through Orbax; see the docstring
    is_main = jax.process_index() == 0
    path = _save(
        ckpt_dir, target, step, prefix, keep, overwrite, keep_every_n_steps,
        async_manager, orbax_checkpointer, writer=is_main,
    )
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"flaxen checkpoint {path}")
    return path


def latest_checkpoint(ckpt_dir: str | os.PathLike, prefix: str = "checkpoint_") -> str | None:
    """Path of the highest-step checkpoint in ``ckpt_dir`` (natural sort), or None.

    Temporary files of interrupted saves (``{prefix}tmp``, Orbax ``*.orbax-checkpoint-tmp-*``)
    and ``*_gda`` folders are never returned.
    """
    files = list_checkpoints(os.fspath(ckpt_dir), prefix)
    return files[-1] if files else None


def available_steps(
    ckpt_dir: str | os.PathLike, prefix: str = "checkpoint_", step_type: type = int
) -> list[int | float]:
    """The steps of the checkpoints in ``ckpt_dir``, ascending, parsed with ``step_type``."""
    return [step_of(p, prefix, step_type) for p in list_checkpoints(os.fspath(ckpt_dir), prefix)]


def _steps_hint(ckpt_dir: str, prefix: str) -> str:
    names = [os.path.basename(p)[len(prefix):] for p in list_checkpoints(ckpt_dir, prefix)]
    if not names:
        return f'"{ckpt_dir}" holds no checkpoints with prefix "{prefix}"'
    return f'available steps in "{ckpt_dir}": {", ".join(names)}'


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _flat_paths(tree: PyTree) -> dict[tuple[str, ...], Any]:
    """``{('params', 'Dense_0', 'kernel'): leaf}``; None and empty containers have no entry."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {tuple(_key_name(k) for k in path): leaf for path, leaf in leaves}


def _show(path: tuple[str, ...]) -> str:
    return "/" + "/".join(path)


def _mismatch(ckpt_path: str, what: str) -> ValueError:
    return ValueError(
        f'Checkpoint "{ckpt_path}" does not match the restore target: {what}. Restore into a '
        "target built like the saved tree, pass target=None to get the saved tree as it is, or "
        "(Orbax checkpoints) pass orbax_transforms to map the saved tree onto the new one."
    )


def _check_against_target(
    ckpt_path: str, saved: dict[tuple[str, ...], Any], target: PyTree
) -> None:
    """Raises ValueError at the first target leaf the checkpoint lacks.

    The target gives the structure and the checkpoint the values: a target leaf's shape is not
    checked (placeholders such as ``np.array(0)`` get the saved arrays, as the Orbax migration
    guide shows). Keys the checkpoint has and the target lacks are allowed (a partial restore),
    as in the legacy format.
    """
    for path in _flat_paths(target):
        if path not in saved:
            depth = 0
            while depth < len(path) and any(p[: depth + 1] == path[: depth + 1] for p in saved):
                depth += 1
            parent = path[:depth]
            if parent in saved:
                there = "a single value"
            else:
                keys = sorted({p[depth] for p in saved if p[:depth] == parent and len(p) > depth})
                there = f"keys {keys}"
            raise _mismatch(
                ckpt_path,
                f"the target has {_show(path)}, which the checkpoint does not have (at "
                f"{_show(parent)} the checkpoint has {there})",
            )


def _corrupt(ckpt_path: str, prefix: str, error: BaseException) -> ValueError:
    ckpt_dir = os.path.dirname(ckpt_path)
    return ValueError(
        f'Orbax checkpoint "{ckpt_path}" could not be read ({type(error).__name__}: {error}): it '
        "is corrupt or incomplete. Delete it and restore an earlier step "
        f"({_steps_hint(ckpt_dir, prefix)})."
    )


def _orbax_saved_tree(ckpt_path: str, prefix: str, user_checkpointer: bool):
    """The checkpoint's tree of Orbax metadata (shapes and dtypes, no data), or None if unknown."""
    from etils import epath

    ocp = _orbax_module()
    handler = ocp.PyTreeCheckpointHandler()
    try:
        meta = handler.metadata(epath.Path(ckpt_path))
        return getattr(meta, "tree", meta)
    except Exception as e:
        if user_checkpointer:
            return None  # maybe not a PyTree checkpoint; the caller's checkpointer knows
        raise _corrupt(ckpt_path, prefix, e) from e
    finally:
        close = getattr(handler, "close", None)
        if callable(close):
            close()


def _restore_orbax(
    ckpt_path: str, target: PyTree, orbax_checkpointer: Any, orbax_transforms: Any, prefix: str,
    strict: bool,
) -> PyTree:
    user_checkpointer = orbax_checkpointer is not None
    if orbax_checkpointer is None:
        if _orbax_module() is None:
            raise ImportError(
                f'"{ckpt_path}" is an Orbax checkpoint, and restoring it needs the '
                "orbax-checkpoint package: `pip install orbax-checkpoint`."
            )
        orbax_checkpointer = _default_orbax_checkpointer()
    _wait_orbax(orbax_checkpointer)
    kwargs = {}
    saved_tree = None
    if target is not None:
        from flaxen.training import orbax_utils

        if orbax_transforms is None or strict:
            saved_tree = _orbax_saved_tree(ckpt_path, prefix, user_checkpointer)
        if strict and saved_tree is not None:
            # The metadata, not the restored tree: restore_args cast arrays to the target's
            # dtypes, which would hide the saved ones.
            _tree_compare.check_restored(target, saved_tree, source=ckpt_path)
        if orbax_transforms is None and saved_tree is not None:
            # Without transforms Orbax fills target leaves missing from the checkpoint with
            # the target's own values: check first, so that a model whose structure changed
            # since the save is an error and not a silent partial restore.
            _check_against_target(ckpt_path, _flat_paths(saved_tree), target)
        kwargs["restore_args"] = orbax_utils.restore_args_from_target(target)
        kwargs["transforms"] = orbax_utils.maybe_construct_transformations(
            target, orbax_transforms
        )
    elif orbax_transforms is not None:
        kwargs["transforms"] = orbax_transforms
    try:
        with warnings.catch_warnings():
            if target is None:
                # No target, so no shardings to give: Orbax takes those saved in the
                # checkpoint, which is what a target-less restore asks for. Its note on that
                # is not the user's to act on.
                warnings.filterwarnings(
                    "ignore", "Sharding info not provided when restoring", UserWarning)
            restored = orbax_checkpointer.restore(ckpt_path, item=target, **kwargs)
    except Exception as e:
        if user_checkpointer or orbax_transforms is not None:
            e.add_note(f'while restoring Orbax checkpoint "{ckpt_path}"')
            raise
        raise _corrupt(ckpt_path, prefix, e) from e
    if strict and target is not None and saved_tree is None:
        _tree_compare.check_restored(target, restored, source=ckpt_path)
    # Without a target, both formats give the same state dict (a saved tuple comes back as
    # {'0': ..., '1': ...}, as from a legacy file).
    return serialization.to_state_dict(restored) if target is None else restored


def restore_checkpoint(
    ckpt_dir: str | os.PathLike,
    target: PyTree | None,
    step: int | float | None = None,
    prefix: str = "checkpoint_",
    parallel: bool = True,
    gda_manager: Any | None = None,
    allow_partial_mpa_restoration: bool = False,
    orbax_checkpointer: Any | None = None,
    orbax_transforms: dict | None = None,
    *,
    strict: bool = False,
) -> PyTree:
    """Restores the latest (or ``step``'s) checkpoint into ``target``.

    ``ckpt_dir`` is a directory of checkpoints or one checkpoint (file or Orbax folder). With
    ``target=None`` the raw state dict is returned. If no ``step`` is asked for and nothing is
    found (missing directory, no matching files, missing file path) ``target`` comes back
    unchanged. A requested ``step`` that does not exist, a corrupt file, or a checkpoint whose
    structure differs from ``target`` raise ``ValueError`` naming the file.

    As in Flax, the target gives the structure and the checkpoint the values: a saved array of
    another shape or dtype than the target's is restored as saved. ``strict=True`` (a flaxen
    addition) checks first and raises one :class:`~flaxen.errors.RestoreMismatchError` listing
    every path whose structure, shape or dtype differs, with both values.

    >>> import tempfile, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> _ = save_checkpoint(d, {'w': np.zeros((2, 3), np.float32)}, step=1)
    >>> restore_checkpoint(d, {'w': np.zeros((3, 3), np.float32)})['w'].shape  # as Flax
    (2, 3)
    >>> try:
    ...     restore_checkpoint(d, {'w': np.zeros((3, 3), np.float32)}, strict=True)
    ... except ValueError as e:
    ...     print(str(e).splitlines()[1])
      /w: shape (3, 3) in the target, (2, 3) restored
    """
    del gda_manager, allow_partial_mpa_restoration  # no multiprocess arrays in legacy files
    ckpt_dir = _ckpt_paths.absolute_path(ckpt_dir)
    if step is not None:
        ckpt_path = checkpoint_path(ckpt_dir, step, prefix)
        if not io.exists(ckpt_path):
            if io.exists(ckpt_dir) and not io.isdir(ckpt_dir):
                reason = f'"{ckpt_dir}" is a file; pass its directory when giving a step'
            else:
                reason = _steps_hint(ckpt_dir, prefix)
            raise ValueError(
                f"Matching checkpoint not found: {ckpt_path} ({reason}). Pass an existing "
                "step, or step=None for the latest."
            )
    else:
        if not io.exists(ckpt_dir):
            logger.info("Found no checkpoint directory at %s", ckpt_dir)
            return target
        if io.isdir(ckpt_dir) and not is_orbax_checkpoint(ckpt_dir):
            latest = latest_checkpoint(ckpt_dir, prefix)
            if latest is None:
                logger.info("Found no checkpoint files in %s with prefix %s", ckpt_dir, prefix)
                return target
            ckpt_path = latest
        else:
            ckpt_path = ckpt_dir

    if is_orbax_checkpoint(ckpt_path):
        logger.info("Restoring Orbax checkpoint from %s", ckpt_path)
        return _restore_orbax(
            ckpt_path, target, orbax_checkpointer, orbax_transforms, prefix, strict)
    if io.isdir(ckpt_path):
        raise ValueError(
            f'Checkpoint "{ckpt_path}" is a directory but not an Orbax checkpoint (it has no '
            f"{ORBAX_METADATA_FILENAME} / {ORBAX_CKPT_FILENAME} file): its save was probably "
            "interrupted. Delete it, or restore another step."
        )
    logger.info("Restoring legacy checkpoint from %s", ckpt_path)
    contents = _ckpt_io.read_file(ckpt_path, parallel=parallel)
    try:
        state_dict = serialization.msgpack_restore(contents)
    except ValueError as e:
        raise ValueError(
            f'Checkpoint file "{ckpt_path}" is corrupt or is not a flax/flaxen checkpoint '
            f"({e}). Delete it and restore an earlier step "
            f"({_steps_hint(os.path.dirname(ckpt_path), prefix)})."
        ) from e
    del contents
    _reject_multiprocess_placeholders(state_dict, ckpt_path)
    if target is None:
        return state_dict
    if strict:
        _tree_compare.check_restored(
            serialization.to_state_dict(target), state_dict, source=ckpt_path)
    try:
        restored = serialization.from_state_dict(target, state_dict)
    except ValueError as e:
        if type(e) is ValueError:
            detail = " ".join([str(e), *getattr(e, "__notes__", ())])
            raise ValueError(
                f'Checkpoint "{ckpt_path}" does not match the restore target: {detail}'
            ) from e
        e.add_note(f'while restoring checkpoint "{ckpt_path}" into the given target')
        raise
    # from_state_dict keeps the saved arrays as they are (the target gives the structure, the
    # checkpoint the values); a target leaf the checkpoint lacks is an error naming its path.
    _check_against_target(ckpt_path, _flat_paths(restored), target)
    return restored


def convert_pre_linen(params: PyTree) -> PyTree:
    """Renumbers pre-Linen submodule names (``Conv_0, Dense_1``) per class (``Dense_0``).

    Pre-Linen modules shared one counter across submodule classes; Linen counts per class.
    Keys named ``<Name>_<n>`` are renumbered in natural order of ``n`` at every level; other
    keys are kept. Trees already in Linen format come back unchanged, and a FrozenDict input
    gives a FrozenDict.

    >>> convert_pre_linen({'Conv_0': {'bias': 1}, 'Dense_1': {'bias': 2}})
    {'Conv_0': {'bias': 1}, 'Dense_0': {'bias': 2}}
    """
    from flaxen.core.frozen_dict import FrozenDict

    if not isinstance(params, (dict, FrozenDict)):
        return params
    counts: dict[str, int] = {}
    renamed = {}
    for name in natural_sort(params.keys()):
        value = params[name]
        match = MODULE_NUM_RE.match(name)
        if match:
            module = match.group(1)
            count = counts.get(module, 0)
            counts[module] = count + 1
            name = f"{module}_{count}"
        renamed[name] = convert_pre_linen(value)
    if isinstance(params, FrozenDict):
        return FrozenDict(renamed)
    return renamed
