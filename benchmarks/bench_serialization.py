"""to_bytes + from_bytes of a large parameter tree: flaxen vs flax vs minimal msgpack/numpy.

The tree mimics a model's params: 1,000 layers of (kernel, bias), 2,000 leaves of mixed
shapes and dtypes, 1 GiB in all (64 MiB with ``quick``). The "jax" baseline is the
shortest hand-written msgpack + numpy encoder/decoder (one ext per array, no chunking,
no state-dict conversion): roughly the cost floor.

Besides time, the note reports peak extra memory during each step as a multiple of the
tree's size (tracemalloc, which sees numpy buffers and bytes objects); ``to_bytes`` can
not do better than 1.0x since it returns the whole encoding.
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import jax
import jax.numpy as jnp
import msgpack
import numpy as np

from benchmarks._harness import Result, compare, have_flax

_SHAPES = [(64, 1024), (256, 256), (1024, 64), (128, 512), (512, 128), (3, 3, 64, 32)]
_DTYPES = [jnp.float32, jnp.float32, jnp.bfloat16, jnp.float32]


def _tree(total_bytes: int, n_layers: int = 1000) -> tuple[dict, int]:
    per_layer = total_bytes // n_layers
    tree: dict[str, Any] = {}
    nbytes = 0
    for i in range(n_layers):
        dtype = _DTYPES[i % len(_DTYPES)]
        itemsize = jnp.dtype(dtype).itemsize
        base = _SHAPES[i % len(_SHAPES)]
        out = base[-1]
        rows = max(1, per_layer // itemsize // out - 1)
        kernel_shape = (*base[:-2], max(1, rows // int(np.prod(base[:-2], dtype=int))), out)
        kernel = jnp.full(kernel_shape, i % 7, dtype)
        bias = jnp.full((out,), 0.5, dtype)
        block = tree.setdefault(f"block_{i // 50}", {})
        block[f"Dense_{i % 50}"] = {"kernel": kernel, "bias": bias}
        nbytes += kernel.nbytes + bias.nbytes
    return {"params": tree}, nbytes


def _ext_pack(x: Any) -> Any:
    if isinstance(x, (np.ndarray, jax.Array)):
        a = np.asarray(x)
        return msgpack.ExtType(1, msgpack.packb((a.shape, a.dtype.name, a.tobytes())))
    raise TypeError(type(x))


def _ext_unpack(code: int, data: bytes) -> Any:
    shape, name, buf = msgpack.unpackb(data)
    return np.frombuffer(buf, dtype=jnp.dtype(name)).reshape(shape)


def _plain_roundtrip(tree: dict) -> Any:
    data = msgpack.packb(tree, default=_ext_pack)
    return msgpack.unpackb(data, ext_hook=_ext_unpack)


def _peaks(to_bytes: Any, from_bytes: Any, tree: dict, nbytes: int) -> tuple[float, float]:
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        data = to_bytes(tree)
        peak_to = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        restored = from_bytes(tree, data)
        peak_from = tracemalloc.get_traced_memory()[1] - base
        del restored, data
    finally:
        tracemalloc.stop()
    return peak_to / nbytes, peak_from / nbytes


def run(quick: bool) -> list[Result]:
    from flaxen import serialization as xser

    fser = None
    if have_flax():
        from flax import serialization as fser
    size = (64 if quick else 1024) * 2**20
    tree, nbytes = _tree(size)
    rounds = 3

    impls = {
        "flaxen": (xser.to_bytes, xser.from_bytes),
        "flax": fser and (fser.to_bytes, fser.from_bytes),
        "jax": (lambda t: msgpack.packb(t, default=_ext_pack),
                lambda t, d: msgpack.unpackb(d, ext_hook=_ext_unpack)),
    }
    mem = []
    for name, pair in impls.items():
        if pair is not None:
            up, down = _peaks(pair[0], pair[1], tree, nbytes)
            mem.append(f"{name} to {up:.2f}x from {down:.2f}x")
    note = "peak extra memory / tree: " + ", ".join(mem)

    results = [
        compare("serialization", f"to_bytes+from_bytes ({nbytes / 2**20:.0f} MiB, 2000 leaves)", {
            "flaxen": lambda: xser.from_bytes(tree, xser.to_bytes(tree)),
            "flax": fser and (lambda: fser.from_bytes(tree, fser.to_bytes(tree))),
            "jax": lambda: _plain_roundtrip(tree),
        }, rounds=rounds, number=1, note=note),
    ]
    data = xser.to_bytes(tree)
    results.append(compare("serialization", "from_bytes only", {
        "flaxen": lambda: xser.from_bytes(tree, data),
        "flax": fser and (lambda: fser.from_bytes(tree, data)),
        "jax": lambda: msgpack.unpackb(data, ext_hook=_ext_unpack, strict_map_key=False),
    }, rounds=rounds, number=1))
    small, _ = _tree(2**20, n_layers=1000)
    results.append(compare("serialization", "to_bytes+from_bytes (1 MiB, 2000 small leaves)", {
        "flaxen": lambda: xser.from_bytes(small, xser.to_bytes(small)),
        "flax": fser and (lambda: fser.from_bytes(small, fser.to_bytes(small))),
        "jax": lambda: _plain_roundtrip(small),
    }, rounds=rounds))
    return results
