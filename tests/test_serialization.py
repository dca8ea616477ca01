"""flaxen.serialization: state dicts, msgpack bytes, chunking, bad input, round-trip properties."""

import collections
import struct as pystruct

import jax
import jax.numpy as jnp
import ml_dtypes
import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flaxen import _msgpack_ext
from flaxen import serialization as ser

NT = collections.namedtuple("NT", ["x", "y"])


def test_state_dict_rules():
    tree = {"a": [1, (2, 3)], "b": None, "c": NT(1, [2]), 5: "k"}
    assert ser.to_state_dict(tree) == {
        "a": {"0": 1, "1": {"0": 2, "1": 3}}, "b": None, "c": {"x": 1, "y": {"0": 2}}, "5": "k"}
    assert ser.to_state_dict([]) == {} and ser.to_state_dict(7) == 7


def test_from_state_dict_rebuilds_target_types():
    target = {"l": [0, 0], "t": (0, 0), "n": NT(0, 0), 1: 0}
    state = {"l": {"0": 1, "1": 2}, "t": {"0": 3, "1": 4}, "n": {"x": 5, "y": 6}, "1": 7}
    assert ser.from_state_dict(target, state) == {"l": [1, 2], "t": (3, 4), "n": NT(5, 6), 1: 7}


@pytest.mark.parametrize(
    "target, state, pattern",
    [
        ({"a": 1, "b": 2}, {"a": 3},
         r"contains keys \{'b'\} .* at path \.\n.*state dict has keys \['a'\]"),
        ({"p": {"D": {"k": 1}}}, {"p": {"D": {"x": 3}}}, r"\{'k'\} .* at path \./p/D"),
        ({"a": [1, 2]}, {"a": {"0": 5}}, r"list .* got 2 and 1 at path \./a"),
        ({"a": NT(1, 2)}, {"a": {"x": 5}}, r"named tuple .* at path \./a"),
        ({"a": {"b": 1}}, {"a": 5}, r"dict at path /a: .* holds int"),
        ({"a": [1]}, {"a": 5}, r"list at path /a"),
    ],
)
def test_structure_mismatch_names_the_path(target, state, pattern):
    with pytest.raises(ValueError, match=pattern):
        ser.from_state_dict(target, state)


def test_register_serialization_state():
    class Box:
        def __init__(self, v):
            self.v = v

    ser.register_serialization_state(
        Box, lambda b: {"v": ser.to_state_dict(b.v)},
        lambda b, s: Box(ser.from_state_dict(b.v, s["v"], name="v")))
    assert ser.is_serializable(Box(1))
    assert ser.from_bytes(Box([0]), ser.to_bytes(Box([9]))).v == [9]
    with pytest.raises(ValueError, match="already registered"):
        ser.register_serialization_state(Box, lambda b: {}, lambda b, s: b)
    ser.register_serialization_state(Box, lambda b: {}, lambda b, s: b, override=True)
    with pytest.raises(ValueError, match="already registered"):
        ser.register_serialization_state(dict, lambda b: {}, lambda b, s: b)


def test_current_path_inside_a_handler():
    seen = []

    class Leaf:
        pass

    ser.register_serialization_state(
        Leaf, lambda x: {}, lambda x, s: seen.append(ser.current_path()) or x)
    ser.from_state_dict({"a": [Leaf()]}, {"a": {"0": {}}})
    assert seen == ["./a/0"]


ALL_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128,
    ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.int4, ml_dtypes.uint4,
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_round_trips_bit_exactly(dtype):
    arr = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    scalar = arr.reshape(-1)[1]
    out = ser.msgpack_restore(ser.msgpack_serialize({"a": arr, "s": scalar, "t": arr.T}))
    for got, want in ((out["a"], arr), (out["t"], arr.T)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()
    assert type(out["s"]) is type(scalar) and out["s"].tobytes() == scalar.tobytes()


def test_jax_arrays_come_back_as_numpy_and_plain_values_keep_types():
    tree = {"j": jnp.arange(3.0), "c": 1 + 2j, "f": 1.5, "i": -7, "b": True, "s": "x",
            "by": b"\x00", "n": None, "big": 2**63, "neg": -(2**63), "e": np.zeros((2, 0)),
            "d": np.datetime64("2020-01-01")}
    out = ser.msgpack_restore(ser.msgpack_serialize(tree))
    assert type(out["j"]) is np.ndarray and out["j"].tolist() == [0.0, 1.0, 2.0]
    for k in ("c", "f", "i", "b", "s", "by", "n", "big", "neg", "d"):
        assert out[k] == tree[k] and type(out[k]) is type(tree[k])
    assert out["e"].shape == (2, 0)


def test_key_order_in_place_vs_copy():
    tree = {"b": 1, "a": {"d": 1, "c": 2}}
    assert list(ser.msgpack_restore(ser.msgpack_serialize(tree))) == ["a", "b"]
    assert list(ser.msgpack_restore(ser.msgpack_serialize(tree, in_place=True))) == ["b", "a"]
    assert list(ser.msgpack_restore(ser.to_bytes(tree))["a"]) == ["d", "c"]
    assert tree == {"b": 1, "a": {"d": 1, "c": 2}}


def test_chunked_arrays(monkeypatch):
    monkeypatch.setattr(ser, "MAX_CHUNK_SIZE", 16)
    tree = {"big": np.arange(10, dtype=np.float32), "edge": np.arange(4, dtype=np.float32),
            "t": np.arange(20.0).reshape(4, 5).T, "j": jnp.arange(6, dtype=jnp.int32)}
    data = ser.msgpack_serialize(tree, in_place=True)
    raw = msgpack.unpackb(data, strict_map_key=False)
    assert raw["big"]["__msgpack_chunked_array__"] is True
    assert raw["big"]["shape"] == {"0": 10} and len(raw["big"]["chunks"]) == 3
    assert isinstance(raw["edge"], msgpack.ExtType)  # exactly the limit: not chunked
    out = ser.msgpack_restore(data)
    for k, v in tree.items():
        np.testing.assert_array_equal(out[k], np.asarray(v))
    assert ser.msgpack_restore(ser.msgpack_serialize(np.arange(9.0))).tolist() == list(range(9))


def test_to_bytes_from_bytes_with_targets():
    target = {"params": {"w": jnp.zeros((2, 2)), "b": [0.0, 0.0]}, "step": 0}
    value = {"params": {"w": jnp.ones((2, 2)), "b": [1.0, 2.0]}, "step": 3}
    restored = ser.from_bytes(target, ser.to_bytes(value))
    assert type(restored["params"]["w"]) is np.ndarray
    assert restored["params"]["b"] == [1.0, 2.0] and restored["step"] == 3
    with pytest.raises(ValueError, match="at path ./params"):
        ser.from_bytes({"params": {"w": 0, "z": 0}}, ser.to_bytes(value))


def test_unsupported_values_raise_with_the_path():
    with pytest.raises(TypeError, match=r"At /a/1: can not serialize 'object'"):
        ser.msgpack_serialize({"a": [1, object()]})
    with pytest.raises(ValueError, match=r"At /s: dtype <U2 is not supported"):
        ser.msgpack_serialize({"s": np.array(["ab"])})
    with pytest.raises(ValueError, match="not supported"):
        ser.msgpack_serialize(np.array([object()]))
    with pytest.raises(TypeError, match="key_data"):
        ser.to_bytes({"k": jax.random.key(0)})
    with pytest.raises(OverflowError):
        ser.msgpack_serialize(2**64)
    with pytest.raises(TypeError, match="dict key"):
        ser.msgpack_serialize({(1, 2): 3})


def _chain_length(err: BaseException) -> int:
    # The tracebacks a user sees: the error plus each shown cause or context.
    n = 1
    while True:
        nxt = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
        if nxt is None:
            return n
        n, err = n + 1, nxt


@pytest.mark.filterwarnings(  # the legacy save's deprecation notice
    "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")
def test_typed_prng_key_error_is_one_traceback_naming_the_path_and_fix(tmp_path):
    from flaxen import config
    from flaxen.training import checkpoints

    with pytest.raises(TypeError) as info:
        ser.to_bytes({"rngs": {"dropout": jax.random.key(0)}})
    message = str(info.value)
    assert message.startswith("At /rngs/dropout: Cannot store a typed PRNG key (dtype key<")
    assert "jax.random.key_data(key)" in message and "wrap_key_data" in message
    assert _chain_length(info.value) == 1
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        with pytest.raises(TypeError, match="At /k: Cannot store a typed PRNG key") as info:
            checkpoints.save_checkpoint(tmp_path, {"k": jax.random.key(1)}, step=0)
    assert str(info.value).startswith(f'Cannot save checkpoint "{tmp_path / "checkpoint_0"}": ')
    assert _chain_length(info.value) == 1


def test_other_unsupported_values_keep_at_most_one_chained_traceback():
    with pytest.raises(TypeError) as info:
        ser.msgpack_serialize({"a": [1, object()]})
    assert _chain_length(info.value) <= 2


def test_non_native_byte_order_is_normalised():
    arr = np.arange(3, dtype=">f4")
    out = ser.msgpack_restore(ser.msgpack_serialize(arr))
    assert out.dtype == np.float32 and out.tolist() == [0.0, 1.0, 2.0]


# ----------------------------------------------------------------------------- bad input

GOOD = ser.to_bytes({"params": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, "s": "x"})


@pytest.mark.parametrize("cut", [1, 5, len(GOOD) // 2, len(GOOD) - 1])
def test_truncated_bytes_raise_value_error(cut):
    with pytest.raises(ValueError, match="truncated, corrupted"):
        ser.msgpack_restore(GOOD[:cut])


def _ext(code, payload):
    return msgpack.packb(msgpack.ExtType(code, payload))


@pytest.mark.parametrize(
    "data, pattern",
    [
        (b"", "truncated|Unpack"),
        (GOOD + b"\x00", "Extra"),
        (b"\xc1", "truncated, corrupted"),
        (_ext(1, msgpack.packb([[2], "float32", b"\x00" * 4])), "needs 8 bytes .* holds 4"),
        (_ext(1, msgpack.packb([[1], "object", b"\x00" * 8])), "dtype 'object'"),
        (_ext(1, msgpack.packb([[1], "O", b"\x00" * 8])), "dtype name 'O'"),
        (_ext(1, msgpack.packb([[1], "[('a','O')]", b"\x00" * 8])), "invalid array dtype"),
        (_ext(1, msgpack.packb([[1], "__import__('os')", b""])), "invalid array dtype"),
        (_ext(1, msgpack.packb([[1], "nonsense_type", b"\x00"])), "unknown array dtype"),
        (_ext(1, msgpack.packb([[-1], "uint8", b"\x00"])), "malformed array shape"),
        (_ext(1, b"\x93\x91"), "malformed array payload"),
        (_ext(9, b"abc"), "unknown msgpack extension type 9"),
        (_ext(2, b"\x92\xa1a\xa1b"), "complex"),
        (msgpack.packb({"__msgpack_chunked_array__": True, "shape": {"0": 5},
                        "chunks": {"0": msgpack.ExtType(
                            1, msgpack.packb([[2], "uint8", b"\x00\x01"]))}}),
         "shape \\(5,\\) needs 5 elements"),
        (msgpack.packb({"__msgpack_chunked_array__": True, "shape": 3, "chunks": {}}), "chunked"),
        (b"\x91" * 100000 + b"\xc0", "truncated, corrupted"),
        (b"\x81\x91\x01\x02", "truncated, corrupted"),
    ],
)
@pytest.mark.parametrize("in_place_parser", [False, True])
def test_hostile_bytes_raise_clear_value_errors(data, pattern, in_place_parser, monkeypatch):
    # Small payloads go through msgpack's parser, large ones through ours: test both.
    if in_place_parser:
        monkeypatch.setattr(_msgpack_ext, "_SMALL_PAYLOAD", -1)
    with pytest.raises(ValueError, match=pattern):
        ser.msgpack_restore(data)


def test_large_arrays_are_views_of_the_decoded_payload():
    arr = np.arange(100_000, dtype=np.float32).reshape(100, 1000)
    out = ser.msgpack_restore(ser.msgpack_serialize({"a": arr, "t": arr.T}))
    np.testing.assert_array_equal(out["a"], arr)
    np.testing.assert_array_equal(out["t"], arr.T)
    assert not out["a"].flags.owndata and not out["a"].flags.writeable
    big = _ext(1, msgpack.packb([[30_000], "float32", b"\x00" * 100_000]))
    with pytest.raises(ValueError, match="needs 120000 bytes"):
        ser.msgpack_restore(big)


def test_random_corruption_never_raises_anything_but_value_error():
    rng = np.random.default_rng(0)
    for _ in range(300):
        data = bytearray(GOOD)
        for pos in rng.integers(0, len(data), size=rng.integers(1, 4)):
            data[pos] = int(rng.integers(0, 256))
        try:
            ser.msgpack_restore(bytes(data))
        except ValueError:
            pass


@pytest.mark.parametrize("in_place_parser", [False, True])
def test_generic_payload_encodings_from_other_writers_are_accepted(in_place_parser, monkeypatch):
    if in_place_parser:
        monkeypatch.setattr(_msgpack_ext, "_SMALL_PAYLOAD", -1)
    # Same content as Flax writes, but with a wider int for the shape: valid msgpack.
    payload = b"\x93\x91\xcd\x00\x02" + msgpack.packb("int8") + msgpack.packb(b"\x01\x02")
    assert ser.msgpack_restore(_ext(1, payload)).tolist() == [1, 2]
    scalar = msgpack.packb([[], "float64", pystruct.pack("<d", 2.5)])
    assert ser.msgpack_restore(_ext(3, scalar)) == 2.5


# ----------------------------------------------------------------------------- properties

_DTYPES = [np.float32, np.int8, np.uint16, np.bool_, np.complex64, ml_dtypes.bfloat16,
           ml_dtypes.float8_e4m3fn, np.float64, np.int64]


@st.composite
def _arrays(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    raw = draw(st.binary(min_size=int(np.prod(shape)) * np.dtype(dtype).itemsize,
                         max_size=int(np.prod(shape)) * np.dtype(dtype).itemsize))
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


_leaves = st.one_of(
    _arrays(), st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False), st.text(max_size=40), st.binary(max_size=40),
    st.complex_numbers(allow_nan=False),
)
_trees = st.recursive(
    _leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=4),
                           st.dictionaries(st.text(max_size=5), kids, max_size=4)),
    max_leaves=12,
)


def _assert_same(a, b, ordered=True):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    elif isinstance(a, dict):
        assert list(a) == list(b) if ordered else sorted(a) == list(b)
        for k in a:
            _assert_same(a[k], b[k], ordered)
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y, ordered)
    else:
        assert type(a) is type(b) and a == b


@settings(max_examples=150, deadline=None)
@given(_trees, st.booleans())
def test_property_round_trip(tree, in_place):
    out = ser.msgpack_restore(ser.msgpack_serialize(tree, in_place=in_place))
    _assert_same(tree, out, ordered=in_place)
    # Bytes from to_bytes restore into the original tree's shape (lists stay lists).
    _assert_same(tree, ser.from_bytes(tree, ser.to_bytes(tree)))


def test_encode_parts_concatenate_to_the_bytes():
    tree = {"a": np.arange(40_000, dtype=np.float32), "b": [1, "x"],
            "c": jnp.ones((3, 3), jnp.bfloat16)}
    parts = _msgpack_ext.encode_parts(tree, ser.MAX_CHUNK_SIZE, sort_keys=False)
    joined = b"".join(p if type(p) is bytes else np.ascontiguousarray(p).tobytes() for p in parts)
    assert joined == ser.msgpack_serialize(tree, in_place=True)
    assert any(type(p) is np.ndarray for p in parts)  # large arrays are not copied into parts


def test_legacy_namedtuple_state_restores():
    Point = collections.namedtuple("Point", "x y")
    legacy = {"name": "Point", "fields": {"0": "x", "1": "y"}, "values": {"0": 3, "1": 4}}
    restored = ser.from_state_dict(Point(0, 0), legacy)
    assert type(restored) is Point and restored == Point(3, 4)
    # A named tuple whose own fields are name/fields/values is restored field by field.
    Meta = collections.namedtuple("Meta", "name fields values")
    restored = ser.from_state_dict(Meta(0, 0, 0), {"name": 1, "fields": 2, "values": 3})
    assert restored == Meta(1, 2, 3)


def test_mismatch_messages_are_flax_literal_with_the_fix_as_a_note():
    with pytest.raises(ValueError) as info:
        ser.from_state_dict({"a": [[1, 2]]}, {"a": {"0": {"0": 1}}})
    assert str(info.value) == (
        "The size of the list and the state dict do not match, got 2 and 1 at path ./a/0")
    assert "as many entries" in info.value.__notes__[0]


def test_flax_private_msgpack_helpers():
    arr = np.arange(12.0).reshape(3, 4)
    packed = msgpack.packb({"a": arr, "s": np.float32(2), "c": 1 + 2j},
                           default=ser._msgpack_ext_pack, strict_types=True)
    out = ser.msgpack_restore(packed)
    np.testing.assert_array_equal(out["a"], arr)
    assert out["s"] == np.float32(2) and out["c"] == 1 + 2j
    assert ser._msgpack_ext_pack("text") == "text"

    old = ser.MAX_CHUNK_SIZE
    ser.MAX_CHUNK_SIZE = 5 * 8
    try:
        tree = {"big": arr, "small": np.zeros(2), "n": {"x": arr}}
        chunked = ser._chunk_array_leaves_in_place(tree)
    finally:
        ser.MAX_CHUNK_SIZE = old
    assert chunked is tree and tree["small"].shape == (2,)
    big = tree["big"]
    assert big["shape"] == {"0": 3, "1": 4} and [c.size for c in big["chunks"].values()] == [
        5, 5, 2]
    restored = ser.msgpack_restore(ser.msgpack_serialize(tree))
    np.testing.assert_array_equal(restored["big"], arr)
    np.testing.assert_array_equal(restored["n"]["x"], arr)
