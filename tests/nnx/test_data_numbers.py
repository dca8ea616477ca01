"""Numbers marked ``nnx.data(...)`` are State leaves (raw values, not Variables): split puts
them in the State, merge and jit write them back, and unmarked numbers stay static."""

from __future__ import annotations

import jax.numpy as jnp

from flaxen import nnx


class Box(nnx.Module):
    def __init__(self) -> None:
        self.steps = nnx.data(5)  # sorts before `weight`: leaf order must follow the walk
        self.weight = nnx.Param(jnp.ones(()))
        self.scale = nnx.data(2.0)
        self.width = 3  # a plain int: static


def test_marked_numbers_are_state_leaves_in_walk_order():
    box = Box()
    gd, state = nnx.split(box)
    flat = dict(nnx.to_flat_state(state))
    assert sorted(flat) == [("scale",), ("steps",), ("weight",)]
    assert flat[("steps",)] == 5 and type(flat[("steps",)]) is int
    assert ("width",) not in flat
    rebuilt = nnx.merge(gd, state)
    assert (rebuilt.steps, rebuilt.scale, rebuilt.width) == (5, 2.0, 3)


def test_jit_traces_marked_numbers_and_writes_them_back():
    box = Box()

    @nnx.jit
    def step(box):
        box.steps = box.steps + 1
        box.weight.value = box.weight.value * box.scale
        return box.width  # static: stays a Python int inside

    for _ in range(2):
        assert step(box) == 3
    assert int(box.steps) == 7
    assert float(box.weight.value) == 4.0


def test_merge_without_a_state_says_what_is_missing():
    import pytest

    graphdef, _ = nnx.split(Box())
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'state'"):
        nnx.merge(graphdef)


def test_pure_state_annotates_what_split_returns():
    import jax

    @jax.jit
    def double(pure: nnx.PureState[Box]) -> nnx.PureState[Box]:
        box = nnx.merge(*pure)
        box.weight.value = box.weight.value * 2
        return nnx.split(box)

    pure = double(double(nnx.split(Box())))
    assert float(nnx.merge(*pure).weight.value) == 4.0


def test_tree_mode_states_list_leaves_by_path_and_rebuild_the_tree():
    import collections

    Pair = collections.namedtuple("Pair", ["second", "first"])
    tree = Pair(second=nnx.Param(jnp.ones(())), first={"b": nnx.Param(jnp.zeros(2)),
                                                       "a": jnp.full(3, 7.0)})
    graphdef, flat = nnx.graphlib.flatten(tree, graph=False)
    assert [p for p, _ in flat] == [("first", "a"), ("first", "b"), ("second",)]
    rebuilt = nnx.graphlib.unflatten(graphdef, flat)
    assert type(rebuilt) is Pair and float(rebuilt.second.value) == 1.0
    assert rebuilt.first["a"].tolist() == [7.0] * 3
    gd, state = nnx.split(tree, graph=False)
    again = nnx.merge(gd, state)
    assert again.first["b"].value.shape == (2,) and float(again.second.value) == 1.0


def test_tree_mode_rejects_a_shared_jax_ref():
    import jax
    import pytest

    ref = jax.new_ref(jnp.array(1.0))
    with pytest.raises(ValueError, match=r"same jax.Ref was found at paths /0 and /1"):
        nnx.split([ref, ref], graph=False)
    _, state = nnx.split([ref, jax.new_ref(jnp.array(2.0))], graph=False)
    assert len(nnx.to_flat_state(state)) == 2
