"""Differential test: 'CIRCULAR' ConvTranspose (with and without ``transpose_kernel``), in
Linen and NNX, next to flax 0.12.8 on the same kernels and inputs."""

import jax
import numpy as np
import pytest

from flaxen import linen as nn
from flaxen import nnx
from tests._inputs import normal

flax = pytest.importorskip("flax")
from flax import linen as fnn  # noqa: E402
from flax import nnx as fnnx  # noqa: E402

CASES = [((3,), (1,)), ((4,), (1,)), ((2,), (1,)), ((4,), (2,)), ((5,), (3,)),
         ((3, 4), (2, 3)), ((2, 2), (1, 1))]


@pytest.mark.parametrize("transpose_kernel", [False, True])
@pytest.mark.parametrize(("kernel", "strides"), CASES)
def test_linen_circular_conv_transpose_matches(kernel, strides, transpose_kernel):
    x = normal(0, (2, *([5] * len(kernel)), 3))

    def run(lib):
        layer = lib.ConvTranspose(4, kernel, strides=strides, padding="CIRCULAR",
                                  transpose_kernel=transpose_kernel)
        params = layer.init(jax.random.key(0), x)
        return np.asarray(layer.apply(params, x))

    np.testing.assert_allclose(run(nn), run(fnn), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transpose_kernel", [False, True])
@pytest.mark.parametrize(("kernel", "strides"), CASES[:4])
def test_nnx_circular_conv_transpose_matches(kernel, strides, transpose_kernel):
    x = normal(1, (2, *([6] * len(kernel)), 3))

    def run(lib):
        layer = lib.ConvTranspose(3, 4, kernel, strides=strides, padding="CIRCULAR",
                                  transpose_kernel=transpose_kernel, rngs=lib.Rngs(0))
        return np.asarray(layer(x))

    np.testing.assert_allclose(run(nnx), run(fnnx), rtol=1e-5, atol=1e-6)
