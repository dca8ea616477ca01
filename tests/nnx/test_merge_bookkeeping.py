"""Generated merge code (graph and tree mode) leaves a Pytree's trace and status slots unset
where ``Pytree.__getattr__`` answers what it would have written. These tests pin down that
the objects it builds behave exactly like written ones: the same data/static split, the
same trace rule, and the explicit writes wherever the fallback would answer wrongly."""

from __future__ import annotations

import copy
import pickle

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import TraceContextError


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, extra: bool = False) -> None:
        self.dense = nnx.Linear(2, 2, rngs=rngs)
        self.name_ = "block"
        if extra:
            self.scale = nnx.Param(jnp.ones(2))


class Model(nnx.Module):
    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        # two Blocks of different status: one merge default per class, the other written
        self.blocks = nnx.List([Block(rngs), Block(rngs, extra=True), Block(rngs)])


def _merged(model, graph: bool):
    for _ in range(3):  # the third use generates the code
        gd, st = nnx.split(model, graph=graph)
        out = nnx.merge(gd, st)
    return gd, st, out


def _slot_is_set(obj, name: str) -> bool:
    try:
        object.__getattribute__(obj, name)
    except AttributeError:
        return False
    return True


@pytest.mark.parametrize("graph", [True, False])
def test_unset_slots_read_what_was_split(graph):
    model = Model()
    _, _, out = _merged(model, graph)
    # the speed path is taken: a plain Linear is built with neither slot written
    assert not _slot_is_set(out.blocks[0].dense, "_nnx_trace")
    assert not _slot_is_set(out.blocks[0].dense, "_pytree__status")
    for a, b in zip(out.blocks, model.blocks):
        assert a._pytree__status == b._pytree__status
        assert a.dense._pytree__status == b.dense._pytree__status
        assert a._nnx_trace is b._nnx_trace
    assert len(jax.tree.leaves(out)) == len(jax.tree.leaves(model)) == 7
    assert "scale" in out.blocks[1]._pytree__status
    assert "scale" not in out.blocks[0]._pytree__status


@pytest.mark.parametrize("graph", [True, False])
def test_top_level_merge_keeps_the_trace_rule(graph):
    _, _, out = _merged(Model(), graph)
    out.blocks[0].dense.note = 1  # written outside transforms: allowed

    @jax.jit
    def leak(x):
        out.blocks[0].dense.note = x  # a closure capture: refused as for any Module
        return x

    with pytest.raises(TraceContextError):
        leak(1.0)


@pytest.mark.parametrize("graph", [True, False])
def test_merge_inside_jit_writes_the_trace(graph):
    gd, st, _ = _merged(Model(), graph)
    escaped = []

    @jax.jit
    def step(st):
        m = nnx.merge(gd, st)
        m.blocks[0].dense.note = 1  # its own trace: allowed
        escaped.append(m)
        return nnx.split(m, graph=graph)[1]

    step(st)
    with pytest.raises(TraceContextError):
        escaped[0].blocks[0].dense.note = 2  # created under jit, mutated outside


class Greedy(nnx.Module):
    """A Module whose own ``__getattr__`` answers every name and does not chain."""

    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(2))
        self.label = "greedy"

    def __getattr__(self, name):
        return "anything"


@pytest.mark.parametrize("graph", [True, False])
def test_unmarked_getattr_gets_written_slots(graph):
    model = Greedy()
    _, _, out = _merged(model, graph)
    assert _slot_is_set(out, "_nnx_trace") and _slot_is_set(out, "_pytree__status")
    assert out._pytree__status == model._pytree__status
    assert len(jax.tree.leaves(out)) == 1


@pytest.mark.parametrize("make", [copy.copy, lambda x: pickle.loads(pickle.dumps(x))])
def test_copy_and_pickle_keep_the_data_leaves(make):
    layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    other = make(layer)
    assert other._pytree__status == layer._pytree__status
    assert [x.shape for x in jax.tree.leaves(other)] == [(3,), (2, 3)]
    other.extra = 1  # a usable object of this trace
    assert "_pytree__status" not in vars(other)


def test_copy_of_a_merged_object_keeps_its_status():
    _, _, out = _merged(Model(), graph=True)
    assert len(jax.tree.leaves(copy.copy(out.blocks[1]))) == 3
