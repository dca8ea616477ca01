"""The fast paths of issue 21 give what the general paths give, and see every change.

- tree mode: the code generated per :class:`TreeNodeDef` that rebuilds a tree (instead of
  JAX's unflatten) builds the same objects, falls back on a wrong leaf count, and a changed
  structure gets a new definition;
- ``TreeNodeDef`` as Flax's: ``(type, treedef, path_index)``, a frozen generic dataclass
  with ``with_*_outer_index``; tree-mode merges rebuild Variables from raw values;
- ``merge(copy=, recreate_variables=)`` and ``unflatten(recreate_variables=)``;
- ``update``'s per-type write loop writes what the general loop writes;
- the eager ``nnx.Linear`` call (one compiled dispatch) equals the traced computation.
"""

from __future__ import annotations

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from flaxen import nnx
from flaxen.experimental.nnx import VariableState
from flaxen.nnx import _codegen, graphlib
from flaxen.nnx._tree_mode import TreeGraphDef, TreeNodeDef


class Block(nnx.Module):
    def __init__(self, n: int, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs) for _ in range(n)])
        self.extra = nnx.data({"b": nnx.Param(jnp.zeros(3)), "a": nnx.BatchStat(jnp.ones(1))})
        self.pair = nnx.data((nnx.Param(jnp.ones(1)), None))
        self.count = nnx.data(jnp.asarray(3))  # a bare array leaf
        self.name = "block"


def _same_tree(a, b) -> None:
    """Same classes, same attributes in the same order, same leaves (by identity)."""
    la, ta = jax.tree_util.tree_flatten(a, is_leaf=lambda x: isinstance(x, nnx.Variable))
    lb, tb = jax.tree_util.tree_flatten(b, is_leaf=lambda x: isinstance(x, nnx.Variable))
    assert ta == tb
    assert all(x is y for x, y in zip(la, lb))
    assert list(vars(a)) == list(vars(b))
    assert a._nnx_trace is b._nnx_trace


def _slow_unflatten(nodedef: TreeNodeDef, leaves: list):
    ordered = list(leaves)
    for (_, i), leaf in zip(nodedef.path_index, leaves):
        ordered[i] = leaf
    return nodedef.treedef.unflatten(ordered)


# -- the generated tree builder ------------------------------------------------------------

def test_generated_build_equals_jax_unflatten():
    model = Block(3, nnx.Rngs(0))
    gd, state = nnx.split(model, graph=False)
    nodedef = gd.nodes[0]
    leaves = [v for _, v in nnx.to_flat_state(state)]
    fn = _codegen.make_tree_build_fn(nodedef.treedef, nodedef.path_index)
    built, want = fn(leaves), _slow_unflatten(nodedef, leaves)
    _same_tree(built, want)
    assert built.extra["a"] is model.extra["a"] and built.pair[1] is None
    assert built._pytree__status is want._pytree__status
    assert list(vars(built.layers[0])) == list(vars(want.layers[0]))  # data, then static
    assert fn(leaves[:-1]) is _codegen.MISS  # a wrong count: the general path reports it


class Plain(nnx.Module):  # only Variables: the cached walk serves tree mode
    def __init__(self, n: int, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs) for _ in range(n)])
        self.extra = nnx.data({"b": nnx.Param(jnp.zeros(3))})


def test_tree_merge_uses_generated_code_and_matches():
    model = Plain(2, nnx.Rngs(0))
    outs = [nnx.merge(*nnx.split(model, graph=False)) for _ in range(4)]
    gd = nnx.split(model, graph=False)[0]
    assert gd is nnx.split(model, graph=False)[0]  # the cached walk's definition
    assert gd._merge_fn  # lookup and build generated after the second use
    for out in outs[1:]:
        _same_tree(out, outs[0])
    assert outs[-1] is not model and outs[-1].layers[1].kernel is model.layers[1].kernel


def test_tree_merge_wrong_leaves_raises_after_codegen():
    model = Block(1, nnx.Rngs(0))
    gd, state = nnx.split(model, graph=False)
    for _ in range(3):
        nnx.merge(gd, state)
    assert gd._merge_fn
    other = nnx.BatchStat(jnp.ones(1))
    swapped = nnx.State(state)
    swapped["extra"]["b"] = other  # another Variable type: the general path keeps it
    assert nnx.merge(gd, swapped).extra["b"] is other
    del state["extra"]["a"]
    with pytest.raises(ValueError, match="/extra/a"):
        nnx.merge(gd, state)


def test_tree_structure_change_gets_new_definition():
    model = Block(2, nnx.Rngs(0))
    for _ in range(3):
        gd1 = nnx.merge(*nnx.split(model, graph=False))
    model.layers.append(nnx.Linear(2, 2, rngs=nnx.Rngs(1)))
    model.name = "grown"
    for _ in range(3):
        gd2, state = nnx.split(model, graph=False)
        out = nnx.merge(gd2, state)
    assert len(out.layers) == 3 and out.name == "grown"
    assert out.layers[2].kernel is model.layers[2].kernel
    assert len(gd1.layers) == 2


def test_custom_pytree_node_inside_is_rebuilt():
    import collections

    class Holder(nnx.Module):
        def __init__(self) -> None:
            self.od = nnx.data(collections.OrderedDict(z=nnx.Param(jnp.ones(1)),
                                                       y=nnx.Param(jnp.zeros(1))))

    model = Holder()
    for _ in range(4):
        out = nnx.merge(*nnx.split(model, graph=False))
    assert type(out.od) is collections.OrderedDict and list(out.od) == ["z", "y"]
    assert out.od["z"] is model.od["z"]


# -- TreeNodeDef / TreeGraphDef as Flax's --------------------------------------------------

def test_tree_node_def_is_flax_shaped():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    gd, _ = nnx.split(model, graph=False)
    nd = gd.nodes[0]
    assert isinstance(gd, TreeGraphDef) and graphlib.TreeNodeDef is TreeNodeDef
    assert nd.type is nnx.Linear
    assert [f.name for f in dataclasses.fields(nd) if f.init] == ["type", "treedef",
                                                                  "path_index"]
    assert nd.path_index == ((("bias",), 0), (("kernel",), 1))
    assert nd.with_no_outer_index() is nd and nd.with_same_outer_index() is nd
    assert nd.with_matching_outer_index(nd) is nd
    assert TreeNodeDef[nnx.Linear] is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        nd.type = int  # type: ignore[misc]
    again = TreeNodeDef(nnx.Linear, nd.treedef, nd.path_index)
    assert again == nd and hash(again) == hash(nd)
    assert TreeNodeDef(nnx.Module, nd.treedef, nd.path_index) != nd
    assert dataclasses.replace(nd, type=nnx.Module).type is nnx.Module
    assert pickle.loads(pickle.dumps(nd)) == nd
    assert [type(d).__name__ for d in gd.nodes[1:]] == ["VariableDef", "VariableDef"]
    assert gd.num_leaves == 2


def test_tree_merge_rebuilds_variables_from_raw_values():
    model = Block(1, nnx.Rngs(0))
    model.extra["b"].set_metadata("note", "x")
    gd, state = nnx.split(model, graph=False)
    pure = nnx.to_pure_dict(state)
    for _ in range(3):
        out = nnx.merge(gd, pure)
    assert type(out.extra["b"]) is nnx.Param and out.extra["b"].get_metadata("note") == "x"
    assert type(out.extra["a"]) is nnx.BatchStat
    assert isinstance(out.count, jax.Array)  # a bare array stays one
    np.testing.assert_array_equal(out.layers[0].kernel.value, model.layers[0].kernel.value)
    out = nnx.merge(gd, pure, recreate_variables=False)  # tree mode rebuilds anyway (Flax)
    assert type(out.layers[0].kernel) is nnx.Param


def test_tree_merge_copy():
    model = Block(1, nnx.Rngs(0))
    gd, state = nnx.split(model, graph=False)
    out = nnx.merge(gd, state, copy=True)
    assert out.layers[0].kernel is not model.layers[0].kernel
    assert out.layers[0].kernel.value is model.layers[0].kernel.value


# -- merge / unflatten keywords (graph mode) -----------------------------------------------

def test_graph_merge_recreate_variables():
    model = Block(1, nnx.Rngs(0))
    gd, state = nnx.split(model)
    pure = nnx.to_pure_dict(state)
    out = nnx.merge(gd, pure)
    assert type(out.layers[0].kernel) is nnx.Param
    out = nnx.merge(gd, pure, recreate_variables=False)
    assert isinstance(out.layers[0].kernel, jax.Array)
    assert out.layers[0].kernel is pure["layers"][0]["kernel"]
    out = nnx.merge(gd, state, recreate_variables=False)  # Variables are used either way
    assert out.layers[0].kernel is model.layers[0].kernel
    copied = nnx.merge(gd, state, copy=True)
    assert copied.layers[0].kernel is not model.layers[0].kernel


def test_unflatten_recreate_variables():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    gd, flat = graphlib.flatten(model)
    raw = [v.value for _, v in flat]
    assert type(graphlib.unflatten(gd, raw).kernel) is nnx.Param
    assert isinstance(graphlib.unflatten(gd, raw, recreate_variables=False).kernel, jax.Array)
    tgd, tflat = graphlib.flatten(model, graph=False)
    assert type(graphlib.unflatten(tgd, [v.value for _, v in tflat]).kernel) is nnx.Param


# -- update's write loop -------------------------------------------------------------------

@pytest.mark.parametrize("graph", [True, False])
def test_update_fast_loop_writes_values_and_metadata(graph):
    model, src = Block(2, nnx.Rngs(0)), Block(2, nnx.Rngs(1))
    state = nnx.state(src, graph=graph)
    state["layers"][1]["bias"].set_metadata("note", "y")
    for _ in range(3):
        nnx.update(model, state)
    assert model.layers[0].kernel.value is src.layers[0].kernel.value
    assert model.layers[0].kernel is not src.layers[0].kernel
    assert model.layers[1].bias.get_metadata("note") == "y"
    assert model.layers[1].bias._var_metadata is not src.layers[1].bias._var_metadata
    # raw values and VariableStates are written the same way
    pure = nnx.to_pure_dict(nnx.state(Block(2, nnx.Rngs(2))))
    for _ in range(3):
        nnx.update(model, pure)
    assert model.layers[0].kernel.value is pure["layers"][0]["kernel"]
    assert type(model.layers[0].kernel) is nnx.Param
    snap = VariableState(nnx.Param, jnp.ones((2, 2)), note="z")
    nnx.update(model, {"layers": {0: {"kernel": snap}}})
    assert model.layers[0].kernel.get_metadata("note") == "z"


def test_update_own_state_is_a_no_op():
    model = Block(1, nnx.Rngs(0))
    before = model.layers[0].kernel.value
    meta = model.layers[0].kernel._var_metadata
    for _ in range(3):
        nnx.update(model, nnx.state(model))
    assert model.layers[0].kernel.value is before
    assert model.layers[0].kernel._var_metadata is meta


# -- eager Linear --------------------------------------------------------------------------

def _reference(layer: nnx.Linear, x: jax.Array) -> jax.Array:
    y = lax.dot_general(x, layer.kernel.value, (((x.ndim - 1,), (0,)), ((), ())),
                        precision=layer.precision)
    return y + layer.bias.value if layer.bias is not None else y


@pytest.mark.parametrize("kwargs,shape", [
    ({}, (4, 3)), ({}, (3,)), ({"use_bias": False}, (2, 5, 3)),
    ({"precision": "highest"}, (4, 3)), ({"dtype": jnp.bfloat16}, (4, 3)),
])
def test_eager_linear_equals_traced(kwargs, shape):
    layer = nnx.Linear(3, 5, rngs=nnx.Rngs(0), **kwargs)
    x = jax.random.normal(jax.random.key(1), shape)
    eager = layer(x)
    traced = jax.jit(lambda x: layer(x))(x)
    assert eager.dtype == traced.dtype and eager.shape == shape[:-1] + (5,)
    np.testing.assert_array_equal(np.asarray(eager, np.float32), np.asarray(traced, np.float32))
    if "dtype" not in kwargs:
        np.testing.assert_allclose(eager, _reference(layer, x), rtol=1e-6, atol=1e-6)


def test_eager_linear_custom_dot_general_and_errors():
    calls = []

    def dot(*args, **kwargs):
        calls.append(1)
        return lax.dot_general(*args, **kwargs)

    layer = nnx.Linear(3, 2, dot_general=dot, rngs=nnx.Rngs(0))
    layer(jnp.ones((1, 3)))
    assert calls  # a custom contraction is still called
    with pytest.raises(Exception, match="in_features|3"):
        nnx.Linear(3, 2, rngs=nnx.Rngs(0))(jnp.ones((1, 4)))
