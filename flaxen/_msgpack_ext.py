"""Msgpack encoding of state dicts with Flax's array extension types (interim version)."""

from typing import Any

import msgpack
import numpy as np

MAX_CHUNK_SIZE = 2**30


def _pack_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return msgpack.ExtType(3, msgpack.packb(((), x.dtype.name, x.tobytes())))
    if hasattr(x, "__array__") and hasattr(x, "dtype"):
        a = np.asarray(x)
        return msgpack.ExtType(1, msgpack.packb((a.shape, a.dtype.name, a.tobytes())))
    if isinstance(x, complex):
        return msgpack.ExtType(2, msgpack.packb((x.real, x.imag)))
    raise TypeError(f"can not serialize {type(x).__name__!r} object")


def _unpack_ext(code: int, data: bytes) -> Any:
    import ml_dtypes

    if code == 2:
        re, im = msgpack.unpackb(data)
        return complex(re, im)
    shape, name, buf = msgpack.unpackb(data, raw=False)
    dtype = getattr(ml_dtypes, name, None) or np.dtype(name)
    arr = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return arr[()] if code == 3 else arr


def msgpack_serialize(pytree: Any, in_place: bool = False) -> bytes:
    return msgpack.packb(pytree, default=_pack_default, strict_types=True)


def msgpack_restore(encoded_pytree: bytes) -> Any:
    return msgpack.unpackb(encoded_pytree, ext_hook=_unpack_ext, raw=False, strict_map_key=False)
