"""An NNX transform called inside a JAX transform on an object created outside it (captured
by closure) must not leave that JAX transform's tracers in the object: graph mode refuses
it, as Flax does, and the functional modes write back only what the function changed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import TraceContextError

X = jnp.ones((1, 2))

OUTER = {
    "jax.jit": jax.jit,
    "jax.grad": jax.grad,
    "jax.vmap": lambda f: (lambda x: jax.vmap(f)(x[None])),
}


def _custom_vjp(m):
    @nnx.custom_vjp
    def f(m, x):
        return m(x)

    def fwd(m, x):
        return f(m, x), (m, x)

    def bwd(res, g):
        m, x = res
        return jax.tree.map(jnp.zeros_like, nnx.state(m)), jnp.ones_like(x)

    f.defvjp(fwd, bwd)
    return lambda x: f(m, x).sum()


GRAPH_MODE = {
    "jit": lambda m: (lambda x: nnx.jit(lambda m, x: m(x))(m, x).sum()),
    "vmap": lambda m: (lambda x: nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(m, x[None])
                       .sum()),
    "remat": lambda m: (lambda x: nnx.remat(lambda m, x: m(x))(m, x).sum()),
    "grad": lambda m: (lambda x: nnx.grad(lambda m, x: m(x).sum())(m, x).kernel[...].sum()),
    "custom_vjp": _custom_vjp,
    "cond": lambda m: (lambda x: nnx.cond(True, lambda m, x: m(x), lambda m, x: -m(x), m, x)
                       .sum()),
    "scan": lambda m: (lambda x: nnx.scan(lambda m, c: (m, c), in_axes=(nnx.Carry, 0),
                                          out_axes=(nnx.Carry, 0))(m, x[None])[1].sum()),
}

FUNCTIONAL = {
    "jit": lambda m: (lambda x: nnx.jit(lambda m, x: m(x), graph_updates=False)(m, x).sum()),
    "remat": lambda m: (lambda x: nnx.remat(lambda m, x: m(x), graph_updates=False)(m, x)
                        .sum()),
    "vmap": lambda m: (lambda x: nnx.vmap(lambda m, x: m(x), in_axes=(None, 0),
                                          graph_updates=False)(m, x[None]).sum()),
}


def _concrete(m) -> bool:
    return not any(isinstance(v.get_raw_value(), jax.core.Tracer)
                   for v in jax.tree.leaves(m, is_leaf=lambda x: isinstance(x, nnx.Variable)))


@pytest.mark.parametrize("outer", list(OUTER))
@pytest.mark.parametrize("inner", list(GRAPH_MODE))
def test_graph_mode_refuses_a_captured_module(outer, inner):
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    kernel = m.kernel[...]
    with pytest.raises(TraceContextError, match="different trace level") as info:
        OUTER[outer](GRAPH_MODE[inner](m))(X)
    assert isinstance(info.value, ValueError)  # the class Flax raises for some of them
    assert _concrete(m) and (m.kernel[...] == kernel).all()  # left as it was


@pytest.mark.parametrize("outer", list(OUTER))
@pytest.mark.parametrize("inner", list(FUNCTIONAL))
def test_functional_mode_leaves_an_unchanged_captured_module_alone(outer, inner):
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    OUTER[outer](FUNCTIONAL[inner](m))(X)
    assert _concrete(m)


def test_functional_mode_refuses_changing_a_captured_variable():
    count = nnx.BatchStat(jnp.zeros(()))

    def bump(c, x):
        c[...] += 1
        return x.sum()

    with pytest.raises(TraceContextError, match="different trace level"):
        jax.jit(lambda x: nnx.jit(bump, graph_updates=False)(count, x))(X)
    assert not isinstance(count.get_raw_value(), jax.core.Tracer) and float(count[...]) == 0


def test_objects_created_inside_are_lifted_as_before():
    @jax.jit
    def f(x):
        m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        y = nnx.jit(lambda m, x: m(x))(m, x)
        g = nnx.grad(lambda m: m(x).sum())(m)
        return y, g.kernel[...]

    y, g = f(X)
    assert y.shape == (1, 2) and g.shape == (2, 2)


@pytest.mark.parametrize("graph", [True, False])
def test_functional_cond_inside_vmap_keeps_the_branch_update(graph):
    # only one branch changes the Variable: the write-back must not follow the branch
    # traced last (which left it alone)
    class Env(nnx.Pytree):
        def __init__(self):
            self.index = nnx.Variable(jnp.arange(4))
            self.step = nnx.Variable(jnp.zeros((4,), jnp.uint32))

    env = Env()

    @nnx.vmap(in_axes=0, out_axes=None, graph=graph, graph_updates=False)
    def f(env):
        def bump(env):
            env.step[...] += 1

        nnx.cond(env.index % 2 == 0, bump, lambda env: None, env, graph=graph,
                 graph_updates=False)

    f(env)
    assert env.step[...].tolist() == [1, 0, 1, 0]


def test_functional_cond_refuses_a_captured_variable_either_branch_changes():
    count = nnx.BatchStat(jnp.zeros(()))

    def bump(c):
        c[...] += 1

    def run(x):
        nnx.cond(x.sum() > 0, bump, lambda c: None, count, graph_updates=False)
        return x

    with pytest.raises(TraceContextError, match="different trace level"):
        jax.jit(run)(X)
    assert float(count[...]) == 0
