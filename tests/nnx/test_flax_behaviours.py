"""NNX behaviours that must match Flax 0.12.8 exactly (issue 22): each test pins one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

# -- Variable's dunder protocols ---------------------------------------------------------------


def test_numpy_scalar_times_variable_stays_a_jax_array():
    p = nnx.Param(jnp.ones(2))
    out = np.float64(2.0) * p
    assert isinstance(out, jax.Array) and out.tolist() == [2.0, 2.0]
    traced = jax.jit(lambda x: np.float64(2.0) * nnx.Param(x))(jnp.ones(2))
    assert traced.tolist() == [2.0, 2.0]
    # NumPy still converts a Variable explicitly, through the value's own hook
    assert np.asarray(nnx.Param(jnp.array(3.0))).item() == 3.0


def test_variable_is_unhashable_and_has_no_ordering_or_truth():
    p = nnx.Param(jnp.array(1.0))
    with pytest.raises(TypeError, match="unhashable"):
        hash(p)
    with pytest.raises(TypeError):
        _ = p < 2
    with pytest.raises(TypeError):
        divmod(p, 2)
    with pytest.raises(TypeError):
        bool(p)  # falls back to len() of a 0-d value, as in Flax
    assert bool(p == 1.0) and not bool(p != 1.0)
    assert bool(p[...] < 2)


def test_variable_dunders_are_flaxs():
    names = ("__array__", "__bool__", "__divmod__", "__rdivmod__",
             "__lt__", "__le__", "__gt__", "__ge__")
    defined = [n for n in names if any(n in c.__dict__ for c in nnx.Param.__mro__[:-1])]
    assert defined == []
    assert nnx.Param.__hash__ is None
