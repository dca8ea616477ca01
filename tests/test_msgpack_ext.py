"""Tests for flaxen._msgpack_ext: output assembly with b"".join and the large-payload reader."""

import ml_dtypes
import msgpack
import numpy as np
import pytest

from flaxen import _msgpack_ext, serialization


def test_as_buffer_gives_c_order_bytes_for_any_dtype_and_layout():
    arr = np.arange(12, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 4).T
    assert bytes(_msgpack_ext.as_buffer(arr)) == np.ascontiguousarray(arr).tobytes()
    assert _msgpack_ext.as_buffer(b"abc") == b"abc"


def test_encode_returns_bytes_equal_to_msgpack_packb_with_ext_types():
    arr = np.arange(70_000, dtype=np.int16)
    out = _msgpack_ext.encode({"a": arr.T[::2]}, serialization.MAX_CHUNK_SIZE, sort_keys=False)
    assert type(out) is bytes
    payload = msgpack.packb([[35_000], "int16", arr[::2].tobytes()])
    assert out == msgpack.packb({"a": msgpack.ExtType(1, payload)})


def _large_payload(header: bytes, nbytes: int) -> bytes:
    return msgpack.packb(msgpack.ExtType(1, header + msgpack.packb(b"\x01" * nbytes)))


def test_large_payload_with_unusual_header_encoding_is_read_in_place():
    # A 4-byte int for the shape and a str8 dtype name: valid msgpack, not what flax writes.
    header = b"\x93\x91\xce" + (100_000).to_bytes(4, "big") + b"\xd9\x04int8"
    out = serialization.msgpack_restore(_large_payload(header, 100_000))
    assert out.shape == (100_000,) and out.dtype == np.int8 and int(out.sum()) == 100_000
    assert not out.flags.owndata


@pytest.mark.parametrize(
    "header, pattern",
    [
        (b"\x92\x91\xce" + (100_000).to_bytes(4, "big"), "malformed array payload"),
        (b"\x93\xa1x\xa4int8", "malformed array shape"),
        (b"\x93\x91\xce" + (100_001).to_bytes(4, "big") + b"\xa4int8", "needs 100001 bytes"),
    ],
)
def test_large_malformed_payloads_raise_decode_errors(header, pattern):
    with pytest.raises(ValueError, match=pattern):
        serialization.msgpack_restore(_large_payload(header, 100_000))
