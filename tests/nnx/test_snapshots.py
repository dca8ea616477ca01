"""The copying graph operations and the snapshot protocol (``flaxen.nnx._snapshots``).

Today's face copies with Variables; a snapshot class (the 0.8.3 face's VariableState, or any
class registered here) is used only where a caller names it. The engine never needs the
0.8.3 class itself.
"""

import importlib.util

import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx
from flaxen.nnx import _graph_ops as ops
from flaxen.nnx import _snapshots


class Snap:
    """A minimal snapshot: the protocol's three attributes and ``_from_parts``."""

    def __init__(self, typ, value, metadata):
        self.type, self.value, self._var_metadata = typ, value, dict(metadata)

    @classmethod
    def _from_parts(cls, typ, value, metadata):
        return cls(typ, value, metadata)


@pytest.fixture
def snap():
    _snapshots.register(Snap)
    yield Snap
    _snapshots.SNAPSHOT_TYPES.discard(Snap)


def test_the_08_class_is_not_in_flaxen_nnx():
    assert importlib.util.find_spec("flaxen.nnx._variable_state") is None
    with pytest.warns(DeprecationWarning, match="alias of Variable"):
        assert nnx.VariableState is nnx.Variable
    assert nnx.variablelib.VariableState is nnx.Variable


def test_register_needs_from_parts():
    with pytest.raises(TypeError, match="_from_parts"):
        _snapshots.register(type("NoParts", (), {}))


@pytest.mark.parametrize("calls", [1, ops._COMPILE_AT + 2])  # interpreter, then generated code
def test_copying_split_and_merge_share_nothing(calls):
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    for _ in range(calls):
        gd, st = ops.split(model)
        copy = ops.merge(gd, st)
    assert type(st["kernel"]) is nnx.Param and st["kernel"] is not model.kernel
    assert copy.kernel is not st["kernel"] and copy.kernel is not model.kernel
    st["kernel"].value = jnp.zeros((2, 3))  # the State's copy is detached from both
    assert float(np.abs(model.kernel.value).sum()) > 0
    assert float(np.abs(copy.kernel.value).sum()) > 0
    copy.bias.value = jnp.ones(3)
    assert float(model.bias.value.sum()) == 0.0


@pytest.mark.parametrize("calls", [1, ops._COMPILE_AT + 2])
def test_a_named_snapshot_class_is_used_by_split_merge_update(snap, calls):
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    model.kernel.set_metadata(tag="k")
    for _ in range(calls):
        gd, st = ops.split(model, snapshot=snap)
        copy = ops.merge(gd, st, snapshot=snap)
    leaf = st["kernel"]
    assert type(leaf) is snap and leaf.type is nnx.Param and leaf._var_metadata["tag"] == "k"
    assert type(copy.kernel) is nnx.Param and copy.kernel.get_metadata("tag") == "k"
    np.testing.assert_array_equal(copy.kernel.value, model.kernel.value)
    # update writes a snapshot's value and metadata into the live Variable
    ops.update(model, {"bias": snap(nnx.Param, jnp.full(3, 2.0), {"tag": "b"})})
    np.testing.assert_array_equal(model.bias.value, 2.0)
    assert model.bias.get_metadata("tag") == "b"
    # filtered States hold snapshots too
    assert type(ops.state(model, nnx.Param, snapshot=snap)["bias"]) is snap


def test_apply_gives_back_the_leaf_kind_it_was_given(snap):
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    gd, st = ops.split(model, snapshot=snap)
    _, (_, new) = gd.apply(st)(jnp.ones((1, 2)))
    assert type(new["kernel"]) is snap
    gd, st = ops.split(model)
    _, (_, new) = gd.apply(st)(jnp.ones((1, 2)))
    assert type(new["kernel"]) is nnx.Param


def test_variable_takes_a_snapshot(snap):
    v = nnx.Param(jnp.ones(2), tag="v")
    v.update_from_state(snap(nnx.Param, jnp.zeros(2), {"tag": "s"}))
    assert v.get_metadata("tag") == "s" and v.get_metadata("ref") is False
    np.testing.assert_array_equal(v.value, 0.0)
