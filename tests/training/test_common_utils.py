"""Tests for flaxen.training.common_utils (run with 8 host devices, set by conftest.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.training import common_utils as C


def test_shard_reshapes_leading_axis_and_keeps_types():
    n = jax.local_device_count()
    xs = {"a": np.arange(n * 4).reshape(n * 2, 2), "b": jnp.ones(n)}
    out = C.shard(xs)
    assert isinstance(out["a"], np.ndarray) and out["a"].shape == (n, 2, 2)
    assert out["b"].shape == (n, 1)
    np.testing.assert_array_equal(out["a"].reshape(n * 2, 2), xs["a"])


def test_shard_error_names_leaf():
    if jax.local_device_count() == 1:
        pytest.skip("every batch divides one device")
    with pytest.raises(ValueError, match=r"\['x'\].*not divisible"):
        C.shard({"x": np.zeros(jax.local_device_count() + 1)})


def test_shard_prng_key_both_key_kinds():
    n = jax.local_device_count()
    raw = C.shard_prng_key(jax.random.PRNGKey(0))
    assert raw.shape == (n, 2)
    typed = C.shard_prng_key(jax.random.key(0))
    assert typed.shape == (n,)
    assert len({tuple(k) for k in np.asarray(raw)}) == n  # all different


def test_stack_forest():
    out = C.stack_forest([{"a": 1, "b": np.ones(2)}, {"a": 2, "b": np.zeros(2)}])
    assert out["a"].tolist() == [1, 2] and out["b"].shape == (2, 2)
    with pytest.raises(ValueError, match="empty"):
        C.stack_forest([])


def test_get_metrics_from_pmap_outputs():
    n = jax.local_device_count()
    step = jax.pmap(lambda x, i: {"loss": x * i, "acc": x + i}, in_axes=(0, None))
    history = [step(jnp.arange(float(n)), float(i)) for i in range(3)]
    m = C.get_metrics(history)
    np.testing.assert_allclose(m["loss"], [0.0, 0.0, 0.0])  # device 0 holds x = 0
    np.testing.assert_allclose(m["acc"], [0.0, 1.0, 2.0])
    replicated = [{"loss": np.full((n,), float(i))} for i in range(2)]
    np.testing.assert_allclose(C.get_metrics(replicated)["loss"], [0.0, 1.0])


def test_onehot():
    out = C.onehot(jnp.array([[0, 2], [1, 5]]), 3)
    assert out.dtype == jnp.float32 and out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out[1, 1], [0, 0, 0])  # out of range -> all off
    np.testing.assert_array_equal(out, np.asarray(jax.nn.one_hot(jnp.array([[0, 2], [1, 5]]), 3)))
    np.testing.assert_array_equal(
        C.onehot(np.array([1]), 3, on_value=2, off_value=-1), [[-1, 2, -1]])
