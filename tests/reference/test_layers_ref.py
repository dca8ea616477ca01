"""Differential tests of the Linen layers against the reference `flax`.

Same key -> bit-identical parameters; same parameters and inputs -> the same outputs
(bit-identical where both run the same JAX ops, else within float32 tolerance); same
parameter names, shapes and dtypes; same error classes for bad input.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.linen import dtypes as fdtypes
from flax.linen import pooling as fpooling

from flaxen.linen import dtypes as dtypes
from flaxen.linen import pooling

RNG = np.random.RandomState(0)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- pooling
POOL_CASES = [
    ((2, 6, 7, 3), (2, 2), None, "VALID"),
    ((2, 6, 7, 3), (3, 2), (2, 1), "SAME"),
    ((2, 6, 7, 3), (2, 3), (1, 2), ((1, 2), (0, 1))),
    ((6, 7, 3), (2, 2), (2, 2), "SAME"),
    ((2, 2, 6, 7, 3), (3, 3), None, "SAME"),
    ((2, 9, 4), (3,), (2,), "SAME"),
    ((1, 4, 4, 4, 2), (2, 2, 2), None, "VALID"),
]


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16, np.int32])
@pytest.mark.parametrize("shape, window, strides, padding", POOL_CASES)
def test_pooling_matches_flax(shape, window, strides, padding, dtype):
    x = jnp.asarray(RNG.randn(*shape) * 4, dtype)
    for name in ("max_pool", "min_pool"):
        _same(getattr(pooling, name)(x, window, strides, padding),
              getattr(fpooling, name)(x, window, strides, padding))
    for include in (True, False):
        _same(pooling.avg_pool(x, window, strides, padding, include),
              fpooling.avg_pool(x, window, strides, padding, include))


def test_pool_generic_matches_flax():
    x = jnp.asarray(RNG.randn(2, 5, 5, 2), jnp.float32)
    _same(pooling.pool(x, 1.0, jax.lax.mul, (2, 2), (1, 1), "SAME"),
          fpooling.pool(x, 1.0, jax.lax.mul, (2, 2), (1, 1), "SAME"))


def test_pooling_gradients_match_flax():
    x = jnp.asarray(RNG.randn(2, 5, 5, 2), jnp.float32)
    for fn, ref in ((pooling.max_pool, fpooling.max_pool), (pooling.avg_pool, fpooling.avg_pool)):
        g = jax.grad(lambda v, f=fn: f(v, (2, 2), padding="SAME").sum())(x)
        h = jax.grad(lambda v, f=ref: f(v, (2, 2), padding="SAME").sum())(x)
        _same(g, h)


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: m.max_pool(x, 2),
        lambda m, x: m.max_pool(x, (2, 2, 2, 2)),
        lambda m, x: m.avg_pool(x, (2, 2), padding="CIRCULAR"),
        lambda m, x: m.max_pool(x, (2, 2), strides=(1,)),
    ],
)
def test_pooling_error_classes_match_flax(call):
    x = jnp.zeros((2, 5, 5, 3))
    with pytest.raises(Exception) as theirs:
        call(fpooling, x)
    with pytest.raises(type(theirs.value)):
        call(pooling, x)


# ----------------------------------------------------------------------------- dtypes
DTYPE_ARGS = [
    (jnp.ones(2, jnp.bfloat16), None),
    (jnp.ones(2, jnp.bfloat16), jnp.ones(2, jnp.float32)),
    (jnp.ones(2, jnp.int32),),
    (jnp.ones(2, jnp.int8), jnp.ones(2, jnp.uint8)),
    (jnp.ones(2, jnp.float16), 3.0),
    (jnp.ones(2, jnp.bfloat16), [1, 2]),
    (jnp.ones(2, jnp.bfloat16), (1.0, 2)),
    (jnp.ones(2, jnp.complex64), jnp.ones(2, jnp.float32)),
    (1, 2.0),
]


@pytest.mark.filterwarnings("ignore:Casting complex values")
@pytest.mark.parametrize("args", DTYPE_ARGS)
@pytest.mark.parametrize("dtype", [None, jnp.float16, jnp.float32])
@pytest.mark.parametrize("inexact", [True, False])
def test_dtype_inference_matches_flax(args, dtype, inexact):
    assert dtypes.canonicalize_dtype(*args, dtype=dtype, inexact=inexact) == (
        fdtypes.canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    )
    ours = dtypes.promote_dtype(*args, dtype=dtype, inexact=inexact)
    theirs = fdtypes.promote_dtype(*args, dtype=dtype, inexact=inexact)
    for a, b in zip(ours, theirs):
        _same(a, b)


def test_dtype_errors_match_flax():
    for kwargs in ({"dtype": jnp.int32}, {}):
        args = (jnp.ones(2),) if kwargs else ()
        with pytest.raises(ValueError):
            fdtypes.canonicalize_dtype(*args, **kwargs)
        with pytest.raises(ValueError):
            dtypes.canonicalize_dtype(*args, **kwargs)


# ----------------------------------------------------------------------------- activations
def test_activation_and_initializer_namespaces_match_flax():
    from flax.linen import activation as fact
    from flax.linen import initializers as finit

    from flaxen.linen import activation as act
    from flaxen.linen import initializers as init

    for name in dir(fact):
        obj = getattr(fact, name)
        if callable(obj) and getattr(obj, "__module__", "").startswith(("jax", "jaxlib")):
            assert getattr(act, name) is obj, name
    for name in dir(finit):
        obj = getattr(finit, name)
        if callable(obj) and getattr(obj, "__module__", "").startswith("jax."):
            assert getattr(init, name) is obj, name
    key = jax.random.key(3)
    for builder in ("zeros_init", "ones_init"):
        _same(getattr(init, builder)()(key, (2, 3), jnp.bfloat16),
              getattr(finit, builder)()(key, (2, 3), jnp.bfloat16))
