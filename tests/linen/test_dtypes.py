"""dtype inference (the "Default dtypes" design note): canonicalize_dtype and promote_dtype."""

import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.linen.dtypes import canonicalize_dtype, promote_dtype


def test_infers_from_arrays_and_skips_none():
    bf16 = jnp.ones(2, jnp.bfloat16)
    assert canonicalize_dtype(bf16, None) == jnp.bfloat16
    assert canonicalize_dtype(bf16, jnp.ones(2, jnp.float32)) == jnp.float32
    assert canonicalize_dtype(bf16, 3.0) == jnp.bfloat16  # Python scalars are weak


def test_integer_inputs_become_float_when_inexact():
    assert canonicalize_dtype(jnp.ones(2, jnp.int32)) == jnp.float32
    assert canonicalize_dtype(jnp.ones(2, jnp.int32), inexact=False) == jnp.int32
    assert canonicalize_dtype(jnp.ones(2, jnp.int8), jnp.ones(2, jnp.uint8)) == jnp.float32


def test_explicit_dtype_wins_and_is_returned_as_given():
    assert canonicalize_dtype(jnp.ones(2, jnp.bfloat16), dtype=jnp.float16) is jnp.float16
    assert canonicalize_dtype(jnp.ones(2), dtype="float32") == "float32"
    assert canonicalize_dtype(dtype=jnp.int8, inexact=False) is jnp.int8


def test_explicit_integer_dtype_with_inexact_raises():
    with pytest.raises(ValueError, match="inexact") as info:
        canonicalize_dtype(jnp.ones(2), dtype=jnp.int32)
    assert "int32" in str(info.value) and "inexact=False" in str(info.value)


def test_nothing_to_infer_from_raises():
    with pytest.raises(ValueError, match="no array or dtype"):
        canonicalize_dtype()
    with pytest.raises(ValueError, match="no array or dtype"):
        canonicalize_dtype(None, None)


def test_promote_dtype_converts_all_and_keeps_none():
    x, k, b = promote_dtype(jnp.ones(2, jnp.bfloat16), None, jnp.ones(2, jnp.float32))
    assert x.dtype == jnp.float32 and k is None and b.dtype == jnp.float32
    ints = promote_dtype(jnp.ones(2, jnp.int32), 1, inexact=False)
    assert [a.dtype for a in ints] == [jnp.int32, jnp.int32]
    assert promote_dtype(dtype=jnp.float16) == []


def test_promote_dtype_explicit_dtype_and_host_arrays():
    x, s = promote_dtype(jnp.ones(2), 3.0, dtype=jnp.bfloat16)
    assert x.dtype == s.dtype == jnp.bfloat16
    (h,) = promote_dtype(np.ones(2, np.float32))
    assert isinstance(h, jnp.ndarray) and h.dtype == jnp.float32
    y, z = promote_dtype(jnp.ones(2), [1, 2])
    np.testing.assert_array_equal(z, [1.0, 2.0])
    # a list is an (int) array: int with bfloat16 stays bfloat16; a float tuple is float32
    assert canonicalize_dtype(jnp.ones(2, jnp.bfloat16), [1, 2]) == jnp.bfloat16
    assert canonicalize_dtype(jnp.ones(2, jnp.bfloat16), (1.0, 2)) == jnp.float32
