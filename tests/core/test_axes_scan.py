"""flaxen.core.axes_scan: scan with in_axes/out_axes and loop-invariant broadcast values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.core import axes_scan
from flaxen.core.axes_scan import broadcast


def test_scan_carry_and_stacked_outputs():
    loop = axes_scan.scan(lambda b, c, x: (b, c + x, c * x), in_axes=0, out_axes=0)
    b, c, ys = loop(7, jnp.float32(0), jnp.arange(4.0))
    assert b == 7
    assert float(c) == 6.0
    np.testing.assert_allclose(ys, [0.0, 0.0, 2.0, 9.0])  # old carry times x


def test_scan_nonzero_axes_and_broadcast_inputs():
    def body(b, c, x, w):
        return b, c + 1, x * w

    xs = jnp.arange(6.0).reshape(2, 3)  # scanned over axis 1: three steps of shape (2,)
    loop = axes_scan.scan(body, in_axes=(1, broadcast), out_axes=1)
    _, c, ys = loop(None, 0, xs, 10.0)
    assert int(c) == 3
    np.testing.assert_allclose(ys, xs * 10.0)


def test_broadcast_output_is_computed_once_and_returned_whole():
    def body(b, c, x):
        return b, c, (x + 1, jnp.ones(2) * 5)

    loop = axes_scan.scan(body, in_axes=0, out_axes=(0, broadcast))
    _, _, (ys, const) = loop(None, 0.0, jnp.arange(3.0))
    np.testing.assert_allclose(ys, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(const, [5.0, 5.0])


def test_broadcast_out_depending_on_the_carry_is_an_error():
    loop = axes_scan.scan(lambda b, c, x: (c * 2, c, x), in_axes=0, out_axes=0)
    with pytest.raises(ValueError, match="data dependency on the scan body"):
        loop(None, jnp.float32(1), jnp.arange(3.0))


def test_unchecked_scan_skips_the_invariant_trace_and_rejects_broadcast_outputs():
    calls = []

    def body(b, c, x):
        calls.append(1)
        return b, c + x, x

    loop = axes_scan.scan(body, in_axes=0, out_axes=0, check_constancy_invariants=False)
    _, c, _ = loop(None, 0.0, jnp.arange(3.0))
    assert float(c) == 3.0 and len(calls) == 1
    bad = axes_scan.scan(body, in_axes=0, out_axes=broadcast, check_constancy_invariants=False)
    with pytest.raises(ValueError, match="check_constancy_invariants=False"):
        bad(None, 0.0, jnp.arange(3.0))


def test_reverse_and_length():
    loop = axes_scan.scan(lambda b, c: (b, c, c), in_axes=(), out_axes=0, length=2)
    _, _, ys = loop(None, jnp.float32(3))
    np.testing.assert_allclose(ys, [3.0, 3.0])
    rev = axes_scan.scan(lambda b, c, x: (b, c + 1, c), in_axes=0, out_axes=0, reverse=True)
    _, _, ys = rev(None, 0, jnp.zeros(3))
    np.testing.assert_array_equal(ys, [2, 1, 0])


def test_build_shaped_array():
    aval = axes_scan.build_shaped_array(jnp.ones((4, 3), jnp.bfloat16), batch_dim=True)
    assert aval.shape == (3,) and aval.dtype == jnp.bfloat16
    assert isinstance(aval, jax.core.ShapedArray)
    assert axes_scan.build_shaped_array(jnp.ones(2)).shape == (2,)
