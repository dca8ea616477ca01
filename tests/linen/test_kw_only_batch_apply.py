"""flaxen.linen.kw_only_dataclasses (keyword-only fields kept in subclasses) and nn.BatchApply."""

import dataclasses
import inspect

import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen.linen import kw_only_dataclasses as kwd


def _params(cls):
    return list(inspect.signature(cls.__init__).parameters)


def test_kw_only_field_goes_last_and_is_refused_by_position():
    @kwd.dataclass
    class A:
        a: int = 1
        b: int = kwd.field(default=2, kw_only=True)
        c: int = 3

    assert _params(A) == ["self", "a", "c", "b"]
    assert [f.name for f in dataclasses.fields(A)] == ["a", "c", "b"]
    assert A.__match_args__ == ("a", "c", "b")
    assert repr(A(10, 30)).endswith("A(a=10, c=30, b=2)")
    # Listed as positional-or-keyword (Flax's signature), but only a and c take positions.
    assert inspect.signature(A).parameters["b"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4 were given"):
        A(1, 2, 3)
    assert A(1, 2, b=5).b == 5


def test_inherited_kw_only_field_moves_after_the_subclass_fields():
    @kwd.dataclass
    class Base:
        x: int = kwd.field(default=1, kw_only=True)

    @kwd.dataclass
    class Child(Base):
        size: float
        x: int = 2

    assert _params(Child) == ["self", "size", "x"]
    assert repr(Child(4.0)).endswith("Child(size=4.0, x=2)")
    # The redeclaration carries no keyword-only mark, so it takes a position again (Flax's
    # rule: only marked fields are refused by position).
    assert Child(4.0, 3).x == 3

    @kwd.dataclass
    class Grandchild(Child):
        name: str

    assert _params(Grandchild) == ["self", "size", "name", "x"]
    # the bases are left as they were
    assert [f.name for f in dataclasses.fields(Base)] == ["x"]
    assert [f.name for f in dataclasses.fields(Child)] == ["size", "x"]


def test_kw_only_marker_and_decorator_arguments():
    @kwd.dataclass(frozen=True)
    class A:
        x: float
        _: kwd.KW_ONLY
        a: int = 5

    assert _params(A) == ["self", "x", "a"] and "_" not in A.__annotations__
    with pytest.raises(dataclasses.FrozenInstanceError):
        A(1.0).x = 2.0
    with pytest.raises(TypeError):
        A(1.0, 2)


def test_kw_only_fields_need_a_default():
    with pytest.raises(ValueError, match="no default"):
        kwd.field(kw_only=True)
    with pytest.raises(ValueError, match="no default"):
        @kwd.dataclass
        class B:
            _: kwd.KW_ONLY
            a: int


def test_batch_apply_merges_and_restores_leading_axes():
    seen = []

    def f(a, b):
        seen.append((a.shape, b.shape))
        return a * b

    out = nn.BatchApply(f)(jnp.ones((2, 3, 4)), jnp.arange(4.0))
    assert seen == [((6, 4), (4,))]  # the rank-1 argument is passed as it is
    np.testing.assert_array_equal(out, np.broadcast_to(np.arange(4.0), (2, 3, 4)))


def test_batch_apply_num_dims_and_non_array_inputs():
    out = nn.BatchApply(lambda a, s, n: (a + s, n), num_dims=3)(jnp.ones((2, 3, 4, 5)), 1.0, None)
    assert out[0].shape == (2, 3, 4, 5) and out[1] is None
    np.testing.assert_array_equal(out[0], 2.0)


def test_batch_apply_without_array_input_raises():
    with pytest.raises(ValueError, match="requires at least one input"):
        nn.BatchApply(lambda x: x)(1.0)


def test_kw_only_is_flaxs_marker_object():
    assert repr(kwd.KW_ONLY) == "KW_ONLY" and kwd.KW_ONLY is not dataclasses.KW_ONLY
    f = kwd.field(default=1, kw_only=True)
    assert f.metadata[kwd.KW_ONLY] is True  # the mark is the metadata, as in Flax
    assert kwd.KW_ONLY not in kwd.field(default=1).metadata

    ns: dict = {}
    exec(  # a string annotation, as under `from __future__ import annotations`
        "@kwd.dataclass\nclass B:\n    x: int\n    _: 'kwd.KW_ONLY'\n    y: int = 2\n",
        {"kwd": kwd, "__name__": __name__}, ns)
    assert _params(ns["B"]) == ["self", "x", "y"]
    with pytest.raises(TypeError):
        ns["B"](1, 2)
    with pytest.raises(TypeError, match="KW_ONLY markers"):
        @kwd.dataclass
        class C:
            _: kwd.KW_ONLY
            a: int = 1
            __: kwd.KW_ONLY
