"""The fast fold-in path of LazyRng gives exactly jax.random.fold_in's keys, in every context."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.core import _rng
from flaxen.core._rng import LazyRng, fold_in


@pytest.mark.parametrize("make_key", [jax.random.PRNGKey, jax.random.key])
def test_fold_in_matches_jax(make_key):
    key = make_key(3)
    for data in (0, 1, 2**31 + 5, 2**32 - 1):
        want = jax.random.fold_in(key, data)
        got = fold_in(key, data, [None])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(jax.random.key_data(got), jax.random.key_data(want))


def test_fold_in_under_jit_vmap_and_eval_shape():
    key = jax.random.PRNGKey(0)
    want = jax.random.fold_in(key, 77)
    np.testing.assert_array_equal(jax.jit(lambda k: fold_in(k, 77, [None]))(key), want)
    keys = jax.random.split(key, 3)
    np.testing.assert_array_equal(
        jax.vmap(lambda k: fold_in(k, 77, [None]))(keys),
        jax.vmap(lambda k: jax.random.fold_in(k, 77))(keys))
    out = jax.eval_shape(lambda k: fold_in(k, 77, [None]), key)
    assert out.shape == (2,) and out.dtype == jnp.uint32


def test_cached_wrapped_key_does_not_leak_between_traces():
    rng = LazyRng(jax.random.PRNGKey(1), ("a",))
    # first draw inside a jit of a closure: the wrapped key is an inner tracer, never cached
    inner = jax.jit(lambda: rng.fold_count(1))()
    assert rng._cell[0] is None
    outer = rng.fold_count(1)
    np.testing.assert_array_equal(inner, outer)
    assert rng._cell[0] is not None  # concrete key: cached
    # a cached concrete wrapped key is fine inside a later trace
    np.testing.assert_array_equal(jax.jit(lambda: rng.fold_count(2))(), rng.fold_count(2))


def test_child_rngs_share_the_cell():
    root = LazyRng(jax.random.PRNGKey(0))
    child = LazyRng.create(LazyRng.create(root, "x"), "y")
    assert child._cell is root._cell
    want = jax.random.fold_in(jax.random.PRNGKey(0), _rng.hash_suffix(("x", "y", 1)))
    np.testing.assert_array_equal(child.fold_count(1), want)


def test_batched_keys_fall_back():
    keys = jax.random.split(jax.random.PRNGKey(0), 2)  # shape (2, 2): not a single key
    with pytest.raises(Exception):
        jax.random.fold_in(keys, 1)
    with pytest.raises(Exception):
        fold_in(keys, 1, [None])


def test_legacy_key_warning_still_raised(monkeypatch):
    monkeypatch.setattr(_rng, "_legacy_keys_plain", lambda: False)
    key = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(fold_in(key, 5, [None]), jax.random.fold_in(key, 5))
