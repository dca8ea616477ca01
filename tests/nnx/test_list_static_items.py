"""``nnx.List`` items follow the Pytree data/static rule: arrays, Variables and Modules are
data, functions, numbers and strings static. A ``Sequential`` holding an activation is then
a pytree ``jax.jit`` accepts."""

import jax
import jax.numpy as jnp
import numpy as np

from flaxen import nnx


def test_item_status_is_decided_by_the_value():
    rngs = nnx.Rngs(0)
    lst = nnx.List([1, "a", jnp.ones(2), nnx.Linear(2, 2, rngs=rngs), [jnp.ones(1)], None])
    status = {k: v for k, v in lst._pytree__status.items() if k.isdigit()}
    assert status == {"0": False, "1": False, "2": True, "3": True, "4": True, "5": False}
    leaves = jax.tree.leaves(lst)
    assert [x.shape for x in leaves] == [(2,), (2,), (2, 2), (1,)]
    lst.append(jax.nn.relu)
    assert lst._pytree__status["6"] is False
    assert len(jax.tree.leaves(lst)) == 4


def test_sequential_with_an_activation_goes_through_jax_jit():
    model = nnx.Sequential(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), jax.nn.relu)
    x = jnp.ones((1, 2))
    out = jax.jit(lambda m, x: m(x))(model, x)
    np.testing.assert_allclose(out, model(x), rtol=1e-6)
    assert len(jax.tree.leaves(model)) == 2
