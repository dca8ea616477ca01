"""Msgpack encoding of state dicts, byte-compatible with Flax, with few copies.

Format (shared with Flax): plain msgpack for dicts, lists, str, bytes, ints,
floats, bools and None; arrays as msgpack extension types whose payload is
itself msgpack ``[shape, dtype_name, raw_bytes]``:

* ext 1: ``numpy.ndarray`` / ``jax.Array`` (C-order bytes),
* ext 2: Python ``complex`` as ``[real, imag]``,
* ext 3: numpy scalars, like ext 1 with shape ``[]``.

Arrays larger than the chunk size are written as
``{'__msgpack_chunked_array__': True, 'shape': {'0': d0, ...}, 'chunks': {'0': ext1, ...}}``
with the flattened array cut into 1-D pieces of ``chunk_size // itemsize``
elements, because one msgpack object cannot exceed 4 GiB.

Why not ``msgpack.packb`` with a ``default`` hook: that path copies each array
twice (``tobytes`` and the ext payload) and then grows and copies the whole
output buffer. Here the encoder lays out the small headers in Python and keeps
large arrays as they are; ``b"".join`` then sizes the output once and copies
each array's bytes once, straight into the result. The decoder lets msgpack's C
parser walk the structure; a large array payload's header is read by a
``msgpack.Unpacker`` and its bytes become a zero-copy ``np.frombuffer`` view.
"""

from __future__ import annotations

import re
import struct
from typing import Any

import ml_dtypes
import msgpack
import numpy as np

EXT_NDARRAY = 1
EXT_COMPLEX = 2
EXT_NPSCALAR = 3
CHUNKED_KEY = "__msgpack_chunked_array__"

_pack_double = struct.Struct(">d").pack
_unpack_double = struct.Struct(">d").unpack_from


def _str_header(n: int) -> bytes:
    if n < 32:
        return bytes((0xA0 | n,))
    if n < 0x100:
        return bytes((0xD9, n))
    if n < 0x10000:
        return b"\xda" + n.to_bytes(2, "big")
    return b"\xdb" + n.to_bytes(4, "big")


def _bin_header(n: int) -> bytes:
    if n < 0x100:
        return bytes((0xC4, n))
    if n < 0x10000:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _map_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x80 | n,))
    if n < 0x10000:
        return b"\xde" + n.to_bytes(2, "big")
    return b"\xdf" + n.to_bytes(4, "big")


_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}


def _ext_header(code: int, n: int) -> bytes:
    fixed = _FIXEXT.get(n)
    if fixed is not None:
        return bytes((fixed, code))
    if n < 0x100:
        return bytes((0xC7, n, code))
    if n < 0x10000:
        return b"\xc8" + n.to_bytes(2, "big") + bytes((code,))
    return b"\xc9" + n.to_bytes(4, "big") + bytes((code,))


def _int_bytes(x: int) -> bytes:
    if x >= 0:
        if x < 0x80:
            return bytes((x,))
        if x < 0x100:
            return bytes((0xCC, x))
        if x < 0x10000:
            return b"\xcd" + x.to_bytes(2, "big")
        if x < 0x100000000:
            return b"\xce" + x.to_bytes(4, "big")
        if x < 1 << 64:
            return b"\xcf" + x.to_bytes(8, "big")
    else:
        if x >= -32:
            return bytes((x & 0xFF,))
        if x >= -0x80:
            return b"\xd0" + x.to_bytes(1, "big", signed=True)
        if x >= -0x8000:
            return b"\xd1" + x.to_bytes(2, "big", signed=True)
        if x >= -0x80000000:
            return b"\xd2" + x.to_bytes(4, "big", signed=True)
        if x >= -(1 << 63):
            return b"\xd3" + x.to_bytes(8, "big", signed=True)
    raise OverflowError(f"Integer value out of range for msgpack (64 bits at most): {x}")


def _str_bytes(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _str_header(len(raw)) + raw


def _unsupported_dtype(dtype: np.dtype) -> bool:
    # ml_dtypes (bfloat16, float8_*, int4) report kind 'V' too, but their type is
    # their own scalar class; plain and structured voids use np.void.
    return dtype.hasobject or dtype.kind in "US" or dtype.type is np.void


def _check_array_dtype(dtype: np.dtype) -> None:
    if _unsupported_dtype(dtype):
        raise ValueError(
            f"dtype {dtype} is not supported: object, structured and string arrays cannot be "
            "stored (numeric, bool and datetime dtypes can). Convert it to a numeric array or "
            "keep it out of the state dict."
        )


_checked_dtypes: set[np.dtype] = set()


def _as_numpy(x: Any) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except TypeError as e:
        dtype_name = str(getattr(x, "dtype", ""))
        if dtype_name.startswith("key<"):
            # JAX's own refusal says nothing the message below does not: one traceback.
            raise TypeError(
                f"Cannot store a typed PRNG key (dtype {dtype_name}): its bits have no numpy "
                "form. Store jax.random.key_data(key) instead, and rebuild the key after "
                "restoring with jax.random.wrap_key_data(data)."
            ) from None
        raise TypeError(
            f"{e} Convert the value to a numpy array before storing it."
        ) from e
    dtype = arr.dtype
    if dtype not in _checked_dtypes:
        if not dtype.isnative:
            # Raw bytes are written unlabeled; make them native-endian like everything else.
            return _as_numpy(arr.astype(dtype.newbyteorder("=")))
        _check_array_dtype(dtype)
        _checked_dtypes.add(dtype)
    return arr


# Arrays up to this size are copied into the small-piece buffer right away (cheaper
# than one more part for finish to copy); larger ones are copied once, straight into
# the final output, by _Writer.finish. The copies live until the output is complete,
# so at most _INLINE_TOTAL bytes are inlined per encoding: peak memory stays close
# to the output's size however many small arrays a tree holds.
_INLINE_BYTES = 1 << 16
_INLINE_TOTAL = 4 << 20

# Encoded headers by (ext code, shape, dtype): parameter trees repeat a few shapes.
_header_cache: dict[tuple, bytes] = {}


def _payload_header(code: int, shape: tuple, dtype: np.dtype, nbytes: int) -> bytes:
    key = (code, shape, dtype)
    header = _header_cache.get(key)
    if header is None:
        head = bytearray(b"\x93")
        head += _array_header(len(shape))
        for d in shape:
            head += _int_bytes(d)
        head += _str_bytes(dtype.name)
        head += _bin_header(nbytes)
        header = _ext_header(code, len(head) + nbytes) + bytes(head)
        if len(_header_cache) > 4096:
            _header_cache.clear()
        _header_cache[key] = header
    return header


class _Writer:
    """Collects the output as small byte pieces plus arrays to copy in at the end."""

    __slots__ = ("parts", "buf", "size", "inline_left", "chunk_size", "sort_keys")

    def __init__(self, chunk_size: int, sort_keys: bool) -> None:
        self.parts: list[Any] = []  # bytes and np.ndarray, in output order
        self.buf = bytearray()
        self.size = 0
        self.inline_left = _INLINE_TOTAL
        self.chunk_size = chunk_size
        self.sort_keys = sort_keys

    def flush(self) -> None:
        if self.buf:
            self.parts.append(bytes(self.buf))
            self.size += len(self.buf)
            self.buf = bytearray()

    def array_payload(self, code: int, arr: np.ndarray) -> None:
        nbytes = arr.nbytes
        self.buf += _payload_header(code, arr.shape, arr.dtype, nbytes)
        if nbytes <= _INLINE_BYTES and nbytes <= self.inline_left:
            self.inline_left -= nbytes
            self.buf += arr.tobytes()
        else:
            self.flush()
            self.parts.append(arr)
            self.size += nbytes

    def ndarray(self, arr: np.ndarray) -> None:
        nbytes = arr.nbytes
        if nbytes <= self.chunk_size:
            self.array_payload(EXT_NDARRAY, arr)
            return
        per_chunk = self.chunk_size // arr.dtype.itemsize
        if per_chunk < 1:
            raise ValueError(
                f"MAX_CHUNK_SIZE ({self.chunk_size} bytes) is smaller than one element of "
                f"dtype {arr.dtype}; raise it."
            )
        flat = arr.reshape(-1)
        n_chunks = -(-flat.size // per_chunk)
        self.buf += _map_header(3)
        self.buf += _str_bytes(CHUNKED_KEY)
        self.buf += b"\xc3"
        self.buf += _str_bytes("shape")
        self.buf += _map_header(arr.ndim)
        for i, d in enumerate(arr.shape):
            self.buf += _str_bytes(str(i))
            self.buf += _int_bytes(d)
        self.buf += _str_bytes("chunks")
        self.buf += _map_header(n_chunks)
        for i in range(n_chunks):
            self.buf += _str_bytes(str(i))
            self.array_payload(EXT_NDARRAY, flat[i * per_chunk:(i + 1) * per_chunk])

    def value(self, x: Any) -> None:
        buf = self.buf
        t = type(x)
        if t is dict:
            buf += _map_header(len(x))
            items = _sorted_items(x) if self.sort_keys else x.items()
            for k, v in items:
                try:
                    self.key(k)
                    self.value(v)
                except (TypeError, ValueError, OverflowError) as e:
                    _note_key(e, k)
                    raise
        elif t is str:
            buf += _str_bytes(x)
        elif t is np.ndarray:
            self.ndarray(_as_numpy(x))
        elif x is None:
            buf += b"\xc0"
        elif t is bool:
            buf += b"\xc3" if x else b"\xc2"
        elif t is int:
            buf += _int_bytes(x)
        elif t is float:
            buf += b"\xcb"
            buf += _pack_double(x)
        elif t is list or t is tuple:
            buf += _array_header(len(x))
            for i, v in enumerate(x):
                try:
                    self.value(v)
                except (TypeError, ValueError, OverflowError) as e:
                    _note_key(e, i)
                    raise
        elif t is bytes or t is bytearray or t is memoryview:
            raw = bytes(x)
            buf += _bin_header(len(raw))
            buf += raw
        elif isinstance(x, np.generic):
            self.array_payload(EXT_NPSCALAR, _as_numpy(x).reshape(()))
        elif t is complex:
            buf += _ext_header(EXT_COMPLEX, 19)
            buf += b"\x92\xcb"
            buf += _pack_double(x.real)
            buf += b"\xcb"
            buf += _pack_double(x.imag)
        elif _is_array(x):
            self.ndarray(_as_numpy(x))
        else:
            raise TypeError(
                f"can not serialize {t.__name__!r} object: msgpack_serialize takes state dicts "
                "(dicts, lists, numbers, str, bytes, None and arrays). Call "
                "flaxen.serialization.to_state_dict first, or register the type with "
                "register_serialization_state."
            )

    def key(self, k: Any) -> None:
        t = type(k)
        if t is str:
            self.buf += _str_bytes(k)
        elif t is int or t is float or t is bool or t is bytes or k is None:
            self.value(k)
        else:
            raise TypeError(
                f"can not serialize dict key {k!r} of type {t.__name__}: msgpack keys must be "
                "str, bytes, int, float, bool or None. to_state_dict turns keys into str for you."
            )

    def finish(self) -> bytes:
        self.flush()
        return b"".join(map(as_buffer, self.parts))


def as_buffer(part: bytes | np.ndarray) -> bytes | memoryview:
    """The bytes of one :func:`encode_parts` part (an array's in C order), uncopied if possible."""
    if type(part) is bytes:
        return part
    # Viewing as uint8 gives a buffer even for dtypes (bfloat16, ...) memoryview cannot express.
    return np.ascontiguousarray(part).reshape(-1).view(np.uint8).data


def _note_key(e: BaseException, key: Any) -> None:
    # Record the path innermost-first as the error unwinds; encode() formats it once.
    path = getattr(e, "_flaxen_path", None)
    if path is None:
        path = []
        e._flaxen_path = path  # type: ignore[attr-defined]
    path.append(str(key))


def _sorted_items(x: dict) -> list:
    try:
        return sorted(x.items(), key=lambda kv: kv[0])
    except TypeError as e:
        raise TypeError(
            f"Cannot sort the dict keys {list(x)!r}: with in_place=False keys are ordered like "
            "jax.tree_util orders them, which needs comparable keys. Use str keys (to_state_dict "
            "does) or in_place=True."
        ) from e


def _is_array(x: Any) -> bool:
    # jax.Array and other array types; checked by duck typing so this module
    # stays importable without touching JAX.
    return hasattr(x, "__array__") and hasattr(x, "dtype") and hasattr(x, "shape")


def _write_tree(pytree: Any, chunk_size: int, sort_keys: bool) -> _Writer:
    writer = _Writer(chunk_size, sort_keys)
    try:
        writer.value(pytree)
    except (TypeError, ValueError, OverflowError) as e:
        path = getattr(e, "_flaxen_path", None)
        where = "/" + "/".join(reversed(path)) if path else "/"
        if type(e) in (TypeError, ValueError, OverflowError):
            # The same error with the path in front: one traceback instead of a chain of two.
            e.args = (f"At {where}: {e}",)
            raise
        raise type(e)(f"At {where}: {e}") from e
    return writer


def encode(pytree: Any, chunk_size: int, sort_keys: bool) -> bytes:
    """Packs ``pytree`` exactly like Flax's ``msgpack_serialize``; see the module docstring."""
    return _write_tree(pytree, chunk_size, sort_keys).finish()


def encode_parts(pytree: Any, chunk_size: int, sort_keys: bool) -> list[Any]:
    """The encoding of ``pytree`` as ``bytes`` pieces and numpy arrays, in order, uncopied.

    Concatenating each part's bytes (arrays in C order) gives exactly
    :func:`encode`'s output; for streaming a large tree to a file without
    building it in memory. The arrays may be views of the caller's data.
    """
    writer = _write_tree(pytree, chunk_size, sort_keys)
    writer.flush()
    return writer.parts


# ----------------------------------------------------------------------------- decoding

# Dtype names as numpy/ml_dtypes spell them: float32, bfloat16, datetime64[ns], ...
_DTYPE_NAME = re.compile(r"[a-z][a-z0-9_]*(\[[0-9]*[a-zA-Z]+\])?\Z")
_dtype_cache: dict[str, np.dtype] = {}


class DecodeError(ValueError):
    """Raised for bytes that are not a valid Flax msgpack encoding."""


def dtype_from_name(name: Any) -> np.dtype:
    """Maps a stored dtype name to a dtype, accepting only plain numeric/bool/time dtypes.

    Names are looked up, never evaluated, so hostile bytes cannot smuggle in an
    object or structured dtype.
    """
    dtype = _dtype_cache.get(name) if isinstance(name, str) else None
    if dtype is not None:
        return dtype
    if not isinstance(name, str) or not _DTYPE_NAME.match(name):
        raise DecodeError(f"invalid array dtype name {name!r} in the encoded data")
    special = getattr(ml_dtypes, name, None)
    if isinstance(special, type) and issubclass(special, np.generic):
        dtype = np.dtype(special)
    else:
        try:
            dtype = np.dtype(name)
        except TypeError:
            raise DecodeError(f"unknown array dtype {name!r} in the encoded data") from None
    if _unsupported_dtype(dtype):
        raise DecodeError(f"array dtype {name!r} is not allowed in the encoded data")
    _dtype_cache[name] = dtype
    return dtype


# Payloads up to this size are parsed by msgpack's C code (copying them is cheap);
# larger ones are read in place so their bytes are never copied a second time.
_SMALL_PAYLOAD = 1 << 16
# How much of a large payload is handed to the Unpacker to read the header from.
_HEADER_PEEK = 1 << 12
_BIN_LEN_WIDTH = {0xC4: 1, 0xC5: 2, 0xC6: 4}


def _read_header(data: bytes, peek: int) -> tuple[Any, Any, int]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=peek)
    unpacker.feed(memoryview(data)[:peek])
    if unpacker.read_array_header() != 3:
        raise ValueError("expected [shape, dtype name, bytes]")
    shape = unpacker.unpack()
    name = unpacker.unpack()
    return shape, name, unpacker.tell()


def _parse_array_payload(data: bytes) -> tuple[list[int], Any, int]:
    """Reads a large ``[shape, dtype_name, bin]`` payload's header; returns shape, name, offset."""
    try:
        # numpy arrays have at most 64 dimensions: a valid header is far shorter.
        shape, name, pos = _read_header(data, _HEADER_PEEK)
        width = _BIN_LEN_WIDTH[data[pos]]  # the bytes' own header: type byte, then length
    except Exception as e:
        raise DecodeError(f"malformed array payload ({type(e).__name__}: {e})") from None
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
        raise DecodeError(f"malformed array shape {shape!r}")
    offset = pos + 1 + width
    if offset + int.from_bytes(data[pos + 1:offset], "big") != len(data):
        raise DecodeError("malformed array payload (the array bytes are not at the end)")
    return shape, name, offset


def _decode_small_array(data: bytes) -> np.ndarray:
    try:
        shape, name, raw = msgpack.unpackb(data)
    except Exception as e:
        raise DecodeError(f"malformed array payload ({type(e).__name__}: {e})") from None
    if type(shape) is not list or type(raw) is not bytes:
        raise DecodeError("malformed array payload (expected [shape, dtype name, bytes])")
    dtype = dtype_from_name(name)
    count = 1
    for d in shape:
        if type(d) is not int or d < 0:
            raise DecodeError(f"malformed array shape {shape!r}")
        count *= d
    if count * dtype.itemsize != len(raw):
        raise DecodeError(
            f"array of shape {tuple(shape)} and dtype {name} needs {count * dtype.itemsize} "
            f"bytes but the encoded data holds {len(raw)}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _decode_array(data: bytes) -> np.ndarray:
    if len(data) <= _SMALL_PAYLOAD:
        return _decode_small_array(data)
    shape, name, offset = _parse_array_payload(data)
    dtype = dtype_from_name(name)
    count = 1
    for d in shape:
        count *= d
    nbytes = len(data) - offset
    if count * dtype.itemsize != nbytes:
        raise DecodeError(
            f"array of shape {tuple(shape)} and dtype {name} needs {count * dtype.itemsize} "
            f"bytes but the encoded data holds {nbytes}"
        )
    if count == 0:
        return np.empty(shape, dtype)
    # A zero-copy view of the payload: msgpack already made one copy of it.
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_NDARRAY:
        return _decode_array(data)
    if code == EXT_NPSCALAR:
        arr = _decode_array(data)
        return arr[()] if arr.ndim == 0 else arr
    if code == EXT_COMPLEX:
        try:
            re_, im_ = msgpack.unpackb(data)
            return complex(re_, im_)
        except Exception as e:
            raise DecodeError(f"malformed complex number payload ({e})") from None
    raise DecodeError(
        f"unknown msgpack extension type {code} (flax/flaxen write only 1, 2 and 3)"
    )


def _unchunk(d: dict) -> Any:
    if CHUNKED_KEY not in d:
        return d
    shape_d, chunks = d.get("shape"), d.get("chunks")
    if not isinstance(shape_d, dict) or not isinstance(chunks, dict) or len(d) != 3:
        raise DecodeError("malformed chunked array (expected keys shape and chunks)")
    try:
        shape = [shape_d[str(i)] for i in range(len(shape_d))]
        pieces = [chunks[str(i)] for i in range(len(chunks))]
    except KeyError as e:
        raise DecodeError(f"malformed chunked array: missing entry {e}") from None
    if not all(type(s) is int and s >= 0 for s in shape):
        raise DecodeError(f"malformed chunked array shape {shape!r}")
    if not pieces or not all(type(p) is np.ndarray and p.ndim == 1 for p in pieces):
        raise DecodeError("malformed chunked array: chunks must be 1-D arrays")
    dtype = pieces[0].dtype
    total = sum(p.size for p in pieces)
    count = 1
    for s in shape:
        count *= s
    if total != count or any(p.dtype != dtype for p in pieces):
        raise DecodeError(
            f"malformed chunked array: shape {tuple(shape)} needs {count} elements of one "
            f"dtype, the chunks hold {total}"
        )
    out = np.empty(count, dtype)
    pos = 0
    for i in range(len(pieces)):
        piece = pieces[i]
        pieces[i] = None  # drop each chunk as soon as it is copied, to bound peak memory
        chunks[str(i)] = None
        out[pos:pos + piece.size] = piece
        pos += piece.size
        del piece
    return out.reshape(shape)


def decode(encoded: bytes | bytearray | memoryview) -> Any:
    """Unpacks bytes written by :func:`encode` (or by Flax); arrays come back as numpy."""
    try:
        return msgpack.unpackb(
            encoded,
            ext_hook=_ext_hook,
            object_hook=_unchunk,
            raw=False,
            strict_map_key=False,
        )
    except (ValueError, TypeError, RecursionError, msgpack.exceptions.UnpackException) as e:
        detail = str(e) if isinstance(e, DecodeError) else f"{type(e).__name__}: {e}"
        raise DecodeError(
            f"Cannot decode the serialized data: {detail}. The bytes are truncated, corrupted, "
            "or were not written by flax/flaxen `to_bytes`/`msgpack_serialize`; write them again "
            "from the original tree."
        ) from None
