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


def test_kw_only_field_goes_last_and_stays_keyword_only():
    @kwd.dataclass
    class A:
        a: int = 1
        b: int = kwd.field(default=2, kw_only=True)
        c: int = 3

    assert _params(A) == ["self", "a", "c", "b"]
    assert dataclasses.asdict(A(10, 30)) == {"a": 10, "b": 2, "c": 30}
    with pytest.raises(TypeError):
        A(1, 2, 3)


def test_redeclared_inherited_kw_only_field_stays_keyword_only():
    @kwd.dataclass
    class Base:
        x: int = kwd.field(default=1, kw_only=True)

    @kwd.dataclass
    class Child(Base):
        size: float
        x: int = 2

    assert _params(Child) == ["self", "size", "x"]
    sig = inspect.signature(Child.__init__).parameters
    assert sig["x"].kind is inspect.Parameter.KEYWORD_ONLY and sig["x"].default == 2
    assert dataclasses.asdict(Child(4.0)) == {"x": 2, "size": 4.0}

    @kwd.dataclass
    class Grandchild(Child):
        name: str

    assert _params(Grandchild) == ["self", "size", "name", "x"]


def test_kw_only_marker_and_decorator_arguments():
    @kwd.dataclass(frozen=True)
    class A:
        x: float
        _: kwd.KW_ONLY
        a: int = 5

    assert _params(A) == ["self", "x", "a"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        A(1.0).x = 2.0


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
    assert f.metadata[kwd.KW_ONLY] is True and f.kw_only is True
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
