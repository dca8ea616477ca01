"""Small public pieces of flaxen.core that Flax exposes: tracers, partial_eval, variables,
lift's helpers, DenyList ordering, Scope equality and child_rng_token."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import errors
from flaxen.core import (
    DenyList,
    check_trace_level,
    current_trace,
    lift,
    partial_eval,
    scope,
    tracers,
    variables,
)


def test_current_trace_differs_inside_a_transform():
    outer = current_trace()
    seen = []
    jax.jit(lambda x: seen.append(current_trace() == outer) or x)(1.0)
    assert seen == [False]
    assert current_trace() == outer
    assert check_trace_level(outer) is None
    assert tracers.current_trace is current_trace


def test_partial_eval_lazy_init_runs_only_what_outputs_need():
    f = partial_eval.lazy_init(lambda x: (jnp.zeros(x.shape[-1]), 2))
    out, two = f(jax.ShapeDtypeStruct((5, 3), jnp.float32))
    assert out.shape == (3,) and two == 2
    g = partial_eval.lazy_init(lambda x: x + 1)
    with pytest.raises(errors.LazyInitError):
        g(jax.ShapeDtypeStruct((2,), jnp.float32))


def test_variables_module_exposes_variable():
    assert variables.Variable is scope.Variable


def test_transform_context_is_a_stack_per_thread():
    ctx = lift.TransformContext[int]()
    with pytest.raises(IndexError):
        ctx.get()
    with ctx.push(1):
        with ctx.push(2):
            assert ctx.get() == 2
        assert ctx.get() == 1
    assert ctx.stack == []


def test_counts_holder_arithmetic():
    a = lift.CountsHolder.make({"params": 3, "sub": {"dropout": 2}})
    b = lift.CountsHolder.make({"params": 1})
    assert a.sub(b).unflat() == {"params": 2, "sub": {"dropout": 2}}
    assert a.add(b).flat_d == {("params",): 4, ("sub", "dropout"): 2}


def test_set_from_dict_merges_in_place_and_id_fn():
    d = {"a": {"x": 1}}
    lift.set_from_dict(d, {"a": {"y": 2}, "b": 3})
    assert d == {"a": {"x": 1, "y": 2}, "b": 3}
    assert lift.id_fn(d) is d
    assert lift.axes_scan.broadcast is not None and lift.meta.unbox is not None


def test_deny_list_sorts_after_names():
    items = [DenyList("b"), "z", DenyList("a"), "a"]
    assert sorted(items) == ["a", "z", DenyList("a"), DenyList("b")]
    assert DenyList("x") > "y" and not DenyList("x") < "y"
    with pytest.raises(TypeError):
        DenyList("x") < 3  # noqa: B015


def test_scope_equality_follows_store_path_and_counters():
    root = scope.bind({}, rngs={"params": jax.random.key(0)}, mutable=True)
    same = scope.Scope.__new__(scope.Scope)
    same.__dict__.update(root.__dict__)
    assert same == root and hash(same) == hash(root)
    child = root.push("a")
    assert child != root
    assert len({root, same, child}) == 2
    assert root != "not a scope"


def test_child_rng_token_and_settable_variable():
    assert repr(scope.child_rng_token) == "child_rng_token"
    root = scope.bind({}, mutable=True)
    v = root.variable("stats", "n", lambda: 0)
    v.tag = "mine"
    assert v.tag == "mine"
