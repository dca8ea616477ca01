"""``.safetensors`` files for flaxen trees, through the ``safetensors`` package.

:func:`save_file` writes a parameter tree (Linen variables, a nested dict of arrays, an
NNX ``State`` or ``Module``) with flat keys joined by ``"."`` (``params.Dense_0.kernel``,
as the wider ecosystem writes Flax weights) and metadata ``{"format": "flax"}``.
:func:`load_file` reads such a file back as a nested dict, or into a ``target``; a file
written by torch (``format: "pt"``, or any file whose keys are not the target's) goes
through :func:`flaxen.interop.torch.convert`'s matching and layout rules, which need no
torch installation for this.

>>> import os, tempfile, numpy as np
>>> from flaxen.interop import safetensors as fst
>>> tree = {'params': {'Dense_0': {'kernel': np.ones((2, 3), np.float32)}}}
>>> path = os.path.join(tempfile.mkdtemp(), 'w.safetensors')
>>> fst.save_file(tree, path)
>>> fst.load_file(path)['params']['Dense_0']['kernel'].shape
(2, 3)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

try:
    from safetensors import SafetensorError, safe_open
    from safetensors.numpy import save_file as _np_save_file
except ImportError as _err:  # pragma: no cover - exercised only without safetensors
    raise ImportError(
        "flaxen.interop.safetensors needs the safetensors package, which is not installed. "
        "Install the interop extra: pip install 'flaxen[interop]'."
    ) from _err

from flaxen.errors import TorchConversionError
from flaxen.interop import _conversion
from flaxen.interop._target import read_target, write_target

__all__ = ["load_file", "save_file"]

FORMAT = "flax"
SEP = "."


@contextlib.contextmanager
def _naming(filename: str | os.PathLike, action: str) -> Iterator[None]:
    # The safetensors package reports a bad header or a failed write without the file name;
    # re-raised as the same class, naming it, so `except SafetensorError` keeps working.
    try:
        yield
    except SafetensorError as e:
        raise SafetensorError(
            f'Cannot {action} "{os.fspath(filename)}": {e}. Check that the path is right and '
            "that the file is a complete .safetensors file (not a torch .bin/.pt pickle or a "
            "partial download)."
        ) from None
    except TorchConversionError as e:
        raise TorchConversionError(
            [f'"{os.fspath(filename)}": {p}' for p in e.problems]) from None


def _flat(tree: Any) -> dict[str, np.ndarray]:
    t = read_target(tree)
    out = {}
    for path, value in t.values.items():
        key = SEP.join(str(p) for p in path)
        out[key] = np.ascontiguousarray(np.asarray(getattr(value, "value", value)))
    return out


def save_file(tree: Any, filename: str, metadata: Mapping[str, str] | None = None) -> None:
    """Writes ``tree``'s arrays to ``filename`` with ``"."``-joined keys.

    ``metadata`` (string to string) is stored next to ``{"format": "flax"}``.

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), 'w.safetensors')
    >>> save_file({'params': {'b': np.zeros(2)}}, path, metadata={'step': '7'})
    >>> read_metadata(path)['step']
    '7'
    """
    meta = {"format": FORMAT}
    meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
    arrays = _flat(tree)
    with _naming(filename, "write"):
        _np_save_file(arrays, filename, metadata=meta)


def read_metadata(filename: str) -> dict[str, str]:
    """The metadata stored in a ``.safetensors`` file (``{}`` if none)."""
    with _naming(filename, "read"), safe_open(filename, framework="np") as f:
        return dict(f.metadata() or {})


def _read(filename: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    with _naming(filename, "read"), safe_open(filename, framework="np") as f:
        meta = dict(f.metadata() or {})
        arrays = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - not a dict
    return arrays, meta


def load_file(filename: str, target: Any = None, *, rules: Mapping[str, Any] | None = None
              ) -> Any:
    """Reads ``filename``: as a nested dict, or into ``target`` (a Linen tree, NNX State/Module).

    A flax-format file whose keys are exactly the target's paths is restored leaf by leaf
    (cast to the target's dtypes); any other file (torch-written ``.safetensors``
    included) is converted with the torch matching and layout rules, ``rules`` as in
    :func:`flaxen.interop.torch.convert`. Every key or leaf that does not fit is listed in
    one :class:`~flaxen.errors.TorchConversionError`, each naming the file.

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), 'w.safetensors')
    >>> save_file({'params': {'w': np.ones(3, np.float32)}}, path)
    >>> target = {'params': {'w': np.zeros(3, np.float16)}}
    >>> str(load_file(path, target)['params']['w'].dtype)
    'float16'
    """
    arrays, meta = _read(filename)
    if target is None:
        if meta.get("format") not in (FORMAT, "flaxen", None):
            raise TorchConversionError([
                f"\"{filename}\" was written as format {meta.get('format')!r} (keys like "
                f"{sorted(arrays)[:2]}); pass a flaxen target to convert it into"])
        nested: dict = {}
        for key, value in arrays.items():
            node = nested
            parts = key.split(SEP)
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
        return nested
    t = read_target(target)
    by_key = {SEP.join(str(p) for p in path): path for path in t.values}
    if meta.get("format") in (FORMAT, "flaxen") and set(arrays) == set(by_key) and not rules:
        import jax

        problems, filled = [], {}
        for unit in t.units:
            for leaf in unit.leaves.values():
                arr = arrays[SEP.join(str(p) for p in leaf.path)]
                if tuple(arr.shape) != leaf.shape:
                    problems.append(f"{SEP.join(map(str, leaf.path))}: file has shape "
                                    f"{tuple(arr.shape)}, target wants {leaf.shape}")
                    continue
                filled[leaf.path] = jax.device_put(arr.astype(leaf.dtype, copy=False))
        if problems:
            raise TorchConversionError([f'"{filename}": {p}' for p in problems])
        return write_target(t, filled)
    with _naming(filename, "load"):
        return _conversion.convert(arrays, target, rules)
