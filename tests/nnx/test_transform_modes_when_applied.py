"""A transform's ``graph``/``graph_updates`` defaults are read when it is applied, as in Flax:
a ``set_graph_mode``/``set_graph_updates`` context in force at call time does not change an
already built ``nnx.jit``, ``grad``, ``value_and_grad`` or ``checkify``. Also: a custom_vjp
called before ``defvjp`` raises an AttributeError, as ``jax.custom_vjp`` does."""

import jax.numpy as jnp
import pytest

from flaxen import nnx


class _M(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(2))


def _adds_attribute(m, x):
    m.extra = nnx.Param(jnp.zeros(1))  # a structural change: kept only with graph updates
    return (m.w[...] * x).sum()


_TRANSFORMS = {
    "jit": nnx.jit,
    "grad": nnx.grad,
    "value_and_grad": nnx.value_and_grad,
    "checkify": nnx.checkify,
}


@pytest.mark.parametrize("context", [nnx.set_graph_updates, nnx.set_graph_mode])
@pytest.mark.parametrize("name", sorted(_TRANSFORMS))
def test_modes_in_force_when_applied_decide(name, context):
    with context(False):
        functional = _TRANSFORMS[name](_adds_attribute)
    graph = _TRANSFORMS[name](_adds_attribute)

    m = _M()
    functional(m, jnp.ones(2))  # called outside the context: still functional
    assert not hasattr(m, "extra")

    m = _M()
    with context(False):  # called inside the context: still propagates
        graph(m, jnp.ones(2))
    assert isinstance(m.extra, nnx.Param)


def test_decorator_with_arguments_reads_modes_when_applied():
    with nnx.set_graph_updates(False):
        deco = nnx.jit(static_argnums=())
    f = deco(_adds_attribute)
    m = _M()
    f(m, jnp.ones(2))
    assert not hasattr(m, "extra")


def test_custom_vjp_called_before_defvjp_raises_attribute_error():
    @nnx.custom_vjp
    def f(m, x):
        return (m.w[...] * x).sum()

    with pytest.raises(AttributeError, match="No VJP defined for custom_vjp function f"):
        f(_M(), jnp.ones(2))
    with pytest.raises(AttributeError, match="defvjp"):
        nnx.custom_vjp(f.fun, graph_updates=False)(_M(), jnp.ones(2))
