"""The "Using pack" example of the lifting design note, run in flax and flaxen alike."""

import flax.core as fcore
import flax.core.lift as flift
import flax.core.nn as fnn
import jax
import jax.numpy as jnp
import numpy as np

import flaxen.core as xcore
import flaxen.core.lift as xlift
import flaxen.core.nn as xnn


def _lift_transpose(lift, fn, target="params", variables=True, rngs=True):
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        target, rest = variable_groups

        def trans(x):
            return x.T if x.ndim == 2 else x

        target = jax.tree_util.tree_map(trans, target)
        scope = scope_fn((target, rest), rng_groups)
        y = fn(scope, *args)
        return y, repack_fn(scope)

    return lift.pack(wrapper, in_variable_filters=(target, variables),
                     out_variable_filters=(variables,), rng_filters=(rngs,))


def test_pack_example_matches_flax():
    x = jnp.ones((3, 2))
    key = jax.random.PRNGKey(0)
    ref_y, ref_p = fcore.init(_lift_transpose(flift, fnn.dense))(key, x, 4)
    got_y, got_p = xcore.init(_lift_transpose(xlift, xnn.dense))(key, x, 4)
    for a, b in zip(jax.tree_util.tree_leaves((got_y, got_p)),
                    jax.tree_util.tree_leaves((ref_y, ref_p))):
        np.testing.assert_array_equal(a, b)
    assert got_p["params"]["kernel"].shape == (2, 4)
    # Applying reads the stored kernel transposed, so a (4, 2)-shaped kernel is expected.
    v = {"params": {"kernel": jnp.ones((4, 2)), "bias": jnp.zeros(4)}}
    np.testing.assert_array_equal(
        xcore.apply(_lift_transpose(xlift, xnn.dense))(v, x, 4),
        fcore.apply(_lift_transpose(flift, fnn.dense))(v, x, 4))


def test_functional_layers_match_flax():
    x = jnp.arange(24.0).reshape(2, 3, 4) / 7
    key = jax.random.PRNGKey(1)

    def model(nn):
        def f(scope, x):
            h = nn.dense(scope.push("dense"), x, 5)
            h = nn.layer_norm(scope.push("ln"), h)
            return nn.batch_norm(scope.push("bn"), h)
        return f

    ref = fcore.init(model(fnn))(key, x)
    got = xcore.init(model(xnn))(key, x)
    assert jax.tree_util.tree_structure(got[1]) == jax.tree_util.tree_structure(ref[1])
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
