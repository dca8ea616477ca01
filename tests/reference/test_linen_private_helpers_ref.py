"""Differential tests: Flax's private helpers that public code imports (serialization's msgpack
hooks and chunking, linen.linear/summary/module helpers, the call records of
``_tabulate_context``) and the typing aliases Flax's modules re-export behave in flaxen as in
flax 0.12.8: same signatures, same outputs (bytes, arrays, FLOPs, names) for the same inputs.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import inspect
import warnings

import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest

flax = pytest.importorskip("flax")

import flax.linen as fnn  # noqa: E402
import flax.typing as ftyping  # noqa: E402
from flax import errors as ferrors  # noqa: E402
from flax import serialization as fser  # noqa: E402
from flax.linen import linear as flinear  # noqa: E402
from flax.linen import module as fmodule  # noqa: E402
from flax.linen import summary as fsummary  # noqa: E402

import flaxen.linen as xnn  # noqa: E402
from flaxen import errors as xerrors  # noqa: E402
from flaxen import serialization as xser  # noqa: E402
from flaxen.linen import linear as xlinear  # noqa: E402
from flaxen.linen import module as xmodule  # noqa: E402
from flaxen.linen import summary as xsummary  # noqa: E402

SERIALIZATION = ["_msgpack_ext_unpack", "_msgpack_ext_pack", "_ndarray_to_bytes",
                 "_ndarray_from_bytes", "_dtype_from_name", "_np_convert_in_place",
                 "_chunk_array_leaves_in_place", "_unchunk_array_leaves_in_place", "_chunk",
                 "_unchunk"]
SUMMARY = ["_process_inputs", "_get_call_flops", "_get_module_variables", "_bytes_repr",
           "_get_path_variables"]
MODULE = ["_derive_profiling_name", "_get_unbound_fn", "_tabulate_context"]


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("flax_mod, flaxen_mod, name", [
    *[(fser, xser, n) for n in SERIALIZATION],
    *[(fsummary, xsummary, n) for n in SUMMARY],
    *[(fmodule, xmodule, n) for n in MODULE],
    (flinear, xlinear, "_conv_dimension_numbers"),
])
def test_signatures_match(flax_mod, flaxen_mod, name):
    assert _params(getattr(flaxen_mod, name)) == _params(getattr(flax_mod, name))


def test_record_types_match():
    for f_cls, x_cls in [(fmodule._CallInfo, xmodule._CallInfo),
                         (fmodule._CallInfoContext, xmodule._CallInfoContext)]:
        assert [f.name for f in dataclasses.fields(x_cls)] == [
            f.name for f in dataclasses.fields(f_cls)]
    assert {m.name: int(m) for m in xser._MsgpackExtType} == {
        m.name: int(m) for m in fser._MsgpackExtType}


# --- serialization ------------------------------------------------------------------------

ARRAYS = [
    np.arange(6, dtype=np.float32).reshape(2, 3),
    np.linspace(-2, 2, 5).astype(jnp.bfloat16),
    (np.arange(4) + 1j * np.arange(4)).astype(np.complex64),
    np.array([-(2**62), 7, 2**40], np.int64),
    np.array(3.5, np.float64),  # 0-d
    np.zeros((0, 3), np.uint8),
    np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
    np.array([True, False]),
]
SCALARS = [np.float32(1.25), np.int64(-3), jnp.bfloat16(0.5), np.complex64(1 - 2j), 2 + 3j]


def _tree():
    return {"arrays": {str(i): a for i, a in enumerate(ARRAYS)},
            "scalars": list(SCALARS), "jax": jnp.arange(3.0), "text": "s", "n": None,
            "nested": {"b": b"raw", "f": 1.5, "i": 4}}


def _assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        if isinstance(a, np.ndarray):
            assert a.flags.writeable == b.flags.writeable
    else:
        assert a == b


def test_ext_pack_bytes_equal():
    tree = _tree()
    kw = dict(strict_types=True)
    data = msgpack.packb(tree, default=xser._msgpack_ext_pack, **kw)
    assert data == msgpack.packb(tree, default=fser._msgpack_ext_pack, **kw)
    # flaxen's msgpack_serialize writes the same bytes as the hooks (insertion order)
    assert data == xser.msgpack_serialize(tree, in_place=True)


@pytest.mark.parametrize("pack", [fser._msgpack_ext_pack, xser._msgpack_ext_pack])
def test_ext_unpack_gives_the_same_tree(pack):
    data = msgpack.packb(_tree(), default=pack, strict_types=True)
    ours = msgpack.unpackb(data, ext_hook=xser._msgpack_ext_unpack, raw=False)
    theirs = msgpack.unpackb(data, ext_hook=fser._msgpack_ext_unpack, raw=False)
    _assert_same(ours, theirs)


def test_unknown_extension_comes_back_as_ext_type():
    data = msgpack.packb([msgpack.ExtType(42, b"xyz")])
    ours = msgpack.unpackb(data, ext_hook=xser._msgpack_ext_unpack, raw=False)
    assert ours == msgpack.unpackb(data, ext_hook=fser._msgpack_ext_unpack, raw=False)
    assert ours == [msgpack.ExtType(42, b"xyz")]


@pytest.mark.parametrize("arr", ARRAYS + [jnp.ones((2, 2), jnp.bfloat16)], ids=repr)
def test_ndarray_bytes_round_trip(arr):
    data = xser._ndarray_to_bytes(arr)
    assert data == fser._ndarray_to_bytes(arr)
    _assert_same(xser._ndarray_from_bytes(data), fser._ndarray_from_bytes(data))


def test_ndarray_to_bytes_refuses_object_arrays_like_flax():
    arr = np.array([object()])
    with pytest.raises(ValueError):
        fser._ndarray_to_bytes(arr)
    with pytest.raises(ValueError):
        xser._ndarray_to_bytes(arr)


@pytest.mark.parametrize("name", [b"bfloat16", "bfloat16", b"float32", "float32", "int4",
                                  b"float8_e4m3fn", "complex64", "bool", "object"])
def test_dtype_from_name(name):
    ours, theirs = xser._dtype_from_name(name), fser._dtype_from_name(name)
    assert ours == theirs and type(ours) is type(theirs)


def test_np_convert_in_place():
    def tree():
        return {"a": jnp.ones(2), "b": {"c": jnp.zeros((1, 2), jnp.bfloat16), "d": [jnp.ones(1)]},
                "e": 3}

    t1, t2 = tree(), tree()
    assert xser._np_convert_in_place(t1) is t1
    fser._np_convert_in_place(t2)
    assert type(t1["b"]["d"][0]) is type(t2["b"]["d"][0])  # lists are not entered
    t1["b"]["d"], t2["b"]["d"] = [], []
    _assert_same(t1, t2)
    _assert_same(xser._np_convert_in_place(jnp.arange(3)),
                 fser._np_convert_in_place(jnp.arange(3)))


@pytest.fixture
def small_chunks(monkeypatch):
    # Chunking starts above MAX_CHUNK_SIZE bytes (1 GiB): lower it on both sides.
    monkeypatch.setattr(fser, "MAX_CHUNK_SIZE", 24)
    monkeypatch.setattr(xser, "MAX_CHUNK_SIZE", 24)


def _big_tree():
    return {"big": np.arange(20, dtype=np.float32).reshape(4, 5),
            "bf16": np.arange(30).astype(jnp.bfloat16),
            "small": np.ones(2, np.float32), "jax": jnp.arange(40.0),
            "sub": {"c64": np.ones((3, 3), np.complex64), "n": 1}}


def test_chunking_round_trip_bytes_equal(small_chunks):
    ours, theirs = _big_tree(), _big_tree()
    assert xser._chunk_array_leaves_in_place(ours) is ours
    fser._chunk_array_leaves_in_place(theirs)
    data = msgpack.packb(ours, default=xser._msgpack_ext_pack, strict_types=True)
    assert data == msgpack.packb(theirs, default=fser._msgpack_ext_pack, strict_types=True)
    assert isinstance(ours["jax"], jax.Array)  # only numpy leaves are chunked, as in Flax
    # flaxen's msgpack_serialize chunks the same way
    assert xser.msgpack_serialize(_big_tree(), in_place=True) == fser.msgpack_serialize(
        _big_tree(), in_place=True)

    x_tree = msgpack.unpackb(data, ext_hook=xser._msgpack_ext_unpack, raw=False)
    f_tree = msgpack.unpackb(data, ext_hook=fser._msgpack_ext_unpack, raw=False)
    _assert_same(x_tree, f_tree)
    restored = xser._unchunk_array_leaves_in_place(x_tree)
    expected = fser._unchunk_array_leaves_in_place(f_tree)
    assert restored is x_tree
    for key in ("big", "bf16"):
        assert restored[key].dtype == expected[key].dtype
        np.testing.assert_array_equal(restored[key], expected[key])
    np.testing.assert_array_equal(restored["sub"]["c64"], expected["sub"]["c64"])


def test_lone_arrays_chunk_and_unchunk_alike(small_chunks):
    arr = np.arange(17, dtype=np.int64)
    ours, theirs = xser._chunk_array_leaves_in_place(arr), fser._chunk_array_leaves_in_place(arr)
    assert list(ours) == list(theirs) and ours["shape"] == theirs["shape"]
    assert [c.tolist() for c in ours["chunks"].values()] == [
        c.tolist() for c in theirs["chunks"].values()]
    _assert_same(xser._unchunk_array_leaves_in_place(copy.deepcopy(theirs)),
                 fser._unchunk_array_leaves_in_place(copy.deepcopy(theirs)))
    small = np.ones(2)
    assert xser._chunk_array_leaves_in_place(small) is small


# --- linen.linear ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 9, 3), (2, 8, 8, 3), (1, 4, 4, 4, 2), (5,), ()])
def test_conv_dimension_numbers(shape):
    assert xlinear._conv_dimension_numbers(shape) == flinear._conv_dimension_numbers(shape)


# --- linen.summary --------------------------------------------------------------------------


@pytest.mark.parametrize("args, kwargs", [((), {}), ((1,), {}), ((1, 2), {}), ((), {"k": 1}),
                                          ((1, 2), {"k": 3})])
def test_process_inputs(args, kwargs):
    assert xsummary._process_inputs(args, kwargs) == fsummary._process_inputs(args, kwargs)


@pytest.mark.parametrize("n", [0, 1, 999, 1000, 1001, 123456, 10**6, 10**6 + 1, 98765432,
                               10**9 + 1, 5 * 10**12, 512.5])
def test_bytes_repr(n):
    assert xsummary._bytes_repr(n) == fsummary._bytes_repr(n)


VARIABLES = {
    "params": {"Dense_0": {"kernel": np.ones((2, 3)), "bias": np.zeros(3)},
               "Block": {"w": np.ones(1), "Inner": {"k": np.ones(2)}}, "scale": np.ones(())},
    "batch_stats": {"Block": {"mean": np.zeros(4)}},
}


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("path", [(), ("Dense_0",), ("Block",), ("Block", "Inner"), ("None",)])
def test_path_and_module_variables(path, frozen):
    variables = xnn.FrozenDict(VARIABLES) if frozen else VARIABLES
    f_variables = fnn.FrozenDict(VARIABLES) if frozen else VARIABLES
    ours = xsummary._get_path_variables(path, variables)
    theirs = fsummary._get_path_variables(path, f_variables)
    assert jax.tree.map(np.shape, ours) == jax.tree.map(np.shape, theirs)
    assert all(type(v) is dict for v in ours.values())
    all_paths = {(), ("Dense_0",), ("Block",), ("Block", "Inner")}
    x_own, x_sub = xsummary._get_module_variables(path, variables, all_paths)
    f_own, f_sub = fsummary._get_module_variables(path, f_variables, all_paths)
    assert jax.tree.map(np.shape, (x_own, x_sub)) == jax.tree.map(np.shape, (f_own, f_sub))
    assert "Dense_0" in VARIABLES["params"]  # the input is left as it was


def _model(nn):
    class Inner(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(x)

        def double(self, x):
            return 2 * self(x)

    class Outer(nn.Module):
        def setup(self):
            self.inner = Inner()
            self.drop = nn.Dropout(0.5)

        def __call__(self, x, train: bool = False):
            y = self.inner.double(x)
            y = self.drop(y, deterministic=not train)
            return self.inner(y) + self.inner(x)  # a repeated call

    return Outer()


def _records(nn, module_lib, **kwargs):
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    with module_lib._tabulate_context():
        jax.eval_shape(lambda: _model(nn).init(rngs, jnp.ones((2, 3)), **kwargs))
        calls = module_lib._context.call_info_stack[-1].calls
    return sorted(calls, key=lambda c: c.index)


def test_call_records_match():
    ours, theirs = _records(xnn, xmodule, train=True), _records(fnn, fmodule, train=True)

    def summary(c):
        return (c.index, c.path, c.method, type(c.module).__name__, c.module.parent,
                str(c.mutable), sorted(c.rngs))

    assert [summary(c) for c in ours] == [summary(c) for c in theirs]
    for o, t in zip(ours, theirs):
        # flaxen keeps arrays as jax.ShapeDtypeStruct where Flax wraps them for its table
        f_shapes = jax.tree.map(lambda r: getattr(r, "shape", getattr(r, "obj", None)),
                                (t.args, t.kwargs, t.outputs))
        x_shapes = jax.tree.map(lambda r: getattr(r, "shape", r), (o.args, o.kwargs, o.outputs))
        assert x_shapes == f_shapes


@pytest.mark.parametrize("flags", [(True, True), (True, False), (False, True), (False, False)])
def test_get_call_flops(flags):
    ours, theirs = _records(xnn, xmodule), _records(fnn, fmodule)
    assert [xsummary._get_call_flops(c, *flags) for c in ours] == [
        fsummary._get_call_flops(c, *flags) for c in theirs]


# --- linen.module ---------------------------------------------------------------------------


def test_derive_profiling_name():
    def cases(nn):
        class Foo(nn.Module):
            def __call__(self, x):
                return x

            def encode(self, x):
                return x

        fns = [Foo.__call__, Foo.encode, functools.partial(Foo.encode, x=1),
               functools.partial(functools.partial(Foo.encode), x=1), object()]
        return [nn.module._derive_profiling_name(m, fn)
                for m in (Foo(), Foo(name="foo"), nn.Dense(2)) for fn in fns]

    assert cases(xnn) == cases(fnn)


def test_get_unbound_fn():
    def cases(nn, errors):
        class Foo(nn.Module):
            def __call__(self, x):
                return x

        class Plain:
            def method(self, x):
                return x

        out = []
        for fn in (Foo().__call__, Foo.__call__, Plain().method, lambda m: m, lambda **kw: kw,
                   lambda *, m: m, lambda: 0, 3):
            try:
                got = nn.module._get_unbound_fn(fn)
            except errors.ApplyModuleInvalidMethodError:
                out.append("error")
            else:
                out.append((got is fn, inspect.ismethod(got), got.__name__))
        return out

    assert cases(xnn, xerrors) == cases(fnn, ferrors)


# --- typing aliases and experimental.nnx ------------------------------------------------------

ALIASES = {
    "linen.dtypes": ["Dtype"],
    "linen.activation": ["Array", "Dtype"],
    "linen.recurrent": ["Array", "Dtype", "InOutScanAxis", "Initializer", "PRNGKey",
                        "PrecisionLike"],
    "linen.partitioning": ["Array", "ArrayPytree", "InOutAxis", "InOutScanAxis",
                           "PartitionSpecPytree"],
    "linen.spmd": ["Array", "ArrayPytree"],
    "linen.stochastic": ["PRNGKey"],
    "linen.summary": ["Array", "LogicalNames", "MutableVariableDict", "PRNGKey", "RNGSequences"],
    "linen.module": ["RNGSequences", "VariableDict", "PRNGKey"],
    "core.scope": ["Collection", "MutableCollection", "PRNGFoldable"],
    "core.lift": ["InOutAxis", "InOutScanAxis"],
}


@pytest.mark.parametrize("path", sorted(ALIASES))
def test_typing_aliases_are_the_typing_modules_objects_on_both_sides(path):
    import flaxen.typing as xtyping

    flax_mod = importlib.import_module(f"flax.{path}")
    flaxen_mod = importlib.import_module(f"flaxen.{path}")
    for name in ALIASES[path]:
        assert getattr(flax_mod, name) is getattr(ftyping, name), name
        assert getattr(flaxen_mod, name) is getattr(xtyping, name), name


def test_experimental_nnx_pure_warns_alike():
    from flax.experimental import nnx as fexp

    from flaxen.experimental import nnx as xexp

    outs = []
    for nnx in (fexp, xexp):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = nnx.pure({"w": nnx.Param(jnp.ones(2))})
        outs.append((jax.tree.map(np.asarray, out)["w"].tolist(),
                     [w.category for w in caught], [str(w.message) for w in caught]))
    assert outs[0] == outs[1]
    assert outs[1][1] == [DeprecationWarning]
