"""nnx.remat with static arguments, and the NotImplementedError cases of the autodiff
transforms (graph-updates vjp/jvp, reduce_axes), as Flax raises them."""

import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import errors, nnx


def _power_sum(m, x, n):
    y = m(x)
    for _ in range(n):  # a Python loop: ``n`` must arrive as a plain int, not a tracer
        y = y * y
    return y.sum()


@pytest.mark.parametrize("static", [2, (2,), -1, (-1,)])
def test_remat_static_argnums_passes_every_argument(static):
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    x = jnp.array([[0.5, -1.0]])
    f = nnx.remat(_power_sum, static_argnums=static)
    np.testing.assert_allclose(f(m, x, 2), _power_sum(m, x, 2), rtol=1e-6)
    got = nnx.grad(f)(m, x, 2)
    want = nnx.grad(_power_sum)(m, x, 2)
    np.testing.assert_allclose(got["kernel"][...], want["kernel"][...], rtol=1e-6)
    np.testing.assert_allclose(got["bias"][...], want["bias"][...], rtol=1e-6)


def test_remat_static_argument_in_the_middle():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    x = jnp.ones((1, 2))

    @nnx.remat(static_argnums=1)
    def f(m, n, x):
        return _power_sum(m, x, n)

    assert float(f(m, 3, x)) == pytest.approx(float(_power_sum(m, x, 3)), rel=1e-6)


@pytest.mark.parametrize("transform", ["vjp", "jvp"])
def test_graph_updates_vjp_jvp_raise_not_implemented(transform):
    fn = getattr(nnx, transform)
    with pytest.raises(NotImplementedError, match="graph_updates is not supported") as info:
        fn(lambda x: x * 2, graph=True, graph_updates=True)
    assert isinstance(info.value, errors.NNXTransformError)  # flaxen's own class still holds
    assert "graph_updates=False" in str(info.value)  # the message names the way out


@pytest.mark.parametrize("name", ["grad", "value_and_grad", "vjp"])
def test_reduce_axes_is_refused_not_ignored(name):
    with pytest.raises(NotImplementedError, match="reduce_axes"):
        getattr(nnx, name)(lambda x: x.sum(), reduce_axes=("batch",), graph_updates=False)


def test_vjp_in_functional_mode_still_works():
    out, pullback = nnx.vjp(lambda x: jnp.sin(x), jnp.array(0.0), graph_updates=False)
    assert float(pullback(jnp.array(1.0))[0]) == pytest.approx(1.0)
    assert float(out) == 0.0


def test_mutating_a_captured_variable_names_flax_phrase_and_the_fix():
    import jax

    p = nnx.Param(jnp.ones(2))

    @jax.jit
    def f(x):
        p[...] = x  # captured by closure: another trace's Variable
        return x

    with pytest.raises(errors.TraceContextError,
                       match="Cannot mutate Param from a different trace level") as info:
        f(jnp.zeros(2))
    assert "as an argument of the nnx transform" in str(info.value)
