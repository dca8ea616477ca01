"""Sequential's argument passing (tuple and dict outputs, rngs) and List equality."""

import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx


def test_sequential_spreads_tuples_and_dicts():
    seq = nnx.Sequential(lambda a: (a, a + 1), lambda a, b: {"c": a * b}, lambda c: c - 1)
    assert seq(2) == 5
    # a list is one value, not arguments
    assert nnx.Sequential(lambda a: [a, 1], lambda a: a)(2) == [2, 1]


def test_sequential_passes_rngs_only_to_a_named_parameter():
    def catch_all(x, **kw):
        return "rngs" in kw

    def named(x, rngs=None):
        return rngs is not None

    assert nnx.Sequential(catch_all)(1, rngs=nnx.Rngs(0)) is False
    assert nnx.Sequential(lambda x: {"x": x}, named)(1, rngs=nnx.Rngs(0)) is True


def test_sequential_refuses_a_layer_that_is_not_callable():
    with pytest.raises(TypeError, match=r"Sequence\[1\] is not callable"):
        nnx.Sequential(lambda x: x, 3)(1)


def test_list_equality_and_hashing():
    a = nnx.List([1, 2])
    assert a != [1, 2] and [1, 2] != a and a != (1, 2)
    assert a == nnx.List([1, 2]) and nnx.List([jnp.ones(2)]) == nnx.List([jnp.ones(2)])
    with pytest.raises(TypeError):
        hash(a)
    d = nnx.Dict(a=1)
    assert d == {"a": 1} and d == nnx.Dict(a=1) and hash(d) != hash(nnx.Dict(a=1))


def test_list_indices_are_integers_and_slices_never_resize():
    items = nnx.List([1, 2, 3])
    with pytest.raises(TypeError, match="Invalid index type"):
        items[1.0]
    with pytest.raises(TypeError, match="Invalid index type"):
        items[1.0] = 9
    assert items[np.int64(2)] == 3  # any integer type indexes
    with pytest.raises(ValueError, match="Length mismatch"):
        items[0:2] = [9]
    items[0:2] = [7, 8]
    assert list(items) == [7, 8, 3] and len(items) == 3
