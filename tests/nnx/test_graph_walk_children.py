"""What iter_children / iter_module_children / iter_graph(graph=False) visit."""

import warnings

import jax.numpy as jnp
import pytest

from flaxen import nnx


class _Holder(nnx.Module):
    def __init__(self):
        self.lin = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
        self.cache = nnx.Cache(jnp.zeros(1))
        self.size = 3
        self.again = self.lin


def test_iter_children_yields_variables_and_every_name_of_a_shared_child():
    m = _Holder()
    assert [k for k, _ in nnx.iter_children(m)] == ["again", "cache", "lin"]
    assert [k for k, _ in nnx.iter_module_children(m)] == ["again", "lin"]
    del m.again
    assert [k for k, _ in nnx.iter_children(m, graph=False)] == ["cache", "lin"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert [k for k, _ in m.iter_children()] == ["cache", "lin"]


@pytest.mark.parametrize("graph", [True, False])
def test_iter_children_refuses_a_leaf(graph):
    with pytest.raises(ValueError, match="iter_children"):
        list(nnx.iter_children(nnx.Param(jnp.ones(1)), graph=graph))


def test_iter_graph_in_tree_mode_visits_what_jax_flattens():
    lin = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
    assert [p for p, _ in nnx.iter_graph(lin, graph=False)] == [("bias",), ("kernel",), ()]
    # graph mode still visits the static attributes
    assert ("in_features",) in [p for p, _ in nnx.iter_graph(lin)]
