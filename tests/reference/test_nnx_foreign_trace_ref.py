"""Differential test: an NNX transform inside a JAX transform, on a module created outside
it (captured by closure): flaxen.nnx refuses exactly where flax.nnx 0.12.8 does, with an
error that is an instance of the class Flax raises, and never leaves a tracer behind."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import errors, nnx

fnnx = pytest.importorskip("flax.nnx")
ferrors = pytest.importorskip("flax.errors")

X = jnp.ones((1, 2))
OUTER = {"jax.jit": jax.jit, "jax.grad": jax.grad}


def _inner(lib, name, functional):
    kw = {"graph_updates": False} if functional else {}
    return {
        "jit": lambda m: (lambda x: lib.jit(lambda m, x: m(x), **kw)(m, x).sum()),
        "remat": lambda m: (lambda x: lib.remat(lambda m, x: m(x), **kw)(m, x).sum()),
        "vmap": lambda m: (lambda x: lib.vmap(lambda m, x: m(x), in_axes=(None, 0), **kw)(
            m, x[None]).sum()),
    }[name]


def _outcome(lib, outer, name, functional):
    m = lib.Linear(2, 2, rngs=lib.Rngs(0))
    try:
        OUTER[outer](_inner(lib, name, functional)(m))(X)
    except (ValueError, ferrors.TraceContextError, errors.TraceContextError) as e:
        kind = "value" if isinstance(e, ValueError) else "trace"
        return "refused", kind
    return "ran", None


@pytest.mark.parametrize("functional", [False, True], ids=["graph", "functional"])
@pytest.mark.parametrize("name", ["jit", "remat", "vmap"])
@pytest.mark.parametrize("outer", list(OUTER))
def test_refused_where_flax_refuses(outer, name, functional):
    ours, theirs = _outcome(nnx, outer, name, functional), _outcome(fnnx, outer, name,
                                                                     functional)
    assert ours[0] == theirs[0]
    if theirs[0] == "refused" and theirs[1] == "value":
        assert ours[1] == "value"  # flaxen's error is also a ValueError
