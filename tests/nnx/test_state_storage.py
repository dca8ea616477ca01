"""A State keeps its nested levels as plain dicts: one custom pytree node per State."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.core import FrozenDict


class _Net(nnx.Module):
    def __init__(self, rngs):
        self.a = nnx.Linear(2, 3, rngs=rngs)
        self.blocks = nnx.List([nnx.Linear(3, 3, rngs=rngs) for _ in range(2)])


def _count_states(treedef) -> int:
    return str(treedef).count("CustomNode(State[")


def test_split_state_stores_nested_levels_as_dicts():
    _, state = nnx.split(_Net(nnx.Rngs(0)))
    raw = state.raw_mapping
    assert type(raw["a"]) is dict and type(raw["blocks"]) is dict
    assert type(raw["blocks"][0]) is dict
    assert isinstance(raw["a"]["kernel"], nnx.Param)
    assert _count_states(jax.tree.structure(state)) == 1
    assert jax.tree.structure(state).num_leaves == 6


@pytest.mark.parametrize("rebuild", ["jit", "tree_map", "state"])
def test_rebuilt_states_keep_dict_levels(rebuild):
    model = _Net(nnx.Rngs(0))
    state = nnx.state(model)
    if rebuild == "jit":
        out = jax.jit(lambda s: s)(state)
    elif rebuild == "tree_map":
        out = jax.tree.map(lambda x: x * 2, state)
    else:
        out = nnx.state(nnx.merge(nnx.graphdef(model), state))
    assert type(out) is nnx.State
    assert all(type(v) is dict for v in out.raw_mapping.values())
    assert _count_states(jax.tree.structure(out)) == 1
    merged = nnx.merge(nnx.graphdef(model), out)
    assert merged.blocks[1].kernel.shape == (3, 3)


def test_item_access_hands_out_a_view_sharing_the_dict():
    state = nnx.state(_Net(nnx.Rngs(0)))
    view = state["a"]
    assert type(view) is nnx.State and state.a == view
    view["extra"] = nnx.Param(jnp.zeros(1))
    assert "extra" in state.raw_mapping["a"]
    del state.a["extra"]
    assert "extra" not in view
    assert state["a"]["kernel"] is state.raw_mapping["a"]["kernel"]


def test_stored_mappings_become_dicts():
    inner = nnx.State({"w": nnx.Param(1.0)})
    s = nnx.State({"x": inner, "f": FrozenDict({"g": {"h": 2}})})
    assert s.raw_mapping["x"] is inner.raw_mapping
    assert type(s.raw_mapping["f"]) is dict and type(s.raw_mapping["f"]["g"]) is dict
    s["y"] = nnx.State({"q": 1})
    s.z = {"r": 2}
    assert type(s.raw_mapping["y"]) is dict and type(s.raw_mapping["z"]) is dict
    assert s.y.q == 1 and s["z"]["r"] == 2
    # a copy of a State takes its levels as dicts too: same tree structure as the original
    copy = nnx.State(s)
    assert jax.tree.structure(copy) == jax.tree.structure(s)


def test_state_built_without_copy_shares_nested_dicts():
    raw = {"a": {"b": 1}}
    s = nnx.State(raw, _copy=False)
    s["a"]["c"] = 2
    assert raw == {"a": {"b": 1, "c": 2}}


def test_functional_step_round_trip_and_update():
    model = _Net(nnx.Rngs(0))
    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state):
        m = nnx.merge(graphdef, state)
        m.a.bias[...] += 1.0
        return nnx.state(m)

    for _ in range(3):
        state = step(state)
    assert type(state.raw_mapping["a"]) is dict
    nnx.update(model, state)
    assert jnp.allclose(model.a.bias[...], 3.0)
    assert jnp.allclose(nnx.merge(graphdef, state).a.bias[...], 3.0)
