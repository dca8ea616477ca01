"""``nnx.merge(graphdef, leaves)`` with a plain list of leaves (what a sampler carries through
``jax.jit``), and Flax 0.12.8's deprecated spellings: ``Module.iter_modules()`` /
``iter_children()`` as aliases of the functions, ``nnx.pure``, ``nnx.object``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx


class Net(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(2, 3, rngs=rngs)
        self.norm = nnx.LayerNorm(3, rngs=rngs)

    def __call__(self, x):
        return self.norm(self.lin(x))


@pytest.mark.parametrize("graph", [True, False])
def test_merge_takes_a_list_of_leaves(graph):
    model, x = Net(nnx.Rngs(0)), jnp.ones((1, 2))
    gd, st = nnx.split(model, graph=graph)
    variables = jax.tree.leaves(st, is_leaf=lambda v: isinstance(v, nnx.Variable))
    same = nnx.merge(gd, variables)
    assert same.lin.kernel is model.lin.kernel  # the Variables themselves
    raw = jax.tree.leaves(st)
    rebuilt = nnx.merge(gd, raw)
    assert type(rebuilt.lin.kernel) is nnx.Param
    np.testing.assert_allclose(rebuilt(x), model(x), rtol=1e-6)
    jitted = jax.jit(lambda leaves, x: nnx.merge(gd, leaves)(x))(raw, x)
    np.testing.assert_allclose(jitted, model(x), rtol=1e-6)
    assert nnx.merge(gd, variables, copy=True).lin.kernel is not model.lin.kernel


def test_merge_list_refuses_more_states_and_a_wrong_count():
    gd, st = nnx.split(Net(nnx.Rngs(0)))
    raw = jax.tree.leaves(st)
    with pytest.raises(ValueError, match="list of leaves is the whole state"):
        nnx.merge(gd, raw, st)
    with pytest.raises(ValueError):
        nnx.merge(gd, raw[:-1])


def test_module_iteration_methods_are_deprecated_aliases():
    model = nnx.Sequential(Net(nnx.Rngs(0)), Net(nnx.Rngs(1)))
    with pytest.warns(DeprecationWarning, match="nnx.iter_modules"):
        pairs = list(model.iter_modules())
    assert [p for p, _ in pairs] == [p for p, _ in nnx.iter_modules(model)]
    assert pairs[-1][0] == () and pairs[-1][1] is model  # children first, root last
    with pytest.warns(DeprecationWarning, match="nnx.iter_children"):
        kids = list(model.iter_children())
    assert kids == list(nnx.iter_children(model))


def test_pure_and_object_old_names():
    st = nnx.state(nnx.Linear(1, 1, rngs=nnx.Rngs(0)))
    with pytest.warns(DeprecationWarning):
        pure = nnx.pure(st)
    assert not isinstance(pure["kernel"], nnx.Variable)
    assert nnx.object.Object is nnx.Object and nnx.object is nnx.pytreelib
