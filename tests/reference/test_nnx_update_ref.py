"""Differential tests: what ``nnx.update`` does with state entries the graph has no Variable
for, flaxen.nnx next to flax.nnx 0.12.8 (new attributes, static values replaced, refusals)."""

import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _outcome(lib, case):
    """What the case leaves behind, comparable across the two libraries."""
    try:
        return ("ok", case(lib))
    except ValueError:
        return ("ValueError", None)


def _new_param_attribute(lib):
    b = lib.Linear(2, 3, use_bias=False, rngs=lib.Rngs(0))
    st = lib.state(b)
    p = lib.Param(jnp.ones(1))
    st["extra"] = p
    lib.update(b, st)
    return type(b.extra).__name__, b.extra is p, b.extra[...].tolist()


def _new_param_attribute_tree_mode(lib):
    b = lib.Linear(2, 3, use_bias=False, rngs=lib.Rngs(0))
    st = lib.state(b, graph=False)
    st["extra"] = lib.Param(jnp.ones(1))
    lib.update(b, st)
    return [x.tolist() for x in __import__("jax").tree.leaves(lib.state(b, graph=False))]


def _static_attribute_replaced(lib):
    b = lib.Linear(2, 3, rngs=lib.Rngs(0))
    st = lib.state(b)
    st["in_features"] = 7
    lib.update(b, st)
    return b.in_features


def _variable_over_static_none(lib):
    b = lib.Linear(2, 3, use_bias=False, rngs=lib.Rngs(0))
    st = lib.state(b)
    st["bias"] = lib.Param(jnp.zeros(3))
    lib.update(b, st)
    return type(b.bias).__name__


def _nested_state_on_module(lib):
    b = lib.Linear(2, 3, rngs=lib.Rngs(0))
    st = lib.state(b)
    st["sub"] = lib.State({"w": lib.Param(jnp.ones(1))})
    lib.update(b, st)
    return type(b.sub).__name__


def _dict_node(lib):
    node = {"a": {"b": 1, "c": lib.Param(jnp.array(2)), "d": 3}}
    lib.update(node, {"a": {"b": 4, "c": jnp.array(10)}})
    return node["a"]["b"], int(node["a"]["c"][...]), node["a"]["d"]


def _list_node(lib):
    node = [1, lib.Param(jnp.array(2))]
    lib.update(node, {0: 5})
    return node[0]


@pytest.mark.parametrize("case", [
    _new_param_attribute, _new_param_attribute_tree_mode, _static_attribute_replaced,
    _variable_over_static_none, _nested_state_on_module, _dict_node, _list_node,
], ids=lambda f: f.__name__.strip("_"))
def test_update_with_entries_the_graph_lacks(case):
    assert _outcome(nnx, case) == _outcome(fnnx, case)
