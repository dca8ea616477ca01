"""Probe findings, checked on flaxen alone: root debug paths of lifted transforms, the
``lift.jit`` calling convention, catchable rank errors, and vmap's batch-size check."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen
import flaxen.linen as nn
from flaxen import errors
from flaxen.core import apply, init, lift
from flaxen.layer_math.errors import LayerRankError

K = jax.random.key


class _Counter(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + self.variable("col", "n", jnp.zeros, ()).value


class _ScanCounter(nn.Module):
    @nn.compact
    def __call__(self, c, x):
        return c + self.variable("col", "n", jnp.zeros, ()).value, x


# --- 1. a transform at the root still names itself in error paths ---------------------------


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda: nn.jit(_Counter)(), "jit"),
        (lambda: nn.vmap(_Counter, in_axes=0)(), "vmap"),
        (lambda: nn.map_variables(_Counter, "col")(), "map_variables"),
        (lambda: nn.remat(_Counter)(), "remat"),
    ],
)
def test_root_transform_path_in_missing_collection_error(make, name):
    with pytest.raises(errors.ScopeCollectionNotFound, match=rf'in "/{name}\(\)"'):
        make().apply({}, jnp.ones(2))


def test_root_scan_path_in_missing_collection_error():
    scanned = nn.scan(_ScanCounter, variable_broadcast="col", split_rngs={}, in_axes=0)
    with pytest.raises(errors.ScopeCollectionNotFound, match=r'in "/scan\(\)"'):
        scanned().apply({}, 0.0, jnp.ones(3))


def test_nested_transform_path_still_wraps_the_module_name():
    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.vmap(_Counter, in_axes=0)(name="inner")(x)

    with pytest.raises(errors.ScopeCollectionNotFound, match=r'in "/vmap\(inner\)"'):
        Outer().apply({}, jnp.ones(2))


# --- 2. core lift.jit: fn(scope, module_hash_key, *args) ------------------------------------


def test_core_jit_passes_the_hash_key_through():
    seen = []

    def f(scope, key, x):
        seen.append(key)
        return x * scope.param("k", nn.initializers.ones, ())

    y, v = init(lambda s, x: lift.jit(f)(s, "abc", x))(K(0), 2.0)
    assert float(y) == 2.0 and seen == ["abc"]
    assert float(v["params"]["k"]) == 1.0
    assert float(flaxen.core.apply(lambda s, x: lift.jit(f)(s, "abc", x))(v, 3.0)) == 3.0


def test_core_jit_static_argnums_count_scope_as_zero_without_the_key():
    traced = []

    def g(scope, key, x, n):
        traced.append((key, n))
        return x * n

    jitted = lift.jit(g, static_argnums=1)  # args[0], i.e. x, is static

    y, _ = init(lambda s: jitted(s, "k", 2.0, jnp.asarray(3)))(K(0))
    assert float(y) == 6.0
    assert isinstance(traced[-1][1], jax.core.Tracer) and traced[-1][0] == "k"
    y, _ = init(lambda s: lift.jit(g, static_argnames="n")(s, "k", 2.0, n=3))(K(0))
    assert float(y) == 6.0 and traced[-1] == ("k", 3)


def test_core_jit_key_is_part_of_the_cache_key():
    count = []

    def f(scope, key, x):
        count.append(key)
        return x + 1

    jitted = lift.jit(f)
    run = apply(lambda s, key, x: jitted(s, key, x))
    run({}, "a", jnp.ones(2))
    run({}, "a", jnp.ones(2))
    run({}, "b", jnp.ones(2))
    assert count == ["a", "b"]


def test_core_jit_errors_like_flax():
    def g(scope, key, x, n):
        return x * n

    with pytest.raises(TypeError, match="module_hash_key"):
        init(lambda s: lift.jit(g)(s))(K(0))
    with pytest.raises(ValueError, match="Non-hashable static arguments"):
        init(lambda s: lift.jit(g)(s, ["unhashable"], 1.0, 2.0))(K(0))
    with pytest.raises(ValueError, match="static_argnums"):
        init(lambda s: lift.jit(g, static_argnums=2)(s, "k", 1.0, 2.0))(K(0))


def test_linen_jit_still_works_with_static_and_donated_arguments():
    class D(nn.Module):
        @nn.compact
        def __call__(self, x, n):
            return nn.Dense(n)(x)

    x = jnp.ones((1, 3))
    v = nn.jit(D, static_argnums=2)().init(K(0), x, 2)
    ref = D().apply(v, x, 2)
    np.testing.assert_allclose(nn.jit(D, static_argnums=2)().apply(v, x, 2), ref)
    np.testing.assert_allclose(nn.jit(D, static_argnames="n")().apply(v, x, n=2), ref)


# --- 3. too few dimensions: an IndexError too -----------------------------------------------


def test_missing_axis_error_is_catchable_as_flax_and_flaxen_classes():
    assert issubclass(errors.MissingAxisError, IndexError)
    assert issubclass(errors.MissingAxisError, LayerRankError)
    assert issubclass(errors.MissingAxisError, ValueError)
    assert issubclass(errors.MissingAxisError, errors.FlaxError)


def test_rnn_input_without_time_axis_raises_index_error():
    with pytest.raises(IndexError, match=r"inputs of shape \(3,\)") as info:
        nn.RNN(nn.LSTMCell(4)).init(K(0), jnp.ones(3))
    assert isinstance(info.value, errors.MissingAxisError)


def test_attention_inputs_without_heads_axis_raise_index_error():
    x = jnp.ones((2, 4))
    with pytest.raises(IndexError, match=r"rank >= 3"):
        nn.dot_product_attention(x, x, x)
    with pytest.raises(IndexError, match=r"rank >= 3"):
        nn.dot_product_attention_weights(x, x)


def test_attention_mixed_ranks_report_same_rank_first():
    q3, k2 = jnp.ones((1, 2, 4)), jnp.ones((2, 4))
    with pytest.raises(AssertionError, match="q, k, v must have same rank") as info:
        nn.dot_product_attention(q3, k2, k2)
    assert not isinstance(info.value, IndexError)
    with pytest.raises(AssertionError, match="q, k must have same rank"):
        nn.dot_product_attention_weights(q3, k2)


# --- 4. vmap: every mapped size must agree --------------------------------------------------


def _vmapped_dense():
    return nn.vmap(nn.Dense, variable_axes={"params": 0}, split_rngs={"params": True},
                   in_axes=1)


def test_vmap_input_size_differs_from_variables():
    vd = _vmapped_dense()
    v = vd(2).init(K(0), jnp.ones((4, 3)))
    assert vd(2).apply(v, jnp.ones((4, 3))).shape == (3, 2)
    with pytest.raises(ValueError, match=r"Inconsistent batch axis sizes: \{3, 5\}") as info:
        vd(2).apply(v, jnp.ones((4, 5)))
    assert isinstance(info.value, errors.BatchSizeError)
    assert "in_axes" in str(info.value)


def test_vmap_inputs_disagree_and_no_size_at_all():
    def two(scope, a, b):
        return a.sum() + b.sum()

    with pytest.raises(errors.BatchSizeError, match=r"Inconsistent batch axis sizes: \{3, 5\}"):
        init(lift.vmap(two, {}, {}, in_axes=(0, 0)))(K(0), jnp.ones((3, 2)), jnp.ones((5, 2)))
    with pytest.raises(ValueError, match="axis_size should be specified manually"):
        init(lift.vmap(two, {}, {}, in_axes=None))(K(0), jnp.ones(2), jnp.ones(2))
    y, _ = init(lift.vmap(two, {}, {}, in_axes=None, axis_size=3))(K(0), jnp.ones(2),
                                                                    jnp.ones(2))
    assert y.shape == (3,)
