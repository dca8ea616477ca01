"""``nnx.update`` with state entries the graph holds no Variable for: nothing is dropped.

A new key becomes a new attribute or item (a Variable as a copy of the state's), a plain value
replaces a static attribute or item, and a Variable where the graph holds a static value is
refused with the path. (tests/reference/test_nnx_update_ref.py checks the same against Flax.)
"""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import GraphStateMismatchError


@pytest.mark.parametrize("graph", [True, False])
def test_new_variable_becomes_an_attribute(graph):
    model = nnx.Linear(2, 3, use_bias=False, rngs=nnx.Rngs(0))
    state = nnx.state(model, graph=graph)
    extra = nnx.Param(jnp.ones(1))
    state["extra"] = extra
    nnx.update(model, state)
    assert isinstance(model.extra, nnx.Param) and model.extra is not extra
    assert len(jax.tree.leaves(nnx.state(model, graph=False))) == 2  # counted as data


def test_plain_value_replaces_a_static_attribute_or_item():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    state = nnx.state(model)
    state["in_features"] = 7
    nnx.update(model, state)
    assert model.in_features == 7
    node = {"a": {"b": 1, "c": nnx.Param(jnp.array(2)), "d": 3}}
    nnx.update(node, {"a": {"b": 4, "c": jnp.array(10)}})
    assert node["a"]["b"] == 4 and int(node["a"]["c"][...]) == 10 and node["a"]["d"] == 3
    items = [1, nnx.Param(jnp.array(2))]
    nnx.update(items, {0: 5})
    assert items[0] == 5
    seq = nnx.List([1, nnx.Param(jnp.array(2))])
    nnx.update(seq, {0: 6})
    assert seq[0] == 6


def test_variable_over_a_static_value_is_refused_with_its_path():
    model = nnx.Linear(2, 3, use_bias=False, rngs=nnx.Rngs(0))
    state = nnx.state(model)
    state["bias"] = nnx.Param(jnp.zeros(3))
    with pytest.raises(GraphStateMismatchError, match="/bias.*static value"):
        nnx.update(model, state)


def test_data_in_a_new_static_attribute_is_refused_as_an_assignment_is():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    state = nnx.state(model)
    state["sub"] = nnx.State({"w": nnx.Param(jnp.ones(1))})
    with pytest.raises(ValueError, match="Found data on value"):
        nnx.update(model, state)


def test_a_tuple_cannot_take_new_entries():
    node = (nnx.Param(jnp.array(1)),)
    with pytest.raises(GraphStateMismatchError, match="cannot take new entries"):
        nnx.update(node, {0: jnp.array(2), 1: 3})
