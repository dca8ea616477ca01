"""core.lift autodiff details: custom_vjp ``nondiff_argnums``, jvp tangents for collections that
do not exist yet, the transform's name in scope error paths, and core.nn's Flax initializers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import errors
from flaxen.core import apply, init, lift, nn

K = jax.random.PRNGKey(0)


def _dense(scope, x, features):
    w = scope.param("kernel", nn.initializers.ones_init(), (x.shape[-1], features))
    return x @ w


def _sign_grad_dense(scope, x, features):
    def fwd(scope, x, features):
        return lift.vjp(lambda s, x: _dense(s, x, features), scope, x)

    def bwd(features, vjp_fn, y_t):
        assert features == 3  # the non-differentiable argument comes back first
        params_t, x_t = vjp_fn(y_t)
        return jax.tree_util.tree_map(lambda g: 2.0 * jnp.sign(g), params_t), x_t

    f = lift.custom_vjp(_dense, forward_fn=fwd, backward_fn=bwd, nondiff_argnums=(2,))
    return f(scope, x, features)


def test_custom_vjp_nondiff_argnums_count_the_scope_as_argument_zero():
    x = jnp.array([[1.0, -2.0]])
    y, variables = init(_sign_grad_dense)(K, x, 3)
    assert y.shape == (1, 3)
    assert variables["params"]["kernel"].shape == (2, 3)
    grads = jax.grad(lambda v: apply(_sign_grad_dense)(v, x, 3).sum())(variables)
    np.testing.assert_array_equal(grads["params"]["kernel"], 2.0 * np.sign(
        np.array([[1.0] * 3, [-2.0] * 3])))


def test_jvp_with_a_tangent_for_a_collection_created_inside():
    def g(scope, x):
        p = scope.param("p", nn.initializers.zeros_init(), ())
        scope.variable("state", "n", lambda: 0)
        return p * x

    def f(scope, x):
        # at init there are no params yet: the tangent is an empty dict
        tangents = jax.tree_util.tree_map(jnp.ones_like, scope.variables().get("params", {}))
        _, y_t = lift.jvp(g, scope, (x,), (jnp.zeros_like(x),), {"params": tangents})
        return y_t

    x = jnp.arange(3.0)
    y_t, variables = init(f)(K, x)
    np.testing.assert_array_equal(y_t, np.zeros(3))
    assert variables["params"]["p"].shape == ()
    np.testing.assert_array_equal(apply(f)(variables, x), x)


def test_missing_param_error_names_the_transform_in_the_path():
    def f(scope):
        vdense = lift.vmap(_dense, in_axes=(0, None), variable_axes={"params": 0},
                           split_rngs={"params": True})
        vdense(scope.push("layer"), jnp.ones((3, 2)), 2)

    with pytest.raises(errors.ScopeParamNotFoundError, match=r'scope "/vmap\(layer\)"'):
        apply(f)({"params": {"layer": {"other": jnp.ones((3, 3))}}})


def test_missing_param_error_outside_transforms_keeps_the_plain_path():
    with pytest.raises(errors.ScopeParamNotFoundError, match=r'scope "/layer"'):
        apply(lambda s: _dense(s.push("layer"), jnp.ones((1, 2)), 2))(
            {"params": {"layer": {"b": 1.0}}})


def test_core_nn_initializers_have_flax_builders():
    assert nn.initializers.zeros_init()(K, (2,), jnp.float32).tolist() == [0.0, 0.0]
    assert nn.initializers.ones_init()(K, (2,), jnp.float32).tolist() == [1.0, 1.0]
    assert nn.initializers.lecun_normal()(K, (3, 2), jnp.float32).shape == (3, 2)
