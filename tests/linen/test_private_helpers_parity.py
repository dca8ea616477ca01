"""Flax's private helpers that public code imports, as flaxen provides them: the msgpack hooks
and chunking of ``flaxen.serialization``, ``linen.linear._conv_dimension_numbers``, the
summary helpers, the call records of ``linen.module._tabulate_context``, the profiling name
and unbinding helpers, the typing aliases Flax's modules re-export, and
``experimental.nnx.pure``. (Equality with flax itself is in
tests/reference/test_linen_private_helpers_ref.py.)"""

from __future__ import annotations

import importlib
import warnings

import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest
from jax import lax

import flaxen.linen as nn
import flaxen.typing as ftyping
from flaxen import errors, serialization
from flaxen.core._rng import LazyRng
from flaxen.linen import linear, summary
from flaxen.linen import module as module_lib

# --- serialization ------------------------------------------------------------------------


def _unpack(data: bytes):
    return msgpack.unpackb(data, ext_hook=serialization._msgpack_ext_unpack, raw=False)


@pytest.mark.parametrize("arr", [
    np.arange(6, dtype=np.float32).reshape(2, 3),
    np.linspace(0, 1, 4).astype(jnp.bfloat16),
    np.array([1 + 2j, -3j], np.complex64),
    np.array([2**62, -1], np.int64),
    np.array(7, np.int32),
    jnp.arange(3.0),
], ids=lambda a: str(a.dtype) + str(a.shape))
def test_hooks_round_trip_arrays(arr):
    data = msgpack.packb({"a": arr}, default=serialization._msgpack_ext_pack, strict_types=True)
    out = _unpack(data)["a"]
    assert type(out) is np.ndarray and out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, np.asarray(arr))
    assert not out.flags.writeable  # a view of the payload, as Flax's


def test_hooks_write_msgpack_serialize_bytes():
    tree = {"w": np.ones((2, 2), np.float16), "s": np.float32(2.5), "c": 1 - 1j,
            "nested": {"b": jnp.zeros(3, jnp.bfloat16), "l": [1, "x", None]}}
    data = msgpack.packb(tree, default=serialization._msgpack_ext_pack, strict_types=True)
    assert data == serialization.msgpack_serialize(tree, in_place=True)


def test_unpack_scalars_complex_and_unknown_extensions():
    data = msgpack.packb([np.float32(1.5), 2 + 3j, msgpack.ExtType(9, b"?")],
                         default=serialization._msgpack_ext_pack, strict_types=True)
    scalar, number, other = _unpack(data)
    assert type(scalar) is np.float32 and scalar == 1.5
    assert number == 2 + 3j
    assert other == msgpack.ExtType(9, b"?")


def test_ext_type_codes():
    codes = serialization._MsgpackExtType
    assert (codes.ndarray, codes.native_complex, codes.npscalar) == (1, 2, 3)
    packed = serialization._msgpack_ext_pack(np.zeros(1))
    assert packed.code is codes.ndarray


def test_ndarray_bytes_helpers():
    arr = np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3))
    back = serialization._ndarray_from_bytes(serialization._ndarray_to_bytes(arr))
    assert back.flags.c_contiguous
    np.testing.assert_array_equal(back, arr)
    with pytest.raises(ValueError, match="object"):
        serialization._ndarray_to_bytes(np.array([None]))
    with pytest.raises(ValueError):
        serialization._ndarray_from_bytes(b"\x93\x91\x02\xa6object\xc4\x10" + bytes(16))


def test_dtype_from_name():
    assert serialization._dtype_from_name(b"bfloat16") is jnp.bfloat16
    assert serialization._dtype_from_name("bfloat16") == jnp.bfloat16
    assert serialization._dtype_from_name(b"int8") == np.dtype(np.int8)
    with pytest.raises(TypeError):
        serialization._dtype_from_name("no_such_dtype")


def test_np_convert_in_place():
    tree = {"a": jnp.ones(2), "b": {"c": jnp.zeros(1)}, "d": [jnp.ones(1)], "e": 1}
    assert serialization._np_convert_in_place(tree) is tree
    assert type(tree["a"]) is np.ndarray and type(tree["b"]["c"]) is np.ndarray
    assert tree["a"].flags.writeable
    assert isinstance(tree["d"][0], jax.Array)  # lists are not entered
    assert type(serialization._np_convert_in_place(jnp.ones(1))) is np.ndarray


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(serialization, "MAX_CHUNK_SIZE", 16)


def test_chunk_and_unchunk_in_place(small_chunks):
    big = np.arange(10, dtype=np.float32).reshape(2, 5)
    tree = {"big": big, "small": np.ones(2, np.float32), "jax": jnp.arange(10.0),
            "sub": {"big": big}}
    assert serialization._chunk_array_leaves_in_place(tree) is tree
    chunked = tree["big"]
    assert chunked["__msgpack_chunked_array__"] is True
    assert chunked["shape"] == {"0": 2, "1": 5}
    assert [c.tolist() for c in chunked["chunks"].values()] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert isinstance(tree["jax"], jax.Array) and tree["small"].shape == (2,)
    assert isinstance(tree["sub"]["big"], dict)

    data = msgpack.packb(tree, default=serialization._msgpack_ext_pack, strict_types=True)
    restored = serialization._unchunk_array_leaves_in_place(_unpack(data))
    np.testing.assert_array_equal(restored["big"], big)
    np.testing.assert_array_equal(restored["sub"]["big"], big)
    # msgpack_restore reads the same bytes into the same tree
    np.testing.assert_array_equal(serialization.msgpack_restore(data)["big"], big)


def test_unchunk_leaves_its_input_alone(small_chunks):
    chunked = serialization._chunk(np.arange(9, dtype=np.int64))
    out = serialization._unchunk_array_leaves_in_place(chunked)
    assert out.tolist() == list(range(9))
    assert all(isinstance(c, np.ndarray) for c in chunked["chunks"].values())
    with pytest.raises(ValueError):
        serialization._unchunk({"shape": {}, "chunks": {}})


# --- linen.linear ---------------------------------------------------------------------------


def test_conv_dimension_numbers_drive_lax_like_conv():
    x = jax.random.normal(jax.random.key(0), (1, 6, 6, 2))
    conv = nn.Conv(3, (3, 3), padding="VALID", use_bias=False)
    variables = conv.init(jax.random.key(1), x)
    dn = linear._conv_dimension_numbers(x.shape)
    assert dn == lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    y = lax.conv_general_dilated(x, variables["params"]["kernel"], (1, 1), "VALID",
                                 dimension_numbers=dn)
    np.testing.assert_allclose(y, conv.apply(variables, x), rtol=1e-5, atol=1e-5)


# --- summary and call records -------------------------------------------------------------


class _Block(nn.Module):
    def setup(self):
        self.proj = nn.Dense(4)
        self.drop = nn.Dropout(0.5)

    def __call__(self, x, train: bool = False):
        return self.drop(self.proj(x), deterministic=not train)


class _Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = _Block()(x, train=True)
        return nn.Dense(2)(x)


RNGS = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
X = jnp.ones((2, 3))


def _calls(module=None):
    module = module or _Net()
    with module_lib._tabulate_context():
        jax.eval_shape(lambda: module.init(RNGS, X))
        calls = module_lib._context.call_info_stack[-1].calls
    return sorted(calls, key=lambda c: c.index)


def test_tabulate_context_records_calls():
    calls = _calls()
    assert [(c.index, c.path, type(c.module).__name__, c.method) for c in calls] == [
        (0, (), "_Net", "__call__"), (1, ("_Block_0",), "_Block", "__call__"),
        (2, ("_Block_0", "proj"), "Dense", "__call__"),
        (3, ("_Block_0", "drop"), "Dropout", "__call__"),
        (4, ("Dense_0",), "Dense", "__call__")]
    block = calls[1]
    assert isinstance(block, module_lib._CallInfo)
    assert block.module.parent is None and block.module.scope is None
    assert block.args == (jax.ShapeDtypeStruct((2, 3), jnp.float32),)
    assert block.kwargs == {"train": True}
    assert block.outputs == jax.ShapeDtypeStruct((2, 4), jnp.float32)
    assert sorted(block.rngs) == ["dropout", "params"]
    # records carry no tracer out of eval_shape: the keys are abstract
    assert all(isinstance(r, LazyRng) and isinstance(r.rng, jax.ShapeDtypeStruct)
               for r in block.rngs.values())
    assert block.mutable is not None


def test_tabulate_context_only_records_inside_and_innermost():
    assert module_lib._context.call_info_stack == []
    _Net().init(RNGS, X)  # no context: nothing recorded, nothing kept
    with module_lib._tabulate_context():
        outer = module_lib._context.call_info_stack[-1]
        with module_lib._tabulate_context():
            nn.Dense(2).init(RNGS, X)
            inner = module_lib._context.call_info_stack[-1]
        nn.Dense(3).init(RNGS, X)
    assert [c.module.features for c in inner.calls] == [2]
    assert [c.module.features for c in outer.calls] == [3]
    assert module_lib._context.call_info_stack == []


def test_get_call_flops_matches_tabulate_columns():
    calls = _calls()
    table = summary._get_module_table(_Net(), depth=None, show_repeated=False,
                                      compute_flops=True, compute_vjp_flops=True)(RNGS, X)
    assert [summary._get_call_flops(c, True, True) for c in calls] == [
        (r.flops, r.vjp_flops) for r in table]
    dense = calls[-1]
    flops, none = summary._get_call_flops(dense, True, False)
    assert flops == 2 * (2 * 4 * 2) + 2 * 2 and none == -1  # matmul multiply-adds + bias
    assert summary._get_call_flops(dense, False, False) == (-1, -1)


def test_path_and_module_variables():
    variables = nn.FrozenDict({"params": {"a": {"w": 1, "sub": {"k": 2}}, "b": 3},
                               "stats": {"a": {"m": 4}}})
    own = summary._get_path_variables(("a",), variables)
    assert own == {"params": {"w": 1, "sub": {"k": 2}}, "stats": {"m": 4}}
    assert all(type(v) is dict for v in own.values())
    assert summary._get_path_variables(("missing",), variables) == {}
    mine, subs = summary._get_module_variables(("a",), variables, {("a",), ("a", "sub")})
    assert mine == {"params": {"w": 1}, "stats": {"m": 4}}
    assert subs == {"params": {"sub": {"k": 2}}, "stats": {}}
    assert variables["params"]["a"]["sub"] == {"k": 2}  # the input is not touched


def test_process_inputs_and_bytes_repr():
    assert summary._process_inputs((), {}) == ()
    assert summary._process_inputs(("x",), {}) == "x"
    assert summary._process_inputs(("x", "y"), {}) == ("x", "y")
    assert summary._process_inputs((), {"k": 1}) == {"k": 1}
    assert summary._process_inputs(("x",), {"k": 1}) == ("x", {"k": 1})
    assert [summary._bytes_repr(n) for n in (12, 1000, 1500, 2_500_000, 3 * 10**9)] == [
        "12 B", "1,000 B", "1.5 KB", "2.5 MB", "3.0 GB"]


# --- module helpers -------------------------------------------------------------------------


def test_derive_profiling_name():
    assert module_lib._derive_profiling_name(nn.Dense(2), nn.Dense.__call__) == "Dense"
    assert module_lib._derive_profiling_name(nn.Dense(2, name="p"), _Block.setup) == "p.setup"
    assert module_lib._derive_profiling_name(nn.Dense(2), object()) == "Dense.unnamed_function"


def test_get_unbound_fn():
    dense = nn.Dense(2)
    assert module_lib._get_unbound_fn(dense.__call__) is nn.Dense.__call__

    class Plain:
        def method(self, x):
            return x

        def no_args(self):
            return self

    bound = Plain().method
    assert module_lib._get_unbound_fn(bound) is bound  # only Module methods are unbound
    with pytest.raises(errors.ApplyModuleInvalidMethodError):
        module_lib._get_unbound_fn(Plain().no_args)  # bound: nothing left for the Module
    only_kwargs = lambda **kw: kw  # noqa: E731
    assert module_lib._get_unbound_fn(only_kwargs) is only_kwargs
    for bad in (lambda: 0, "name", None):
        with pytest.raises(errors.ApplyModuleInvalidMethodError):
            module_lib._get_unbound_fn(bad)


# --- typing aliases, experimental.nnx.pure ----------------------------------------------------


@pytest.mark.parametrize("path, names", [
    ("linen.dtypes", ["Dtype"]),
    ("linen.activation", ["Array", "Dtype"]),
    ("linen.recurrent", ["Array", "Dtype", "InOutScanAxis", "Initializer", "PRNGKey",
                         "PrecisionLike"]),
    ("linen.partitioning", ["Array", "ArrayPytree", "InOutAxis", "InOutScanAxis",
                            "PartitionSpecPytree"]),
    ("linen.spmd", ["Array", "ArrayPytree"]),
    ("linen.stochastic", ["PRNGKey"]),
    ("linen.summary", ["Array", "LogicalNames", "MutableVariableDict", "PRNGKey",
                       "RNGSequences"]),
    ("linen.module", ["RNGSequences", "VariableDict", "PRNGKey"]),
    ("core.scope", ["Collection", "MutableCollection", "PRNGFoldable"]),
    ("core.lift", ["InOutAxis", "InOutScanAxis"]),
])
def test_typing_aliases_are_flaxen_typings(path, names):
    module = importlib.import_module(f"flaxen.{path}")
    for name in names:
        assert getattr(module, name) is getattr(ftyping, name), f"{path}.{name}"


def test_experimental_nnx_pure_is_the_deprecated_alias():
    from flaxen import nnx
    from flaxen.experimental import nnx as experimental

    assert experimental.pure is nnx.pure and "pure" in dir(experimental)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = experimental.pure({"w": nnx.Param(jnp.ones(2))})
    assert [w.category for w in caught] == [DeprecationWarning]
    assert isinstance(out["w"], jax.Array)
