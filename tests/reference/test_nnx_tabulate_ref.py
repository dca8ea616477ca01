"""Differential test: ``nnx.tabulate`` gives the same text in flaxen.nnx and flax.nnx 0.12.8
(the same model, input and console options), to the last newline."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _block(lib):
    class Block(lib.Module):
        def __init__(self, rngs):
            self.lin = lib.Linear(4, 8, rngs=rngs)
            self.bn = lib.BatchNorm(8, rngs=rngs)
            self.drop = lib.Dropout(0.1, rngs=rngs)

        def __call__(self, x):
            return self.drop(self.bn(jax.nn.relu(self.lin(x))))

    return Block(lib.Rngs(0))


@pytest.mark.parametrize("options", [{}, {"depth": 1}, {"compute_flops": True}],
                         ids=["default", "depth1", "flops"])
@pytest.mark.parametrize("terminal", [True, False], ids=["ansi", "plain"])
def test_same_text_as_flax(options, terminal):
    kw = {"console_kwargs": {"width": 160, "force_terminal": terminal}, **options}
    x = jnp.ones((2, 4))
    assert nnx.tabulate(_block(nnx), x, **kw) == fnnx.tabulate(_block(fnnx), x, **kw)
