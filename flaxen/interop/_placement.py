"""Putting converted arrays on the device: each one copied once, into memory XLA adopts.

``convert`` hands this file a numpy view per target leaf (often a transposed view of torch
memory). Every leaf needs exactly one copy (the result must not change when the torch model
is trained further), and that copy is the whole cost of a conversion, so it is made once:

- a permuted view (a Linear or Conv weight) of 1 MiB or more, and on an accelerator every
  permuted view, is handed to XLA as its contiguous base (adopted without a copy) and
  transposed there: on the CPU XLA's tiled transpose uses every core and runs about twice
  as fast as torch's blocked copy; on an accelerator it costs the host nothing;
- anything else is copied into a 64-byte aligned buffer, which XLA's CPU client adopts
  without copying again (a misaligned one is silently copied a second time by
  ``jax.device_put``): by torch's blocked copy for small permuted views, by ``np.copyto``
  otherwise, casting on the way when the target asks for another dtype; for large state
  dicts, on a thread per core (both copies release the GIL).

>>> import numpy as np
>>> w = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> out = place({'k': (w.T, np.dtype(np.float32))}, on_device=False)
>>> np.asarray(out['k']).tolist()
[[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

_ALIGN = 64
_INT_OF_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
# Below this many bytes in all, threads cost more than they save.
_PARALLEL_BYTES = 8 << 20
_POOL: ThreadPoolExecutor | None = None
# From this size on, a permuted view is transposed by XLA on the CPU too: its tiled transpose
# reads the torch buffer in place (adopted without a copy) and runs about twice as fast as
# torch's blocked copy; below it, compiling the transpose for a new shape costs more.
_XLA_TRANSPOSE_BYTES = 1 << 20


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def owned_copy(arr: np.ndarray, dtype: Any) -> np.ndarray:
    """``arr`` cast to ``dtype`` as a new aligned, C-contiguous array (one pass).

    An array that already owns its contiguous memory in the right dtype (one a user rule
    just computed) is returned as it is.
    """
    dtype = np.dtype(dtype)
    if arr.dtype == dtype and arr.flags.c_contiguous and arr.flags.owndata:
        return arr
    out = aligned_empty(arr.shape, dtype)
    torch = sys.modules.get("torch")
    if (torch is not None and arr.dtype == dtype and not arr.flags.c_contiguous
            and arr.size > 4096 and arr.itemsize in _INT_OF_SIZE
            and all(s >= 0 for s in arr.strides)):
        # torch's copy lays a permuted view out blockwise; through an integer view of the
        # same width it also covers dtypes torch lacks (bfloat16 from ml_dtypes).
        as_int = _INT_OF_SIZE[arr.itemsize]
        torch.from_numpy(out.view(as_int)).copy_(torch.from_numpy(arr.view(as_int)))
    else:
        np.copyto(out, arr, casting="unsafe")
    return out


def _as_permutation(arr: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """``(base, perm)`` with ``base`` C-contiguous and ``arr == base.transpose(perm)``."""
    if arr.ndim < 2 or any(s <= 0 for s in arr.strides):
        return None
    order = sorted(range(arr.ndim), key=lambda k: -arr.strides[k])
    base = np.lib.stride_tricks.as_strided(
        arr, [arr.shape[k] for k in order], [arr.strides[k] for k in order])
    if not base.flags.c_contiguous:
        return None
    return base, tuple(order.index(k) for k in range(arr.ndim))


def device_layout(arr: np.ndarray, dtype: Any) -> Any:
    """A permuted view sent contiguous and transposed on the device; None if not one."""
    if arr.flags.c_contiguous:
        return None
    found = _as_permutation(arr)
    if found is None:
        return None
    import jax

    base, perm = found
    # The transpose writes a new buffer, so sending a view of torch memory is safe.
    out = jax.numpy.transpose(jax.device_put(base), perm)
    return out.astype(dtype) if out.dtype != dtype else out


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max(1, os.cpu_count() or 1),
                                   thread_name_prefix="flaxen-interop")
    return _POOL


def place(filled: dict[Any, Any], on_device: bool) -> dict[Any, Any]:
    """``{path: jax.Array}`` for ``{path: (numpy view, target dtype)}``."""
    import jax

    out: dict[Any, Any] = {}
    host = []
    # XLA's transposes first: dispatch is asynchronous and XLA spreads each one over the
    # cores itself, so they are issued from this thread while the host copies proceed
    for p, (arr, dtype) in filled.items():
        moved = None
        if on_device or arr.nbytes >= _XLA_TRANSPOSE_BYTES:
            moved = device_layout(arr, dtype)
        if moved is None:
            host.append(p)
        else:
            out[p] = moved
    total = sum(filled[p][0].nbytes for p in host)
    if total < _PARALLEL_BYTES or (os.cpu_count() or 1) < 2:
        copies = [owned_copy(*filled[p]) for p in host]
    else:
        # largest first, so the last task to finish is a small one
        order = sorted(host, key=lambda p: -filled[p][0].nbytes)
        futures = {p: _pool().submit(owned_copy, *filled[p]) for p in order}
        copies = [futures[p].result() for p in host]
    out.update(zip(host, jax.device_put(copies)))  # one batched transfer
    # the transposes read torch memory: done before the caller can change the tensors
    return jax.block_until_ready({p: out[p] for p in filled})
