"""The trace a graph object records is JAX's current one, under every kind of trace."""

import jax
import jax.numpy as jnp
import pytest
from jax._src import core

from flaxen import nnx
from flaxen.errors import TraceContextError
from flaxen.nnx import _trace


def test_current_trace_is_jax_current_trace_under_transforms():
    seen = []

    def f(x):
        seen.append(_trace.current_trace() is core.trace_ctx.trace)
        return x * 2

    assert _trace.current_trace() is core.trace_ctx.trace
    jax.jit(f)(1.0)
    jax.grad(f)(1.0)
    jax.vmap(f)(jnp.ones(2))
    assert seen == [True, True, True]


def test_module_made_outside_refuses_writes_inside_jit():
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    @jax.jit
    def f(x):
        model.kernel = nnx.Param(x)  # a tracer stored on an object of the outer trace
        return x

    with pytest.raises(TraceContextError):
        f(jnp.ones((2, 2)))
