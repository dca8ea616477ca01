"""Pooling: window reductions against a NumPy reference, padding modes, batch dims, errors."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from flaxen.linen import pooling
from flaxen.linen.pooling import avg_pool, max_pool, min_pool, pool


def _np_pool(x, window, strides, pads, reduce, fill, include_pad=True):
    """Plain loops over one batch dim; x is (N, *spatial, C)."""
    n = len(window)
    padded = np.pad(x, [(0, 0)] + list(pads) + [(0, 0)], constant_values=fill)
    valid = np.pad(np.ones(x.shape[1:-1]), list(pads), constant_values=0)
    out_sp = [(padded.shape[1 + i] - window[i]) // strides[i] + 1 for i in range(n)]
    out = np.zeros((x.shape[0], *out_sp, x.shape[-1]), np.float64)
    for idx in itertools.product(*[range(o) for o in out_sp]):
        sl = tuple(slice(i * s, i * s + w) for i, s, w in zip(idx, strides, window))
        win = padded[(slice(None),) + sl + (slice(None),)]
        flat = win.reshape(x.shape[0], -1, x.shape[-1])
        r = reduce(flat, axis=1)
        if reduce is np.sum:
            r = r / (np.prod(window) if include_pad else valid[sl].sum())
        out[(slice(None),) + idx + (slice(None),)] = r
    return out


X = np.random.RandomState(0).randn(2, 5, 6, 3).astype(np.float32)


@pytest.mark.parametrize("strides", [None, (1, 1), (2, 3)])
@pytest.mark.parametrize("padding", ["VALID", "SAME", ((1, 0), (2, 1))])
def test_max_min_avg_match_reference(strides, padding):
    window = (2, 3)
    st = strides or (1, 1)
    if isinstance(padding, str):
        pads = lax.padtype_to_pads(X.shape[1:3], window, st, padding)
    else:
        pads = padding
    np.testing.assert_allclose(
        max_pool(X, window, strides, padding), _np_pool(X, window, st, pads, np.max, -np.inf),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        min_pool(X, window, strides, padding), _np_pool(X, window, st, pads, np.min, np.inf),
        rtol=1e-6,
    )
    for include in (True, False):
        np.testing.assert_allclose(
            avg_pool(X, window, strides, padding, count_include_pad=include),
            _np_pool(X, window, st, pads, np.sum, 0.0, include),
            rtol=1e-5, atol=1e-6,
        )


def test_count_include_pad_differs_only_at_borders():
    x = jnp.array([[[2.0], [4.0], [6.0]]])
    inc = avg_pool(x, (3,), padding="SAME").ravel().tolist()
    exc = avg_pool(x, (3,), padding="SAME", count_include_pad=False).ravel().tolist()
    assert inc == pytest.approx([2.0, 4.0, 10 / 3])
    assert exc == pytest.approx([3.0, 4.0, 5.0])


def test_batch_dims_none_one_many():
    y = max_pool(X, (2, 2))
    assert y.shape == (2, 4, 5, 3)
    np.testing.assert_array_equal(max_pool(X[0], (2, 2)), y[0])
    many = max_pool(np.stack([X, X + 1]), (2, 2))
    assert many.shape == (2, 2, 4, 5, 3)
    np.testing.assert_array_equal(many[1], y + 1)


def test_integer_and_bool_inputs():
    x = jnp.array([0, 3, 1, 2], jnp.uint8).reshape(1, 4, 1)
    assert max_pool(x, (2,), padding="SAME").ravel().tolist() == [3, 3, 2, 2]
    assert min_pool(x.astype(jnp.int8), (2,), padding="SAME").ravel().tolist() == [0, 1, 1, 2]
    avg = avg_pool(x.astype(jnp.int32), (2,))
    assert jnp.issubdtype(avg.dtype, jnp.floating)
    b = jnp.array([True, False, False]).reshape(1, 3, 1)
    assert max_pool(b, (2,)).ravel().tolist() == [True, False]


def test_dtypes_preserved():
    x = jnp.asarray(X, jnp.bfloat16)
    assert max_pool(x, (2, 2)).dtype == jnp.bfloat16
    assert avg_pool(x, (2, 2)).dtype == jnp.bfloat16
    # dividing by per-window counts (a float array) promotes, as in Flax
    assert avg_pool(x, (2, 2), padding="SAME", count_include_pad=False).dtype == jnp.float32


def test_generic_pool_and_gradients():
    x = jnp.arange(5.0).reshape(1, 5, 1)
    assert pool(x, 0.0, lax.add, (2,), (1,), "VALID").ravel().tolist() == [1.0, 3.0, 5.0, 7.0]
    assert pool(x, 0.0, lax.add, (2,), None, "VALID").shape == (1, 4, 1)
    g = jax.grad(lambda v: max_pool(v, (2,), strides=(2,)).sum())(x)
    assert g.ravel().tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    g = jax.grad(lambda v: avg_pool(v, (2,), padding="SAME", count_include_pad=False).sum())(x)
    np.testing.assert_allclose(g.ravel(), [0.5, 1.0, 1.0, 1.0, 1.5])


def test_works_under_jit_and_vmap():
    f = jax.jit(lambda v: avg_pool(v, (2, 2), padding="SAME", count_include_pad=False))
    np.testing.assert_allclose(f(X), avg_pool(X, (2, 2), padding="SAME", count_include_pad=False))
    v = jax.vmap(lambda v: max_pool(v, (2, 2)))(X)
    np.testing.assert_array_equal(v, max_pool(X, (2, 2)))


def test_int_window_shape_is_a_type_error_with_a_fix():
    with pytest.raises(TypeError, match=r"window_shape=\(2, 2\)"):
        max_pool(X, 2)


def test_window_longer_than_input_rank():
    with pytest.raises(AssertionError) as info:  # Flax raises AssertionError here
        max_pool(X, (2, 2, 2, 2))
    assert isinstance(info.value, ValueError)
    assert "(2, 5, 6, 3)" in str(info.value) and "channels-last" in str(info.value)


def test_strides_of_the_wrong_length():
    with pytest.raises(ValueError, match="one stride per window dimension"):
        max_pool(X, (2, 2), strides=(1,))


@pytest.mark.parametrize("padding", ["CIRCULAR", "bogus"])
def test_unknown_padding_string(padding):
    with pytest.raises(RuntimeError) as info:  # Flax's class; also a ValueError
        avg_pool(X, (2, 2), padding=padding)
    assert isinstance(info.value, ValueError)
    assert repr(padding) in str(info.value) and "'SAME'" in str(info.value)


def test_padding_pairs_of_the_wrong_count():
    with pytest.raises(ValueError, match="exactly 2"):
        max_pool(X, (2, 2), padding=((1, 1),))
    with pytest.raises(ValueError, match="pairs"):
        max_pool(X, (2, 2), padding=3)


def test_lowercase_padding_string_is_accepted():
    np.testing.assert_array_equal(
        max_pool(X, (2, 2), padding="same"), max_pool(X, (2, 2), padding="SAME")
    )


def test_module_all():
    assert set(pooling.__all__) == {"pool", "max_pool", "avg_pool", "min_pool"}


def test_padding_mistakes_raise_flaxs_classes_too():
    x = jnp.ones((1, 4, 4, 1))
    with pytest.raises(TypeError):  # not pairs at all
        max_pool(x, (2, 2), padding=3)
    with pytest.raises(AssertionError):  # pairs, but not one per window dimension
        max_pool(x, (2, 2), padding=((1, 1),))
    with pytest.raises(AssertionError):
        max_pool(x, (2, 2), padding=((1, 1, 1), (0, 0)))
    with pytest.raises(ValueError, match="one per window dimension"):
        avg_pool(x, (2, 2), padding=((1, 1),))
