"""The node protocol (flaxen/nnx/_node_protocol.py): one order of children for every walker,
and types registered with ``register_graph_node_type`` / ``register_pytree_node_type``
walked by split, merge, state, update, pop and iter_graph."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.nnx import (
    _graph_engine,
    _graph_walk,
    _node_protocol,
    _rng_ops,
    _var_tools,
    graphlib,
    visualization,
)


class Bag:
    """A user graph node: children kept in a private dict."""

    def __init__(self, **items):
        self.items = dict(items)


def _bag_init(bag, kv):
    bag.items.update(kv)


graphlib.register_graph_node_type(
    Bag, flatten=lambda b: (sorted(b.items.items()), None),
    set_key=lambda b, k, v: b.items.__setitem__(k, v), pop_key=lambda b, k: b.items.pop(k),
    create_empty=lambda _: Bag(), clear=lambda b: b.items.clear(), init=_bag_init)


class Pair:
    """A user pytree (not a JAX pytree): rebuilt by unflatten, never shared."""

    def __init__(self, left, right):
        self.left, self.right = left, right


graphlib.register_pytree_node_type(
    Pair, lambda p: ([("left", p.left), ("right", p.right)], None),
    lambda kv, _: Pair(**dict(kv)))


class Holder(nnx.Module):
    def __init__(self):
        self.bag = Bag(w=nnx.Param(jnp.ones(2)), n=3)
        self.pair = Pair(nnx.Param(jnp.zeros(1)), "static")


def test_graph_node_type_split_merge_round_trip():
    m = Holder()
    graphdef, state = nnx.split(m)
    assert set(state["bag"]) == {"w"} and set(state["pair"]) == {"left"}
    new = nnx.merge(graphdef, state)
    assert type(new.bag) is Bag and new.bag is not m.bag
    assert new.bag.items["w"] is m.bag.items["w"] and new.bag.items["n"] == 3
    assert type(new.pair) is Pair and new.pair.right == "static"
    assert new.pair.left is m.pair.left


def test_registered_graph_node_is_shared_and_may_hold_itself():
    bag = Bag(v=nnx.Param(1.0))
    bag.items["me"] = bag
    graphdef, state = nnx.split([bag, bag])
    a, b = nnx.merge(graphdef, state)
    assert a is b and a.items["me"] is a and a.items["v"] is bag.items["v"]


def test_state_update_and_iter_graph_reach_registered_nodes():
    m = Holder()
    assert {p for p, _ in nnx.to_flat_state(nnx.state(m))} == {("bag", "w"), ("pair", "left")}
    new = nnx.state(m)
    new["bag"]["w"] = nnx.Param(jnp.full(2, 7.0))
    nnx.update(m, new)
    assert float(m.bag.items["w"][...][0]) == 7.0
    paths = [p for p, _ in nnx.iter_graph(m)]
    assert ("bag", "w") in paths and ("bag", "n") in paths and ("bag",) in paths
    assert ("pair", "left") in paths
    assert paths.index(("bag", "n")) < paths.index(("bag", "w")) < paths.index(("bag",))


def test_mutation_through_the_type_itself_is_seen_by_the_next_split():
    bag = Bag(a=nnx.Param(1.0))
    nnx.split(bag)
    nnx.split(bag)  # a cached walk now exists
    bag.items["b"] = nnx.Param(2.0)  # no GraphNode attribute write: no epoch bump
    _, state = nnx.split(bag)
    assert set(state) == {"a", "b"}


def test_pop_and_static_update_use_set_and_pop_key():
    bag = Bag(a=nnx.Param(1.0), i=nnx.Intermediate(2.0))
    popped = nnx.pop(bag, nnx.Intermediate)
    assert set(popped) == {"i"} and set(bag.items) == {"a"}
    target = Bag(a=nnx.Param(1.0))
    _graph_engine.graph_update_static(target, Bag(a=nnx.Param(1.0), tag="new"))
    assert target.items["tag"] == "new"


def test_registering_twice_or_a_module_raises():
    with pytest.raises(ValueError, match="already registered"):
        graphlib.register_pytree_node_type(Pair, lambda p: ([], None), lambda kv, _: None)
    with pytest.raises(ValueError, match="already registered"):
        graphlib.register_graph_node_type(nnx.Linear, *([lambda *a: None] * 6))


def test_lookups():
    assert isinstance(graphlib.get_node_impl(Bag()), graphlib.GraphNodeImpl)
    assert isinstance(graphlib.get_node_impl([1]), graphlib.PytreeNodeImpl)
    assert graphlib.get_node_impl(nnx.Param(1.0)) is None
    assert graphlib.get_node_impl_for_type(graphlib.GenericPytree) is graphlib.PYTREE_NODE_IMPL
    assert graphlib.is_node_type(Bag) and graphlib.is_node_type(nnx.Linear)
    assert not graphlib.is_node_type(int)
    assert graphlib.is_node_module(Bag()) and not graphlib.is_node_module([1])
    assert graphlib.is_pytree_node((1,)) and not graphlib.is_pytree_node(nnx.Dict())
    assert not graphlib.is_pytree_node(nnx.Param(1.0))


class Mixed(nnx.Module):
    def __init__(self):
        self.zeta = nnx.Param(jnp.ones(1))
        self.alpha = nnx.List([nnx.Param(jnp.ones(1)) for _ in range(11)])
        self.mid = nnx.data({"b": nnx.Param(jnp.ones(1)), "a": nnx.Param(jnp.ones(1))})
        self.bag = Bag(y=nnx.Param(jnp.ones(1)), x=nnx.Param(jnp.ones(1)))


@pytest.mark.parametrize("pick", [lambda m: m, lambda m: m.alpha, lambda m: m.mid,
                                  lambda m: m.bag])
def test_every_walker_yields_one_key_order(pick):
    node = pick(Mixed())
    expected = [k for k, _ in _node_protocol.children(node)]
    assert [k for k, _ in _graph_walk._node_items(node)] == expected
    assert [k for k, _ in _var_tools._children(node)] == expected
    assert [k for k, _ in _rng_ops._children(node)] == expected
    assert [id(v) for v in visualization._children(node)] == \
        [id(v) for _, v in _node_protocol.children(node)]
    assert [k for k, _ in _graph_engine._attrs(node)] == expected
    (nodedef,) = _graph_engine.flatten((node,)).defs
    assert [k for k, _ in nodedef.attributes] == expected
    if isinstance(node, nnx.List):  # items by number, as integers: 0, 1, 2, ..., 10
        assert expected == list(range(11))


def test_with_vars_copies_registered_nodes():
    bag = Bag(v=nnx.Param(1.0))
    out = nnx.with_vars(bag, ref=True)
    assert type(out) is Bag and out is not bag and out.items["v"] is not bag.items["v"]
