"""Flax 0.12.8's small NNX modules: deprecations, proxy_caller, reprlib, tracers."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import jax
import pytest

from flaxen import config
from flaxen.nnx import deprecations, proxy_caller, reprlib, tracers


def test_deprecated_warns_delegates_and_keeps_signature():
    def resize(x, *, factor=2):
        """Multiply."""
        return x * factor

    old = deprecations.deprecated(resize)
    with pytest.warns(DeprecationWarning, match="Use .*resize instead"):
        assert old(3, factor=3) == 9
    assert old.__name__ == "resize"
    assert list(inspect.signature(old).parameters) == ["x", "factor"]
    assert old.__doc__.startswith(".. deprecated::") and old.__doc__.endswith("Multiply.")


def test_delayed_accessor_records_and_replays():
    acc = proxy_caller.DelayedAccessor().blocks[1].name
    assert acc.actions == (proxy_caller.GetAttr("blocks"), proxy_caller.GetItem(1),
                           proxy_caller.GetAttr("name"))

    class Block:
        name = "second"

    class Model:
        blocks = [None, Block()]

    assert acc(Model()) == "second"
    assert hash(acc) == hash(proxy_caller.DelayedAccessor(acc.actions))
    assert jax.tree_util.tree_leaves(acc) == []  # static under transforms
    assert copy.deepcopy(acc) == acc
    with pytest.raises(dataclasses.FrozenInstanceError):
        acc.actions = ()  # type: ignore[misc]


def test_callable_proxy_passes_the_path_and_arguments():
    calls = []

    def record(accessor, *args, **kwargs):
        calls.append((accessor, args, kwargs))
        return "out"

    proxy = proxy_caller.CallableProxy(record)
    assert proxy.encoder["q"](1, k=2) == "out"
    accessor, args, kwargs = calls[0]
    assert accessor == proxy_caller.DelayedAccessor().encoder["q"]
    assert (args, kwargs) == ((1,), {"k": 2})
    assert proxy_caller.ApplyCaller[int] is not None  # generic in its return state


class _Point(reprlib.Representable):
    def __init__(self, x, child=None):
        self.x, self.child = x, child

    def __nnx_repr__(self):
        yield reprlib.Object(type=type(self))
        yield reprlib.Attr("x", self.x)
        if self.child is not None:
            yield reprlib.Attr("child", self.child)


def test_representable_layout_nesting_and_no_color_in_repr():
    text = repr(_Point(1, _Point((2,))))
    assert text == "_Point(\n  x=1,\n  child=_Point(\n    x=(2,)\n  )\n)"
    saved = reprlib.REPR_CONTEXT.current_color
    reprlib.REPR_CONTEXT.current_color = reprlib.Color(*(["<c>"] * 10), "</c>")
    try:
        assert "<c>" not in repr(_Point(1))  # repr never colours
        assert "<c>_Point</c>" in str(_Point(1))  # str uses the active palette
    finally:
        reprlib.REPR_CONTEXT.current_color = saved


def test_max_repr_depth_cuts_nesting():
    with _depth(1):
        assert repr(_Point(1, _Point(2))) == "_Point(\n  x=1,\n  child=_Point(...)\n)"


class _depth:
    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.saved = config.flax_max_repr_depth
        config.update("flax_max_repr_depth", self.n)

    def __exit__(self, *exc):
        config.update("flax_max_repr_depth", self.saved)


def test_pretty_containers_and_colorized():
    assert repr(reprlib.PrettyMapping({"a": 1})) == "PrettyMapping({\n  'a': 1\n})"
    assert repr(reprlib.PrettySequence([])) == "PrettySequence([])"
    saved = reprlib.REPR_CONTEXT.current_color
    reprlib.REPR_CONTEXT.current_color = reprlib.NO_COLOR
    try:
        assert reprlib.colorized((1,)) == "(1,)"
        assert reprlib.colorized({"k": [True, None, 1.5]}) == "{'k': [True, None, 1.5]}"
        assert reprlib.colorized(int) == "int"
    finally:
        reprlib.REPR_CONTEXT.current_color = saved
    with pytest.raises(TypeError, match="not representable"):
        reprlib.get_repr(object())  # type: ignore[arg-type]


def test_trace_state_tracks_the_trace():
    outer = tracers.TraceState()
    assert outer.is_valid() and outer == tracers.TraceState()
    seen = []

    @jax.jit
    def f():
        inner = tracers.TraceState()
        seen.append((outer.is_valid(), inner.is_valid(), inner == outer))

    f()
    assert seen == [(False, True, False)]
    assert jax.tree_util.tree_leaves(outer) == []
    assert pickle.loads(pickle.dumps(outer)).is_valid()
    with pytest.raises(TypeError):
        hash(outer)
    assert repr(outer).startswith("TraceState(")
