"""Today's split/merge generated code (built on a definition's third use) against the
interpreter: same objects, and every State it was not written for goes the general way."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx
from flaxen.errors import TraceContextError
from flaxen.nnx import graphlib


class Stack(nnx.Module):
    def __init__(self, n: int) -> None:
        rngs = nnx.Rngs(0)
        self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs) for _ in range(n)])
        self.norm = nnx.LayerNorm(2, rngs=rngs)
        self.tag = "stack"


def _warm(model):
    for _ in range(3):  # the third use generates the code
        gd, st = nnx.split(model)
        nnx.merge(gd, st)
    gd, st = nnx.split(model)
    assert gd._merge_fn is not None
    return gd, st


def _interpreted(gd, st):
    gd2 = graphlib.GraphDef(gd.defs)  # a fresh definition: not compiled yet
    return nnx.merge(gd2, st)


def test_generated_merge_matches_interpreter():
    model = Stack(3)
    gd, st = _warm(model)
    fast, slow = nnx.merge(gd, st), _interpreted(gd, st)
    assert type(fast) is type(slow) is Stack
    for a, b in zip(fast.layers, slow.layers):
        assert type(a) is nnx.Linear
        assert vars(a).keys() == vars(b).keys()
        assert a.kernel is b.kernel  # today's merge uses the Variables it is given
        assert (a.in_features, a.use_bias, a.dtype) == (b.in_features, b.use_bias, b.dtype)
    assert fast.tag == "stack" and fast.norm.epsilon == slow.norm.epsilon
    x = jnp.ones((1, 2))
    np.testing.assert_array_equal(fast.layers[2](x), model.layers[2](x))


def test_merged_instances_do_not_share_attribute_dicts():
    gd, st = _warm(Stack(1))
    a, b = nnx.merge(gd, st), nnx.merge(gd, st)
    assert a.layers[0] is not b.layers[0]
    a.layers[0].in_features = 5
    assert b.layers[0].in_features == 2
    assert nnx.merge(gd, st).layers[0].in_features == 2


def test_states_it_was_not_written_for_take_the_general_path():
    gd, st = _warm(Stack(2))
    missing = nnx.State({"layers": st["layers"], "norm": {"scale": st["norm"]["scale"]}})
    with pytest.raises(ValueError, match="Expected key for Variable"):
        nnx.merge(gd, missing)
    # a leaf of another Variable type: the general path builds what it was given
    other = nnx.State({**st.raw_mapping})
    other["norm"] = nnx.State({"scale": nnx.BatchStat(jnp.ones(2)),
                               "bias": st["norm"]["bias"]})
    m = nnx.merge(gd, other)
    assert type(m.norm.scale) is nnx.BatchStat
    # plain dicts and raw arrays instead of States of Variables
    pure = nnx.to_pure_dict(st)
    m = nnx.merge(gd, nnx.State(pure))
    assert isinstance(m.layers[0].kernel, nnx.Param)
    np.testing.assert_array_equal(m.layers[0].kernel.value, st["layers"][0]["kernel"].value)


class _Plain(nnx.Pytree, pytree=False):
    """A graph node that is not a pytree: built by the generated merge with the others."""

    def __init__(self) -> None:
        self.scale = nnx.Param(jnp.ones(2))
        self.name = "plain"


class _Mixed(nnx.Module):
    def __init__(self) -> None:
        self.a = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        self.plain = _Plain()
        self.shared = self.a  # one object reached twice: one object after merge
        self.pair = nnx.data((self.plain, 3))


def test_generated_merge_builds_every_node_with_its_own_trace_status_and_dict():
    model = _Mixed()
    gd, st = _warm(model)
    fast, slow = nnx.merge(gd, st), _interpreted(gd, st)
    assert fast.shared is fast.a and fast.pair[0] is fast.plain
    for f, s in [(fast, slow), (fast.a, slow.a), (fast.plain, slow.plain)]:
        assert type(f) is type(s)
        assert list(vars(f)) == list(vars(s))  # attribute order kept
        assert f._pytree__status == s._pytree__status
    assert vars(fast.a) is not vars(slow.a) and vars(fast.a) is not vars(model.a)
    fast.a.extra = 1  # created under this (eager) trace: mutable here
    assert "extra" not in vars(model.a)


def test_generated_merge_inside_jit_belongs_to_that_trace():
    import jax

    model = _Mixed()
    gd, st = _warm(model)
    outside = nnx.merge(gd, st)

    @jax.jit
    def f(st):
        inner = nnx.merge(gd, st)
        inner.a.tag = "set inside"  # built under this trace: allowed
        with pytest.raises(TraceContextError):
            outside.a.tag = "leak"  # built outside: refused
        return inner.a.kernel[...]

    f(st)
    assert not hasattr(outside.a, "tag")


class _IndexableLevel(dict):
    """Behaves like a level for a lookup, but is not exactly a dict."""


def test_a_level_that_only_looks_like_a_dict_is_not_taken_for_one():
    gd, st = _warm(Stack(2))
    odd = nnx.State(dict(st.raw_mapping))
    odd._mapping["layers"] = _IndexableLevel(st.raw_mapping["layers"])  # past State's own copy
    fn = gd._merge_fn
    assert fn(odd) is graphlib._codegen.MISS
    assert fn(st) is not graphlib._codegen.MISS
    # a leaf of another Variable type in the generated lookup also misses
    swapped = nnx.State(dict(st.raw_mapping))
    swapped._mapping["norm"] = {"scale": nnx.BatchStat(jnp.ones(2)),
                                "bias": st["norm"]["bias"]}
    assert fn(swapped) is graphlib._codegen.MISS
