"""Names of Flax 0.12.8's Linen modules that flaxen adds for code written against it:
recurrent's DenseParams/RNNBase, an OptimizedLSTMCell that is not an LSTMCell, BatchApply's
helpers, partitioning.core_remat_static, the cached lifted transforms, fork_rngs,
clean_clone, kw_only_dataclasses' extra_fields and the typing aliases."""

import dataclasses
import inspect
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen import errors
from flaxen.core import lift
from flaxen.linen import batch_apply, kw_only_dataclasses, partitioning, recurrent, transforms


def test_optimized_lstm_is_not_an_lstm_cell_but_matches_it():
    assert not issubclass(nn.OptimizedLSTMCell, nn.LSTMCell)
    assert issubclass(nn.OptimizedLSTMCell, nn.RNNCellBase)
    assert [f.name for f in dataclasses.fields(nn.OptimizedLSTMCell)] == [
        f.name for f in dataclasses.fields(nn.LSTMCell)]
    x = jnp.ones((2, 3))
    cell, fused = nn.LSTMCell(4), nn.OptimizedLSTMCell(4)
    carry = fused.initialize_carry(jax.random.key(0), x.shape)
    assert [c.shape for c in carry] == [(2, 4), (2, 4)]
    v = cell.init(jax.random.key(1), carry, x)
    (c1, h1), _ = cell.apply(v, carry, x)
    (c2, h2), _ = fused.apply(v, carry, x)  # same parameter tree, same numbers
    np.testing.assert_allclose(h1, h2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c1, c2, rtol=1e-5, atol=1e-6)
    assert fused.num_feature_axes == 1


def test_dense_params_creates_dense_shaped_parameters():
    (k, b), v = recurrent.DenseParams(5).init_with_output(jax.random.key(0), jnp.ones((2, 3)))
    assert k.shape == (3, 5) and b.shape == (5,)
    assert set(v["params"]) == {"kernel", "bias"}
    (k, b), _ = recurrent.DenseParams(5, use_bias=False).init_with_output(
        jax.random.key(0), jnp.ones((3,)))
    assert b is None


def test_rnn_base_is_a_protocol_rnn_satisfies():
    assert typing.Protocol in recurrent.RNNBase.__mro__ or recurrent.RNNBase._is_protocol
    params = inspect.signature(recurrent.RNNBase.__call__).parameters
    assert list(params)[:2] == ["self", "inputs"]
    assert set(params) <= set(inspect.signature(nn.RNN.__call__).parameters)
    with pytest.raises(TypeError):
        recurrent.RNNBase()


def test_rnn_cell_size_is_accepted_but_not_a_field():
    positional = [f.name for f in dataclasses.fields(nn.RNN) if not f.kw_only]
    assert "cell_size" not in [f.name for f in dataclasses.fields(nn.RNN)]
    assert positional[-2:] == ["parent", "name"]
    assert "cell_size" not in repr(nn.RNN(nn.SimpleCell(3)))
    assert "cell_size" not in inspect.signature(nn.RNN).parameters
    layer = nn.RNN(nn.SimpleCell(3), cell_size=None)
    x = jnp.ones((2, 4, 2))
    assert layer.apply(layer.init(jax.random.key(0), x), x).shape == (2, 4, 3)


def test_batch_apply_helpers():
    a = np.ones((2, 3, 4))
    assert batch_apply.ndim_at_least(a, 3) and not batch_apply.ndim_at_least([1.0], 2)
    assert batch_apply.arbitrary_mergeable_leaf(3, (np.ones(2),), {"x": a}) is a
    assert batch_apply.arbitrary_mergeable_leaf(4, (a,), {}) is None
    merged = batch_apply.merge_leading_dims(a, 2)
    assert merged.shape == (6, 4)
    assert batch_apply.merge_leading_dims(np.ones(3), 2).shape == (3,)
    assert batch_apply.split_leading_dim(merged, (2, 3)).shape == (2, 3, 4)


def test_core_remat_static_passes_static_args_as_python_values():
    seen = []

    def body(scope, x, n):
        seen.append(type(n))
        return x * n

    from flaxen.core import init
    y, _ = init(partitioning.core_remat_static(body, static_argnums=(1,)))(
        jax.random.key(0), jnp.ones(2), 3)
    np.testing.assert_allclose(y, [3.0, 3.0])
    assert seen and all(t is int for t in seen)


class Counter(nn.Module):
    @nn.compact
    def __call__(self, x):
        Counter.traces += 1
        return nn.Dense(2)(x)


Counter.traces = 0


def test_lift_transform_cached_reuses_the_trace_for_equal_modules():
    Jitted = transforms.lift_transform_cached(lift.jit, Counter)
    x = jnp.ones((1, 3))
    v = Jitted().init(jax.random.key(0), x)
    Counter.traces = 0
    y1 = Jitted().apply(v, x)
    y2 = Jitted().apply(v, x + 1)
    assert Counter.traces == 1
    np.testing.assert_allclose(y1, Counter().apply(v, x), rtol=1e-6)
    assert not np.allclose(y1, y2)
    with pytest.raises(errors.TransformTargetError):
        transforms.lift_transform_cached(lift.jit, Counter())
    with pytest.raises(TypeError, match="keyword arguments only"):
        transforms.lift_transform_cached(lift.jit, Counter, (1,))


def test_decorator_lift_transform_cached_on_a_method():
    class M(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(x) * 2

    M.__call__ = transforms.decorator_lift_transform_cached(lift.jit, M.__call__)
    x = jnp.ones((1, 3))
    v = M().init(jax.random.key(0), x)
    assert M().apply(v, x).shape == (1, 2)
    assert M.__call__.method_handler_wrapped is True


def test_fork_rngs_gives_fresh_streams_inside_and_advances_outside_once():
    class M(nn.Module):
        def __call__(self):
            with transforms.fork_rngs(self):
                inner = self.make_rng("dropout")
            return inner, self.make_rng("dropout")

    class Plain(nn.Module):
        def __call__(self):
            return [self.make_rng("dropout") for _ in range(3)]

    rngs = {"dropout": jax.random.key(0)}
    inner, after = M().apply({}, rngs=rngs)
    draws = Plain().apply({}, rngs=rngs)
    data = jax.random.key_data
    assert not any(np.array_equal(data(inner), data(d)) for d in draws)
    # the fork drew one key from the stream and the inner draw advanced its counter
    np.testing.assert_array_equal(data(after), data(draws[2]))
    with transforms.fork_rngs(nn.Dense(2)):  # unbound: nothing to fork
        pass


def test_clean_clone_detaches_module_and_children():
    class Outer(nn.Module):
        def setup(self):
            self.inner = nn.Dense(2)

        def __call__(self, x):
            return self.inner(x)

    x = jnp.ones((1, 3))
    v = Outer().init(jax.random.key(0), x)
    bound = Outer().bind(v)
    inner = bound.inner
    assert inner.scope is not None
    out = transforms.clean_clone(bound)
    assert out is bound and bound.scope is None and inner.scope is None
    assert transforms.clean_clone(5) == 5


def test_placeholders_have_replace():
    p = transforms.VariablePlaceholder("params", "w", True, 0)
    assert p.replace(name="b").name == "b" and p.name == "w"


def test_kw_only_dataclasses_extra_fields_and_field_kwargs():
    @kw_only_dataclasses.dataclass(extra_fields=[
        ("tag", str, kw_only_dataclasses.field(default="t", kw_only=True))])
    class Point:
        x: int

    p = Point(1, tag="u")
    assert (p.x, p.tag) == (1, "u")
    with pytest.raises(TypeError):
        Point(1, "u")  # marked keyword-only: refused by position
    with pytest.raises(ValueError, match="extra_fields"):
        kw_only_dataclasses.dataclass(extra_fields=[("bad", int, 3)])(type("X", (), {}))
    f = kw_only_dataclasses.field(default=2, repr=False, metadata={"a": 1})
    assert f.repr is False and f.metadata["a"] == 1


def test_typing_aliases_at_flax_paths():
    assert typing.get_origin(nn.initializers.Initializer) is typing.Union
    assert nn.linear.PRNGKey is jax.Array and nn.normalization.PRNGKey is jax.Array
    assert nn.normalization.map_variables is nn.map_variables
    assert nn.normalization.canonicalize_dtype is nn.dtypes.canonicalize_dtype
    assert nn.normalization.field is dataclasses.field
    assert nn.dtypes.T.__bound__ is tuple
    assert transforms.TransformTarget is not None and transforms.ModuleT.__bound__ is nn.Module
    assert nn.attention.Shape == tuple[int, ...]
    assert isinstance(partitioning.AxisMetadata(("a",)), partitioning.AxisMetadata)
    assert jax.tree_util.tree_leaves(partitioning.AxisMetadata(("a",))) == []


def test_names_flax_modules_import_are_reachable_at_the_same_paths():
    from flaxen import core, ids, traverse_util
    from flaxen.core import lift as core_lift
    from flaxen.core import scope as core_scope
    from flaxen.linen import module as nn_module
    from flaxen.linen import summary

    assert nn_module.DenyList is core.DenyList and nn_module.FlaxId is ids.FlaxId
    assert nn_module.union_filters(["a"], ["b"]) == {"a", "b"}
    assert transforms.wrap_method_once is nn_module.wrap_method_once
    assert transforms.linen_module is nn_module and summary.module_lib is nn_module
    assert recurrent.Dense is nn.Dense and recurrent.nowrap is nn.nowrap
    assert partitioning.flatten_dict is traverse_util.flatten_dict
    assert core_lift.freeze is core.freeze and core_scope.uuid is ids.uuid
    assert nn.attention.LayerNorm is nn.LayerNorm
