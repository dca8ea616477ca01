"""Mistakes Flax reports with a built-in exception class: flaxen's error for each is a
flaxen error class that is that built-in class too, so ``except`` clauses written for Flax
keep catching it."""

from __future__ import annotations

import re

import jax.numpy as jnp
import pytest

from flaxen import errors, nnx


class _Holder(nnx.Module):
    def __init__(self) -> None:
        self.a = nnx.Param(jnp.ones(2))


def test_cond_branches_that_leave_different_state_raise_a_type_error():
    def grows(m):
        m.b = nnx.Param(jnp.ones(1))
        return m.a[...]

    with pytest.raises(TypeError) as info:
        nnx.cond(True, grows, lambda m: m.a[...], _Holder())
    assert isinstance(info.value, errors.NNXStructureChangeError)


def test_a_loop_whose_state_changes_structure_raises_a_type_error():
    def grows(i, m):
        setattr(m, f"v{i}", nnx.Param(jnp.ones(1)))
        return m

    with pytest.raises(TypeError, match="changed its structure"):
        nnx.fori_loop(0, 2, grows, _Holder())


def test_custom_vjp_called_before_defvjp_is_a_value_error():
    f = nnx.custom_vjp(lambda x: x)
    with pytest.raises(ValueError, match="defvjp"):
        f(jnp.ones(1))
    with pytest.raises(AttributeError):  # what jax.custom_vjp raises
        f(jnp.ones(1))


def test_augmented_assignment_on_a_variable_is_refused():
    v = nnx.Param(jnp.ones(2))
    for op in ("+=", "-=", "*=", "/=", "**=", "|="):
        with pytest.raises(NotImplementedError, match=re.escape(f"v[...] {op} x")):
            exec(f"v {op} 1", {"v": v})
    v[...] += 1
    assert v[...].tolist() == [2.0, 2.0]


class _Sows(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(2))

    def __call__(self, x):
        self.sow(nnx.Intermediate, "h", x.sum())  # adds a Variable inside the loop body
        return x * self.w[...]


def test_a_sow_inside_a_loop_body_is_a_type_error_naming_the_structure():
    with pytest.raises(TypeError, match="changed its structure"):
        nnx.fori_loop(0, 2, lambda i, c: (c[0], c[0](c[1])), (_Sows(), jnp.ones(2)))

    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def step(carry, x):
        m, h = carry
        return (m, m(h)), x

    with pytest.raises(TypeError):
        step((_Sows(), jnp.ones(2)), jnp.ones(3))
