"""Differential test: how a State stores and hands out its nested levels (plain dicts under
one State node), flaxen.nnx next to flax.nnx 0.12.8."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _describe(lib) -> dict:
    class Net(lib.Module):
        def __init__(self, rngs):
            self.a = lib.Linear(2, 3, rngs=rngs)
            self.blocks = lib.List([lib.Linear(3, 3, rngs=rngs) for _ in range(2)])

    state = lib.state(Net(lib.Rngs(0)))
    treedef = jax.tree.structure(state)
    out = {
        "raw": {k: type(v).__name__ for k, v in state.raw_mapping.items()},
        "item": type(state["a"]).__name__,
        "attr": type(state.a).__name__,
        "nested_raw": type(state["blocks"].raw_mapping[0]).__name__,
        "nodes": treedef.num_nodes,
        "leaves": treedef.num_leaves,
        "state_nodes": str(treedef).count("CustomNode(State["),
        "paths": [jax.tree_util.keystr(p)
                  for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]],
        "jit_raw": {k: type(v).__name__
                    for k, v in jax.jit(lambda s: s)(state).raw_mapping.items()},
        "map_raw": {k: type(v).__name__
                    for k, v in jax.tree.map(lambda x: x, state).raw_mapping.items()},
        "same_view_object": state["a"] is state["a"],
    }
    view = state["a"]
    view["extra"] = lib.Param(jnp.zeros(1))
    out["write_through_view"] = "extra" in state.raw_mapping["a"]
    state["y"] = lib.State({"q": 1})
    out["set_state"] = type(state.raw_mapping["y"]).__name__
    return out


def test_state_levels_match_flax():
    assert _describe(nnx) == _describe(fnnx)
