"""Flax 0.12.8's private helpers and typing aliases that user code imports from flax.nnx's
modules (custom norm layers, hand-written convolutions, home-made transforms): present in
flaxen.nnx under the same paths and doing what the layers that use them do."""

from __future__ import annotations

import functools
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx
from flaxen import typing as ftyping
from flaxen.nnx import filterlib, graphlib, module, spmd, statelib
from flaxen.nnx.bridge import variables as bridge_variables
from flaxen.nnx.nn import attention, dtypes, linear, normalization, recurrent
from flaxen.nnx.transforms import compilation, iteration, transforms

# -- typing aliases: the very objects of flaxen.typing --------------------------------------------

ALIASES = [
    (linear, "ConvGeneralDilatedT"), (linear, "EinsumT"), (linear, "LaxPadding"),
    (linear, "PaddingLike"), (graphlib, "HashableMapping"), (graphlib, "PathParts"),
    (filterlib, "PathParts"), (statelib, "PathParts"), (module, "PathParts"), (module, "Path"),
    (compilation, "PathParts"), (attention, "DotGeneralT"), (dtypes, "Dtype"),
    (spmd, "Sharding"), (iteration, "Leaf"), (transforms, "Leaf"),
    (bridge_variables, "LogicalNames"),
]


@pytest.mark.parametrize("mod,name", ALIASES, ids=lambda v: getattr(v, "__name__", v))
def test_typing_alias_is_flaxen_typing_object(mod, name):
    assert getattr(mod, name) is getattr(ftyping, name)


def test_graph_is_graphlib_and_has_the_typing_names():
    import flaxen.nnx.graph as graph

    assert graph.HashableMapping is ftyping.HashableMapping
    assert graph.PathParts is ftyping.PathParts
    ns: dict = {}
    exec("from flaxen.nnx.graph import *", ns)
    assert {"HashableMapping", "PathParts", "vars_as", "with_vars"} <= set(ns)


def test_hashable_mapping_from_graph_hashes_by_content():
    m = graphlib.HashableMapping({"b": 1, 0: 2})
    assert hash(m) == hash(graphlib.HashableMapping({0: 2, "b": 1}))
    assert m == graphlib.HashableMapping({0: 2, "b": 1}) and m != {"b": 1, 0: 2}
    assert dict(m) == {"b": 1, 0: 2}


# -- vars_as: the deprecated name of with_vars ----------------------------------------------------


def test_vars_as_warns_and_runs_with_vars():
    import flaxen.nnx.graph as graph

    assert nnx.vars_as is graphlib.vars_as is graph.vars_as
    assert inspect.signature(nnx.vars_as) == inspect.signature(nnx.with_vars)
    tree = [nnx.Variable(1.0), nnx.Param(2.0)]
    with pytest.warns(DeprecationWarning, match="Use .*with_vars instead"):
        out = nnx.vars_as(tree, ref=True, only=nnx.Param)
    assert [v.ref for v in out] == [False, True]
    assert [v.ref for v in tree] == [False, False]  # a copy: the input is unchanged
    assert [float(v.get_value()) for v in out] == [1.0, 2.0]


def test_with_vars_itself_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nnx.with_vars([nnx.Param(1.0)], ref=True)


# -- nn.linear._conv_dimension_numbers ------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 7, 3), (2, 6, 5, 3), (1, 4, 4, 4, 2)])
def test_conv_dimension_numbers_are_channels_last(shape):
    dn = linear._conv_dimension_numbers(shape)
    n = len(shape)
    assert dn.lhs_spec == (0, n - 1, *range(1, n - 1)) == dn.out_spec
    assert dn.rhs_spec == (n - 1, n - 2, *range(n - 2))


def test_conv_dimension_numbers_reproduce_nnx_conv():
    conv = nnx.Conv(3, 4, (3, 3), padding="VALID", use_bias=False, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 8, 8, 3))
    y = jax.lax.conv_general_dilated(
        x, conv.kernel[...], (1, 1), "VALID",
        dimension_numbers=linear._conv_dimension_numbers(x.shape))
    np.testing.assert_allclose(y, conv(x), rtol=1e-6, atol=1e-6)


# -- nn.normalization: _canonicalize_axes, _compute_stats, _normalize -----------------------------


def test_canonicalize_axes():
    assert normalization._canonicalize_axes(3, -1) == (2,)
    assert normalization._canonicalize_axes(4, (-1, 3, 0, 0)) == (0, 3)
    assert normalization._canonicalize_axes(2, [1]) == (1,)


def test_compute_stats_values_and_float32():
    x = jax.random.normal(jax.random.key(0), (4, 3, 5))
    mean, var = normalization._compute_stats(x, (0, 1), None)
    np.testing.assert_allclose(mean, np.mean(x, (0, 1)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, np.var(x, (0, 1)), rtol=1e-5, atol=1e-6)
    slow = normalization._compute_stats(x, (0, 1), None, use_fast_variance=False)
    np.testing.assert_allclose(slow[1], np.var(x, (0, 1)), rtol=1e-5, atol=1e-6)
    zero, sq = normalization._compute_stats(x, -1, None, use_mean=False)
    assert not np.any(zero) and zero.shape == (4, 3)
    np.testing.assert_allclose(sq, np.mean(np.square(x), -1), rtol=1e-5)
    half = normalization._compute_stats(x.astype(jnp.bfloat16), -1, None)
    assert all(s.dtype == jnp.float32 for s in half)


def test_compute_stats_mask_and_axis_name():
    x = jnp.arange(8.0).reshape(2, 4)
    mask = jnp.array([[True, True, False, False]] * 2)
    mean, var = normalization._compute_stats(x, 1, None, mask=mask)
    np.testing.assert_allclose(mean, [0.5, 4.5])
    np.testing.assert_allclose(var, [0.25, 0.25])
    pmapped = jax.vmap(lambda r: normalization._compute_stats(r, 0, None, axis_name="b"),
                       axis_name="b")(x)
    np.testing.assert_allclose(pmapped[0], [3.5, 3.5])  # averaged over both rows


def test_normalize_matches_layer_norm_and_accepts_kept_axes():
    ln = nnx.LayerNorm(5, rngs=nnx.Rngs(0))
    ln.scale[...] = jnp.arange(1.0, 6.0)
    ln.bias[...] = jnp.full((5,), 0.5)
    x = jax.random.normal(jax.random.key(2), (3, 5))
    mean, var = normalization._compute_stats(x, -1, None)
    args = (ln.scale[...], ln.bias[...], -1, -1, None, ln.epsilon)
    y = normalization._normalize(x, mean, var, *args)
    np.testing.assert_allclose(y, ln(x), rtol=1e-6, atol=1e-6)
    y_kept = normalization._normalize(x, mean[:, None], var[:, None], *args)
    np.testing.assert_allclose(y_kept, y)
    bare = normalization._normalize(x, mean, var, None, None, 1, 1, jnp.bfloat16, 1e-6)
    assert bare.dtype == jnp.bfloat16


def test_a_custom_norm_layer_built_on_the_helpers_matches_batch_norm():
    class MyBatchNorm(nnx.Module):  # the pattern of a user's BatchRenorm
        def __init__(self, n: int, rngs: nnx.Rngs):
            self.scale = nnx.Param(jnp.linspace(0.5, 2.0, n))
            self.bias = nnx.Param(jnp.linspace(-1.0, 1.0, n))

        def __call__(self, x):
            feature_axes = normalization._canonicalize_axes(x.ndim, -1)
            reduction = tuple(i for i in range(x.ndim) if i not in feature_axes)
            mean, var = normalization._compute_stats(x, reduction, None)
            return normalization._normalize(x, mean, var, self.scale[...], self.bias[...],
                                            reduction, feature_axes, None, 1e-5)

    bn = nnx.BatchNorm(4, rngs=nnx.Rngs(0))
    bn.scale[...] = jnp.linspace(0.5, 2.0, 4)
    bn.bias[...] = jnp.linspace(-1.0, 1.0, 4)
    x = jax.random.normal(jax.random.key(3), (6, 2, 4))
    np.testing.assert_allclose(MyBatchNorm(4, nnx.Rngs(0))(x), bn(x), rtol=1e-6, atol=1e-6)


# -- nn.recurrent: _select_last_carry, _concatenate -----------------------------------------------


def test_select_last_carry_picks_each_entry_last_valid_step():
    steps = jnp.arange(5.0)[:, None, None] * jnp.ones((5, 3, 2))  # (time, batch, features)
    carries = (steps, steps * 10)
    out = recurrent._select_last_carry(carries, jnp.array([1, 5, 3]))
    np.testing.assert_array_equal(out[0][:, 0], [0.0, 4.0, 2.0])
    np.testing.assert_array_equal(out[1][:, 1], [0.0, 40.0, 20.0])


def test_concatenate_is_bidirectional_default_merge():
    a, b = jnp.ones((2, 3)), jnp.zeros((2, 1))
    np.testing.assert_array_equal(recurrent._concatenate(a, b), jnp.concatenate([a, b], -1))
    default = inspect.signature(recurrent.Bidirectional.__init__).parameters["merge_fn"].default
    assert default is recurrent._concatenate


def test_rnn_seq_lengths_carry_equals_select_last_carry():
    cell = nnx.SimpleCell(2, 3, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(4), (2, 5, 2))  # batch-major
    lengths = jnp.array([2, 4])
    h = jnp.zeros((2, 3))
    carry, _ = nnx.RNN(cell, return_carry=True)(x, initial_carry=h, seq_lengths=lengths)
    outs = []
    for t in range(5):
        h, _ = cell(h, x[:, t])
        outs.append(h)
    expected = recurrent._select_last_carry(jnp.stack(outs), lengths)
    np.testing.assert_allclose(carry, expected, rtol=1e-6, atol=1e-6)


# -- transforms.transforms._resolve_bound_callable ------------------------------------------------


class _Counter(nnx.Module):
    def __init__(self):
        self.n = 1

    def add(self, x, y=0):
        return self.n + x + y


def test_resolve_bound_callable_unbinds_module_methods():
    m = _Counter()
    fn, owner, was_bound = transforms._resolve_bound_callable(m.add)
    assert (owner, was_bound) == (m, True) and fn is _Counter.add
    fn, owner, was_bound = transforms._resolve_bound_callable(
        functools.partial(functools.partial(m.add, y=3), x=2))
    assert (owner, was_bound) == (m, True)
    assert isinstance(fn, functools.partial) and fn.func is _Counter.add
    assert fn(m) == 6
    # positional partial arguments stay first: the module then has to come after them
    fn, _, _ = transforms._resolve_bound_callable(functools.partial(m.add, 2))
    assert (fn.func, fn.args, fn.keywords) == (_Counter.add, (2,), {})


def test_resolve_bound_callable_leaves_other_callables():
    def f(x):
        return x

    assert transforms._resolve_bound_callable(f) == (f, None, False)

    class Plain:
        def g(self):
            return 1

    p = Plain()
    fn, owner, was_bound = transforms._resolve_bound_callable(p.g)
    assert (fn, owner, was_bound) == (p.g, None, False)
    part = functools.partial(f, 1)
    fn, owner, was_bound = transforms._resolve_bound_callable(part)
    assert (owner, was_bound) == (None, False) and fn is not part and fn() == 1


def test_norm_math_private_helpers():
    import jax.numpy as jnp
    import numpy as np

    from flaxen.nnx.nn import normalization

    z = jnp.array([3 + 4j, -1.0])
    np.testing.assert_allclose(normalization._abs_sq(z), [25.0, 1.0])
    v = normalization._l2_normalize(jnp.array([3.0, 4.0]), eps=0.0)
    np.testing.assert_allclose(v, [0.6, 0.8], rtol=1e-6)
