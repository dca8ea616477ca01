"""After a graph-updates transform a Module's attributes are in name order (Flax rebuilds its
input nodes from their sorted attributes on the way out); split, update and the functional
modes leave the order alone."""

from __future__ import annotations

import jax.numpy as jnp

from flaxen import nnx


def _public(obj) -> list[str]:
    return [k for k in vars(obj) if not k.startswith("_")]


def _layer() -> nnx.Linear:
    return nnx.Linear(2, 3, rngs=nnx.Rngs(0))


def test_transforms_leave_attributes_in_name_order():
    for transform in (nnx.jit, nnx.grad, nnx.remat):
        layer = _layer()
        assert _public(layer) != sorted(_public(layer))  # made in __init__'s order
        transform(lambda m: m(jnp.ones((1, 2))).sum())(layer)
        assert _public(layer) == sorted(_public(layer)), transform


def test_nested_nodes_and_rngs_are_ordered_too():
    class Net(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.z = _layer()
            self.a = nnx.Dropout(0.5, rngs=rngs)

    net = Net(nnx.Rngs(0, dropout=1))
    nnx.jit(lambda m: m.a(m.z(jnp.ones((1, 2)))))(net)
    assert _public(net) == ["a", "z"]
    assert _public(net.z) == sorted(_public(net.z))
    stream = net.a.rngs
    assert _public(stream) == sorted(_public(stream))


def test_split_update_and_functional_jit_keep_the_order():
    layer = _layer()
    before = _public(layer)
    graphdef, state = nnx.split(layer)
    nnx.update(layer, state)
    nnx.jit(lambda m: m(jnp.ones((1, 2))), graph_updates=False)(layer)
    assert _public(layer) == before


def test_sequence_nodes_keep_positions():
    items = nnx.List([_layer() for _ in range(12)])
    before = [id(x) for x in items]
    nnx.jit(lambda xs: xs[11](jnp.ones((1, 2))))(items)
    assert [id(x) for x in items] == before  # position 10 stays after 9, not after 1
