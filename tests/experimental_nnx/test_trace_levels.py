"""Trace levels per face: Flax 0.8.3's objects may be mutated under ``jax.grad``/``jax.vmap`` of
their own level (as 0.8.3 allowed); today's raise ``TraceContextError`` as Flax 0.12.8 does."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import TraceContextError
from flaxen.experimental import nnx as old


def test_083_dict_mutable_under_grad_of_its_level():
    m = old.Dict(a=old.Param(1.0))

    @jax.grad
    def f(_):
        m.a = 2.0
        return 1.0

    f(1.0)
    assert m.a == 2.0


def test_083_rng_stream_usable_under_vmap_of_its_level():
    rngs = old.Rngs(dropout=0)
    keys = jax.vmap(lambda _: jax.random.key_data(rngs.dropout()))(jnp.arange(2))
    assert keys.shape[0] == 2


def test_today_dict_raises_under_grad():
    m = nnx.Dict(a=nnx.Param(1.0))

    @jax.grad
    def f(_):
        m.a = 2.0
        return 1.0

    with pytest.raises(TraceContextError):
        f(1.0)


def test_083_objects_still_refuse_jit_closures():
    m = old.Dict(a=old.Param(1.0))

    @jax.jit
    def f(x):
        m.a = x
        return x

    with pytest.raises(TraceContextError):
        f(1.0)
