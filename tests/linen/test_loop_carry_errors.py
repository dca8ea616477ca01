"""A lifted loop whose carried variables change structure in the body raises
CarryStructureError, which is a TypeError as JAX's loops raise, and says how to fix it."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import errors
from flaxen import linen as nn


class SowingBody(nn.Module):
    @nn.compact
    def __call__(self, c, x):
        self.sow("intermediates", "h", x)  # creates a carried variable inside the body
        return c + x, x


def test_scan_carry_created_in_the_body():
    scan = nn.scan(SowingBody, variable_carry="intermediates", split_rngs={"params": False},
                   variable_broadcast="params")
    variables = scan().init(jax.random.key(0), jnp.zeros(()), jnp.arange(3.0))
    with pytest.raises(TypeError, match="changed structure") as info:
        scan().apply(variables, jnp.zeros(()), jnp.arange(3.0), mutable=["intermediates"])
    assert isinstance(info.value, errors.CarryStructureError)
    assert "before the scan" in str(info.value)


class Counter(nn.Module):
    @nn.compact
    def __call__(self, x):
        def cond(mdl, c):
            return c[0] < 3

        def body(mdl, c):
            if mdl.is_mutable_collection("state"):
                mdl.variable("state", f"n{0}", jnp.zeros, ())  # new in the body
            return c[0] + 1, c[1]

        return nn.while_loop(cond, body, self, (0, x), carry_variables="state")


def test_while_loop_carry_created_in_the_body():
    with pytest.raises(TypeError, match="changed structure") as info:
        Counter().init(jax.random.key(0), jnp.ones(()), mutable=True)
    assert isinstance(info.value, ValueError)
