"""Differential test, flaxen.nnx next to flax.nnx 0.12.8: when a transform reads its
``graph``/``graph_updates`` defaults, and ``dot_product_attention``/``MultiHeadAttention``
outputs bit for bit (Flax hands the no-dropout case to ``jax.nn.dot_product_attention``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _modes(lib):
    class M(lib.Module):
        def __init__(self):
            self.w = lib.Param(jnp.ones(2))

    def f(m, x):
        m.extra = lib.Param(jnp.zeros(1))
        return (m.w[...] * x).sum()

    seen = []
    for context in (lib.set_graph_updates, lib.set_graph_mode):
        for transform in (lib.jit, lib.grad, lib.value_and_grad, lib.checkify):
            with context(False):
                g = transform(f)
            m = M()
            g(m, jnp.ones(2))
            seen.append(hasattr(m, "extra"))
    return seen


def test_modes_are_read_when_the_transform_is_applied():
    assert _modes(nnx) == _modes(fnnx)


_Q = jax.random.normal(jax.random.key(0), (2, 5, 4, 8))
_KV = jax.random.normal(jax.random.key(1), (2, 6, 2, 8))
_Q5 = jax.random.normal(jax.random.key(2), (2, 3, 5, 4, 8))
_MASK = jax.random.bernoulli(jax.random.key(3), 0.7, (2, 1, 5, 5))


@pytest.mark.parametrize("args,kwargs", [
    ((_Q, _Q, _Q), {}),
    ((_Q, _KV, _KV), {}),
    ((_Q5, _Q5, _Q5), {}),
    ((_Q, _Q, _Q), {"mask": _MASK}),
    ((_Q, _Q, _Q), {"is_causal": True}),
    ((_Q[0], _Q[0], _Q[0]), {}),
    ((_Q.astype(jnp.bfloat16), _Q, _Q), {}),
    ((_Q, _Q, _Q), {"dtype": jnp.bfloat16}),
    ((_Q, _Q, _Q), {"deterministic": True}),
])
def test_dot_product_attention_is_bit_identical(args, kwargs):
    want = fnnx.dot_product_attention(*args, **kwargs)
    got = nnx.dot_product_attention(*args, **kwargs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_multi_head_attention_is_bit_identical():
    x = jax.random.normal(jax.random.key(5), (2, 5, 16))
    want = fnnx.MultiHeadAttention(4, 16, decode=False, rngs=fnnx.Rngs(0))(x)
    got = nnx.MultiHeadAttention(4, 16, decode=False, rngs=nnx.Rngs(0))(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
