"""The param shape check is cached per initializer *value*, and still catches every mismatch."""

import functools

import jax
import jax.numpy as jnp
import pytest

from flaxen import errors
from flaxen.core import scope as core_scope
from flaxen.core.scope import apply, init, static_key


def _make_init(n):
    def init_fn(rng, shape):
        return jnp.zeros((n,) + tuple(shape))
    return init_fn


def test_closures_with_equal_contents_share_a_key():
    assert static_key(_make_init(2)) == static_key(_make_init(2))
    assert static_key(_make_init(2)) != static_key(_make_init(3))
    p1 = functools.partial(jnp.zeros, dtype=jnp.float32)
    p2 = functools.partial(jnp.zeros, dtype=jnp.float32)
    assert static_key(p1) == static_key(p2)
    with pytest.raises(TypeError):
        static_key(_make_init(jnp.ones(2)))  # arrays are unhashable: no cache


def test_recursive_closure_does_not_recurse_forever():
    def outer():
        def f(rng, shape):
            return f if shape is None else jnp.zeros(shape)
        return f
    hash(static_key(outer()))


def test_closure_shape_check_hits_cache_and_detects_mismatch():
    def model(scope, n):
        return scope.param("w", _make_init(n), (2,))

    _, variables = init(model)(jax.random.PRNGKey(0), 3)
    assert variables["params"]["w"].shape == (3, 2)
    apply(model)(variables, 3)
    before = len(core_scope._SHAPE_CACHE)
    apply(model)(variables, 3)  # a new closure object, same contents: cache hit
    assert len(core_scope._SHAPE_CACHE) == before
    with pytest.raises(errors.ScopeParamShapeError, match="\"w\""):
        apply(model)(variables, 4)  # same code, different cell contents: checked


def test_unhashable_closure_still_checked():
    def model(scope, a):
        return scope.param("w", lambda rng, shape: jnp.zeros(shape) + a, (2,))

    _, variables = init(model)(jax.random.PRNGKey(0), jnp.ones(()))
    apply(model)(variables, jnp.ones(()))

    def bad(scope, a):
        return scope.param("w", lambda rng, shape: jnp.zeros((3,)) + a, (2,))

    with pytest.raises(errors.ScopeParamShapeError):
        apply(bad)(variables, jnp.ones(()))


def test_module_closures_keyed_by_fields():
    import flaxen.linen as nn

    class Layer(nn.Module):
        n: int

        @nn.compact
        def __call__(self):
            def init_fn(rng, shape):
                return jnp.zeros((self.n,) + shape)
            return self.param("w", init_fn, (2,))

    variables = Layer(3).init(jax.random.PRNGKey(0))
    Layer(3).apply(variables)
    assert static_key(Layer(3)) == static_key(Layer(3)) != static_key(Layer(4))
    with pytest.raises(errors.ScopeParamShapeError):
        Layer(4).apply(variables)


def test_bound_method_initializer():
    import flaxen.linen as nn

    class Layer(nn.Module):
        n: int

        def make(self, rng, shape):
            return jnp.zeros((self.n,) + shape)

        @nn.compact
        def __call__(self):
            return self.param("w", self.make, (2,))

    variables = Layer(3).init(jax.random.PRNGKey(0))
    Layer(3).apply(variables)
    Layer(3).apply(variables)
    with pytest.raises(errors.ScopeParamShapeError):
        Layer(5).apply(variables)
