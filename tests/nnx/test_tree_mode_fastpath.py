"""Guards for the caches and shortcuts that make tree mode, update, state, merge and dtype
promotion fast: each must give what the general path gives, and see every change."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.layer_math import dtypes as ldt
from flaxen.nnx.nn import dtypes as ndt

# -- promote_dtype shortcut ---------------------------------------------------------------

def _slow_promote(*args, dtype=None, inexact=True):
    dt = ldt.canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    return [None if x is None else jnp.asarray(x, dt) for x in args]


@pytest.mark.parametrize("args,kw", [
    ((jnp.ones(2), jnp.ones(2), None), {}),
    ((jnp.ones(2, jnp.bfloat16), jnp.ones(2), None), {}),
    ((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.int32)), {}),
    ((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.int32)), {"inexact": False}),
    ((jnp.ones(2), jnp.ones(2)), {"dtype": jnp.bfloat16}),
    ((jnp.ones(2), jnp.ones(2)), {"dtype": "float32"}),
    ((jnp.asarray(1.0), jnp.ones(2, jnp.bfloat16)), {}),
    ((np.ones(2, np.float32), jnp.ones(2)), {}),
])
def test_promote_dtype_equals_general_path(args, kw):
    got = ldt.promote_dtype(*args, **kw)
    want = _slow_promote(*args, **kw)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        assert g.dtype == w.dtype and g.weak_type == w.weak_type
        np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


def test_promote_dtype_returns_same_arrays_when_dtypes_match():
    x, k = jnp.ones((2, 3)), jnp.ones((3, 4))
    out = ndt.promote_dtype((x, k, None))
    assert out[0] is x and out[1] is k and out[2] is None
    assert isinstance(out, tuple)


def test_promote_dtype_still_casts_and_rejects():
    out = ldt.promote_dtype(jnp.ones(2, jnp.float16), jnp.ones(2, jnp.float32))
    assert [a.dtype for a in out] == [jnp.float32, jnp.float32]
    with pytest.raises(ValueError, match="inexact"):
        ldt.promote_dtype(jnp.ones(2), dtype=jnp.int32)


def test_promote_dtype_under_jit_keeps_dtype():
    @jax.jit
    def f(x, k):
        a, b = ldt.promote_dtype(x, k)
        return a + b

    assert f(jnp.ones(2, jnp.bfloat16), jnp.ones(2, jnp.bfloat16)).dtype == jnp.bfloat16
    assert f(jnp.ones(2, jnp.bfloat16), jnp.ones(2)).dtype == jnp.float32
