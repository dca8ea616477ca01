"""flaxen.typing aliases and the flaxen.ids counter."""

import copy
import subprocess
import sys

import jax

from flaxen import ids, typing


def test_typing_names_exist_and_in_out_are_shared_with_lift():
    for name in typing.__all__:
        assert getattr(typing, name) is not None
    from flaxen.core import lift

    assert lift.In is typing.In and lift.Out is typing.Out
    assert typing.In(0).axis == 0
    assert typing.PRNGKey is jax.Array


def test_frozen_variable_dict_alias_is_lazy():
    code = (
        "import sys, flaxen.typing as t; "
        "assert 'flaxen.core.frozen_dict' not in sys.modules or True; "
        "from flaxen.core.frozen_dict import FrozenDict; "
        "assert t.FrozenVariableDict.__origin__ is FrozenDict"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_uuid_equality_hash_and_copies():
    a, b = ids.uuid(), ids.uuid()
    assert a == a and a != b
    assert hash(a) != hash(b)
    assert b.rawid > a.rawid
    for c in (copy.copy(a), copy.deepcopy(a)):
        assert c != a and hash(c) != hash(a)


def test_nnx_ids_path_reexports_the_same_counter():
    from flaxen.nnx import ids as nnx_ids

    assert nnx_ids.uuid is ids.uuid and nnx_ids.FlaxId is ids.FlaxId


def test_top_level_attribute_access():
    import flaxen

    assert flaxen.typing is typing and flaxen.ids is ids


def test_names_real_libraries_import_from_flax_typing():
    from flaxen.typing import (  # noqa: F401
        MISSING,
        BaseConfigContext,
        EinsumT,
        HashableMapping,
        Missing,
        PromoteDtypeFn,
        PytreeDeque,
        ShapeDtype,
        SizeBytes,
        TupleArg,
    )

    assert isinstance(MISSING, Missing)
    assert TupleArg.__bound__ is tuple
    assert typing.HA.__bound__ is not None and typing.F.__bound__ is not None
    assert typing.FrozenDict.__name__ == "FrozenDict"
    assert typing.AxisName == (str | tuple[str, ...] | None)


def test_promote_dtype_fn_is_a_protocol_annotations_can_use():
    import typing as pytyping

    def promote(args, /, *, dtype=None, inexact=True):
        return args

    def layer(fn: typing.PromoteDtypeFn = promote) -> tuple:
        return fn((1, 2), dtype=None)

    assert layer() == (1, 2)
    assert pytyping.Protocol in typing.PromoteDtypeFn.__mro__


def test_key_like_and_shape_dtype_guards():
    assert typing.is_key_like("a") and typing.is_key_like(1)
    # like Flax's, the check is only for the attributes, which every object inherits
    assert typing.is_key_like(object())
    assert typing.has_shape_dtype(jax.ShapeDtypeStruct((2,), "float32"))
    assert not typing.has_shape_dtype([1, 2])


def test_pytree_deque_is_a_pytree_with_sequence_keys():
    d = typing.PytreeDeque([1.0, 2.0])
    out = jax.tree.map(lambda x: x + 1, d)
    assert isinstance(out, typing.PytreeDeque) and list(out) == [2.0, 3.0]
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(d)[0]]
    assert paths == [(jax.tree_util.SequenceKey(0),), (jax.tree_util.SequenceKey(1),)]
    out.append(4.0)  # still a deque
    assert len(out) == 3


def test_size_bytes_counts_arrays_keys_and_adds():
    import jax.numpy as jnp

    s = typing.SizeBytes.from_any([jnp.zeros((10, 10)), {"k": jax.random.key(0)}, "x"])
    assert (s.size, s.bytes) == (101, 408)
    assert repr(typing.SizeBytes(1000, 2_000_000)) == "1,000 (2.0 MB)"
    assert repr(typing.SizeBytes(1, 999)) == "1 (999 B)"
    assert typing.SizeBytes(1, 4) + typing.SizeBytes(2, 8) == typing.SizeBytes(3, 12)
    assert not typing.SizeBytes(0, 0)
    assert typing.SizeBytes.from_array(jax.ShapeDtypeStruct((3,), "int8")).bytes == 3


def test_hashable_mapping_hashes_by_items_and_is_read_only():
    m = typing.HashableMapping({"a": 1, 2: "b"})
    assert hash(m) == hash(typing.HashableMapping({2: "b", "a": 1}))
    assert m == typing.HashableMapping({"a": 1, 2: "b"}) and m != {"a": 1, 2: "b"}
    assert "a" in m and list(m) == ["a", 2] and len(m) == 2
    m2 = m.update({"a": 5})
    assert m["a"] == 1 and m2["a"] == 5
    src = {"x": 1}
    shared = typing.HashableMapping(src, copy=False)
    src["y"] = 2
    assert "y" in shared
    assert "y" not in typing.HashableMapping({"x": 1})

    f = jax.jit(lambda x, cfg: x * cfg["scale"], static_argnums=1)
    assert f(2.0, typing.HashableMapping({"scale": 3.0})) == 6.0


class _Ctx(typing.BaseConfigContext):
    stack: list = []

    @classmethod
    def get_default(cls):
        return "default"

    @classmethod
    def get_stack(cls):
        return cls.stack


def test_base_config_context_with_block_nesting_and_decorator():
    assert _Ctx.current_value() == "default"
    with _Ctx("outer"):
        assert _Ctx.current_value() == "outer"
        with _Ctx("inner"):
            assert _Ctx.current_value() == "inner"
        assert _Ctx.current_value() == "outer"
    assert _Ctx.current_value() == "default" and _Ctx.stack == []

    @_Ctx("in_fn")
    def read():
        return _Ctx.current_value()

    assert _Ctx.current_value() == "default"
    assert read() == "in_fn" and _Ctx.current_value() == "default"
    with _Ctx("outer"):
        assert read() == "in_fn" and _Ctx.current_value() == "outer"
    assert _Ctx.stack == []
    try:
        typing.BaseConfigContext(1)  # type: ignore[abstract]
    except TypeError as e:
        assert "abstract" in str(e)
    else:
        raise AssertionError("BaseConfigContext is abstract")


def test_flax_id_accepts_attributes_and_reads_as_id():
    a = ids.uuid()
    a.tag = "mine"  # Flax's FlaxId has no __slots__
    assert a.tag == "mine" and a.id == a.rawid
    b = ids.FlaxId(0)
    b.id = 5
    assert b == ids.FlaxId(5) and b.rawid == 5


def test_initializer_alias_admits_jax_initializers_and_plain_callables():
    import typing

    import jax

    from flaxen import nnx
    from flaxen import typing as ftyping

    assert nnx.Initializer is ftyping.Initializer
    members = typing.get_args(ftyping.Initializer)
    assert jax.nn.initializers.Initializer in members
    assert any(typing.get_origin(m) is not None for m in members)  # the Callable[..., Any] arm
