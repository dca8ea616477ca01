"""nnx.custom_vjp in graph mode with plain-array arguments: the bwd's cotangents for them
reach the gradient (they were once dropped), and the incoming input cotangents have each
argument's shape, a State per graph node and None elsewhere."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from flaxen import nnx


def _sin_times():
    seen = []
    f = nnx.custom_vjp(lambda x, y: jnp.sin(x) * y)

    def fwd(x, y):
        return f(x, y), (jnp.cos(x), jnp.sin(x), y)

    def bwd(res, g):
        c, s, y = res
        seen.append(g[0])
        return c * g[1] * y, s * g[1]

    f.defvjp(fwd, bwd)
    return f, seen


def test_array_arguments_get_the_rules_cotangents():
    f, seen = _sin_times()
    gx, gy = nnx.grad(f, argnums=(0, 1))(1.0, 2.0)
    np.testing.assert_allclose(gx, np.cos(1.0) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(gy, np.sin(1.0), rtol=1e-6)
    assert seen == [(None, None)]


class _Scale(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.array(3.0))


def test_a_module_and_an_array_argument_both_get_theirs():
    @nnx.custom_vjp
    def g(m, x):
        return m.w[...] * x

    got = []

    def g_fwd(m, x):
        return g(m, x), (m.w[...], x)

    def g_bwd(res, grads):
        w, x = res
        (m_g, x_g), out_g = grads
        got.append((type(m_g), x_g))
        return nnx.State({"w": nnx.Param(out_g * x * 10)}), out_g * w

    g.defvjp(g_fwd, g_bwd)
    m_grad, x_grad = nnx.grad(lambda m, x: g(m, x), argnums=(0, 1))(_Scale(), 2.0)
    np.testing.assert_allclose(m_grad["w"][...], 20.0)
    np.testing.assert_allclose(x_grad, 3.0)
    assert got == [(nnx.State, None)]


def test_a_pytree_argument_holding_an_array_and_a_module():
    @nnx.custom_vjp
    def h(pair):
        m, x = pair
        return m.w[...] * x

    def h_fwd(pair):
        m, x = pair
        return h(pair), (m.w[...], x)

    def h_bwd(res, grads):
        w, x = res
        (pair_g,), out_g = grads
        assert pair_g[1] is None and isinstance(pair_g[0], nnx.State)
        return ((nnx.State({"w": nnx.Param(out_g * x)}), out_g * w * 100),)

    h.defvjp(h_fwd, h_bwd)
    m = _Scale()
    grads = nnx.grad(h)((m, jnp.array(2.0)))
    np.testing.assert_allclose(grads[0]["w"][...], 2.0)
    np.testing.assert_allclose(grads[1], 300.0)
    # under jit as well
    grads_jit = nnx.jit(lambda m, x: nnx.grad(h)((m, x))[1])(m, jnp.array(2.0))
    np.testing.assert_allclose(grads_jit, 300.0)
