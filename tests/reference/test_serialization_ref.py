"""Differential tests: flaxen.serialization bytes equal flax.serialization's, both ways."""

import collections

import flax.serialization as fser
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import struct as fstruct
from flax.core import frozen_dict as ffd
from hypothesis import given, settings
from hypothesis import strategies as st

from flaxen import serialization as xser
from flaxen import struct as xstruct
from flaxen.core import frozen_dict as xfd

NT = collections.namedtuple("NT", "x y")

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64,
          np.float16, np.float32, np.float64, np.complex64, np.complex128, ml_dtypes.bfloat16,
          ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3b11fnuz,
          ml_dtypes.int4, ml_dtypes.uint4]

TREES = [
    {"a": np.arange(3, dtype=np.float32), "b": [1, 2.5, None, "s", b"by", True, False],
     "c": NT(1, np.int8(3))},
    {"z": jnp.ones((2, 3), jnp.bfloat16), "y": np.zeros((0, 2)), "x": 3 + 4j,
     "w": np.complex64(1 + 1j), "v": (1, (2, [3]))},
    [np.arange(300, dtype=np.int64).reshape(10, 30).T, -1, -33, -200, -40000, -(2**40), 2**63,
     200, 70000, 2**40, 1e300, -0.0],
    {"k" * 40: "v" * 300, "s" * 70000: 1, "l": list(range(20)), "m": {str(i): i for i in range(20)},
     "u": "ünïcødé"},
    {"d": np.datetime64("2020-01-01"), "e": np.array(5), "f": np.bool_(True), "g": jnp.float32(2)},
    {"b": 1, "a": {"d": 2, "c": np.float16(3)}},
    {"big_bin": b"x" * 70000, "long_list": list(range(70000))},
] + [{"t": (np.arange(7) % 2).astype(dt).reshape(7, 1)} for dt in DTYPES]


def _leaf_bytes(x):
    a = np.asarray(x)
    return a.dtype, a.shape, a.tobytes(), type(x)


def _assert_same_restore(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(la, lb, strict=True):
        assert _leaf_bytes(x) == _leaf_bytes(y)


@pytest.mark.parametrize("tree", TREES, ids=range(len(TREES)))
def test_same_bytes_both_directions(tree):
    fb, xb = fser.to_bytes(tree), xser.to_bytes(tree)
    assert fb == xb
    state = fser.to_state_dict(tree)
    assert fser.msgpack_serialize(state) == xser.msgpack_serialize(xser.to_state_dict(tree))
    _assert_same_restore(fser.from_bytes(tree, xb), xser.from_bytes(tree, fb))
    _assert_same_restore(fser.msgpack_restore(fb), xser.msgpack_restore(fb))


@pytest.mark.parametrize("chunk", [8, 16, 17, 1000])
def test_chunked_bytes_match(monkeypatch, chunk):
    monkeypatch.setattr(fser, "MAX_CHUNK_SIZE", chunk)
    monkeypatch.setattr(xser, "MAX_CHUNK_SIZE", chunk)
    tree = {"a": np.arange(10, dtype=np.float32), "b": [np.arange(3, dtype=np.int8)],
            "d": np.arange(5, dtype=np.float32).reshape(5, 1), "e": jnp.arange(6.0),
            "f": np.arange(20.0).reshape(4, 5).T, "g": jnp.arange(9, dtype=jnp.bfloat16)}
    fb = fser.to_bytes(tree)
    assert fb == xser.to_bytes(tree)
    assert fser.msgpack_serialize(np.arange(10.0)) == xser.msgpack_serialize(np.arange(10.0))
    _assert_same_restore(fser.msgpack_restore(fb), xser.msgpack_restore(fb))


def test_frozen_dict_and_struct_bytes_match():
    f_tree = ffd.FrozenDict({"b": {"k": np.ones(2)}, "a": 1})
    x_tree = xfd.FrozenDict({"b": {"k": np.ones(2)}, "a": 1})
    assert fser.to_bytes(f_tree) == xser.to_bytes(x_tree)
    restored = xser.from_bytes(x_tree, fser.to_bytes(f_tree))
    assert isinstance(restored, xfd.FrozenDict) and restored["a"] == 1

    @fstruct.dataclass
    class FS:
        w: np.ndarray
        name: str = fstruct.field(pytree_node=False, default="n")

    @xstruct.dataclass
    class XS:
        w: np.ndarray
        name: str = xstruct.field(pytree_node=False, default="n")

    assert fser.to_bytes(FS(np.arange(3))) == xser.to_bytes(XS(np.arange(3)))
    assert xser.from_bytes(XS(0), fser.to_bytes(FS(np.arange(3)))).w.tolist() == [0, 1, 2]


def test_same_error_classes_on_mismatch():
    for target, state in [({"a": 1, "b": 2}, {"a": 3}), ({"a": [1, 2]}, {"a": {"0": 5}}),
                          ({"a": NT(1, 2)}, {"a": {"x": 5}})]:
        with pytest.raises(ValueError):
            fser.from_state_dict(target, state)
        with pytest.raises(ValueError):
            xser.from_state_dict(target, state)


_arrays = st.builds(
    lambda dt, shape, seed: (np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape))
                             * np.dtype(dt).itemsize, dtype=np.uint8).view(dt).reshape(shape)),
    st.sampled_from([np.float32, np.int16, np.uint8, np.bool_, np.complex64, ml_dtypes.bfloat16,
                     ml_dtypes.float8_e5m2]),
    st.lists(st.integers(0, 3), max_size=3).map(tuple),
    st.integers(0, 2**32 - 1),
)
_leaves = st.one_of(_arrays, st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                    st.floats(allow_nan=False), st.text(max_size=20))
_trees = st.recursive(
    _leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=3),
                           st.dictionaries(st.text(max_size=4), kids, max_size=3)),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None)
@given(_trees)
def test_property_same_bytes(tree):
    fb = fser.to_bytes(tree)
    assert fb == xser.to_bytes(tree)
    state = fser.to_state_dict(tree)
    assert fser.msgpack_serialize(state) == xser.msgpack_serialize(xser.to_state_dict(tree))
    _assert_same_restore(fser.msgpack_restore(fb), xser.msgpack_restore(fb))
