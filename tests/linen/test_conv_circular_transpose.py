"""'CIRCULAR' transposed convolutions: with ``transpose_kernel=True`` a ConvTranspose is the
adjoint of the Conv sharing its kernel (<conv(x), y> == <x, conv_t(y)>), in Linen and NNX."""

import jax
import numpy as np
import pytest

from flaxen import linen as nn
from flaxen import nnx
from tests._inputs import normal

# (kernel, strides) where the layers' padding conventions make the pair exact adjoints (an
# even kernel at stride 1 is centred differently by the two, in Flax too; the differential
# tests cover those values)
CASES = [((3,), (1,)), ((5,), (1,)), ((2,), (2,)), ((5,), (2,)), ((3, 2), (1, 2)),
         ((4, 3), (2, 1))]


def _shapes(kernel, strides, n=8):
    spatial = tuple(n if len(kernel) == 1 else n - 2 * i for i in range(len(kernel)))
    small = tuple(d // s for d, s in zip(spatial, strides))
    return spatial, small


@pytest.mark.parametrize(("kernel", "strides"), CASES)
def test_linen_conv_transpose_is_the_adjoint_of_conv(kernel, strides):
    spatial, small = _shapes(kernel, strides)
    x = normal(0, (1, *spatial, 2))
    y = normal(1, (1, *small, 3))
    conv = nn.Conv(3, kernel, strides=strides, padding="CIRCULAR", use_bias=False)
    params = conv.init(jax.random.key(0), x)
    convt = nn.ConvTranspose(2, kernel, strides=strides, padding="CIRCULAR", use_bias=False,
                             transpose_kernel=True)
    lhs = np.vdot(conv.apply(params, x), y)
    rhs = np.vdot(x, convt.apply(params, y))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-4)


@pytest.mark.parametrize(("kernel", "strides"), CASES)
def test_nnx_conv_transpose_is_the_adjoint_of_conv(kernel, strides):
    spatial, small = _shapes(kernel, strides)
    x = normal(2, (1, *spatial, 2))
    y = normal(3, (1, *small, 3))
    conv = nnx.Conv(2, 3, kernel, strides=strides, padding="CIRCULAR", use_bias=False,
                    rngs=nnx.Rngs(0))
    convt = nnx.ConvTranspose(3, 2, kernel, strides=strides, padding="CIRCULAR",
                              use_bias=False, transpose_kernel=True, rngs=nnx.Rngs(0))
    convt.kernel[...] = conv.kernel[...]
    lhs = np.vdot(conv(x), y)
    rhs = np.vdot(x, convt(y))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-4)


def test_nnx_conv_groups_error_is_an_assertion_error_too():
    with pytest.raises(AssertionError, match="feature_group_count"):
        nnx.Conv(4, 6, (3,), feature_group_count=3, rngs=nnx.Rngs(0))
