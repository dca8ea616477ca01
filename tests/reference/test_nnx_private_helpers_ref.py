"""Differential test: the private helpers and typing aliases that user code imports from
flax.nnx's modules (``_compute_stats``, ``_normalize``, ``_conv_dimension_numbers``,
``_select_last_carry``, ``_resolve_bound_callable``, ``vars_as``...), flaxen.nnx next to
flax.nnx 0.12.8: same signatures, same results for the same inputs."""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("flax")

import flax.typing  # noqa: E402

import flaxen.typing  # noqa: E402
from flaxen import nnx  # noqa: E402

fnnx = pytest.importorskip("flax.nnx")

HELPERS = [
    ("nn.linear", "_conv_dimension_numbers"),
    ("nn.normalization", "_canonicalize_axes"),
    ("nn.normalization", "_compute_stats"),
    ("nn.normalization", "_normalize"),
    ("nn.recurrent", "_select_last_carry"),
    ("nn.recurrent", "_concatenate"),
    ("transforms.transforms", "_resolve_bound_callable"),
    ("graph", "vars_as"),
    ("graphlib", "vars_as"),
]

ALIASES = [
    ("nn.linear", "ConvGeneralDilatedT"), ("nn.linear", "EinsumT"), ("nn.linear", "LaxPadding"),
    ("nn.linear", "PaddingLike"), ("graph", "HashableMapping"), ("graph", "PathParts"),
    ("graphlib", "HashableMapping"), ("graphlib", "PathParts"), ("filterlib", "PathParts"),
    ("statelib", "PathParts"), ("module", "PathParts"), ("module", "Path"),
    ("transforms.compilation", "PathParts"), ("nn.attention", "DotGeneralT"),
    ("nn.dtypes", "Dtype"), ("spmd", "Sharding"), ("transforms.iteration", "Leaf"),
    ("transforms.transforms", "Leaf"), ("bridge.variables", "LogicalNames"),
]


def _pair(path: str, name: str):
    theirs = getattr(importlib.import_module(f"flax.nnx.{path}"), name)
    ours = getattr(importlib.import_module(f"flaxen.nnx.{path}"), name)
    return theirs, ours


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("path,name", HELPERS, ids=lambda v: v)
def test_helper_signatures_match(path, name):
    theirs, ours = _pair(path, name)
    assert _params(ours) == _params(theirs)


@pytest.mark.parametrize("path,name", ALIASES, ids=lambda v: v)
def test_typing_alias_is_the_typing_modules_object(path, name):
    theirs, ours = _pair(path, name)
    assert theirs is getattr(flax.typing, name)
    assert ours is getattr(flaxen.typing, name)


@pytest.mark.parametrize("shape", [(3, 5), (2, 7, 3), (2, 6, 5, 3), (1, 4, 4, 4, 2)])
def test_conv_dimension_numbers(shape):
    theirs, ours = _pair("nn.linear", "_conv_dimension_numbers")
    assert ours(shape) == theirs(shape)


@pytest.mark.parametrize("rank,axes", [(3, (-1, 0, 2)), (4, -1), (2, [1, 1]), (10, (9, 1)),
                                       (12, (11, 3, -9)), (20, (17, 1, 9)), (5, ())])
def test_canonicalize_axes(rank, axes):
    theirs, ours = _pair("nn.normalization", "_canonicalize_axes")
    assert ours(rank, axes) == theirs(rank, axes)


X = jax.random.normal(jax.random.key(0), (4, 3, 5)) * 3 + 1
MASK = jax.random.bernoulli(jax.random.key(1), 0.7, (4, 3, 5))
STATS_CASES = [
    dict(axes=(0, 1)), dict(axes=-1), dict(axes=(0, 1), use_mean=False),
    dict(axes=(0, 1), use_fast_variance=False), dict(axes=(1, 2), mask=MASK),
    dict(axes=(1, 2), mask=MASK, use_fast_variance=False), dict(axes=0, dtype=jnp.float16),
    dict(axes=(0, 2), x=X.astype(jnp.bfloat16)), dict(axes=1, x=X + 1j * X[::-1]),
]


@pytest.mark.parametrize("case", STATS_CASES, ids=range(len(STATS_CASES)))
def test_compute_stats(case):
    case = dict(case)
    x, axes, dtype = case.pop("x", X), case.pop("axes"), case.pop("dtype", None)
    theirs, ours = _pair("nn.normalization", "_compute_stats")
    for a, b in zip(ours(x, axes, dtype, **case), theirs(x, axes, dtype, **case), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_compute_stats_axis_name():
    theirs, ours = _pair("nn.normalization", "_compute_stats")
    rows = X.reshape(4, 15)

    def run(fn, **kw):
        return jax.vmap(lambda r: fn(r, 0, None, axis_name="b", **kw), axis_name="b")(rows)

    for kw in ({}, {"use_fast_variance": False}):
        for a, b in zip(run(ours, **kw), run(theirs, **kw), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


SCALE = jnp.linspace(0.5, 2.0, 5)
BIAS = jnp.linspace(-1.0, 1.0, 5)
NORM_CASES = [
    dict(red=(0, 1), feat=-1, scale=SCALE, bias=BIAS),
    dict(red=(0, 1), feat=2, scale=None, bias=BIAS, keep=True),
    dict(red=(0, 1), feat=-1, scale=SCALE, bias=None, dtype=jnp.bfloat16),
    dict(red=-1, feat=-1, scale=SCALE, bias=BIAS),
    dict(red=(1, 2), feat=(1, 2), scale=jnp.ones((3, 5)) * 2, bias=None),
    dict(red=(0, 1), feat=-1, scale=SCALE.astype(jnp.float16), bias=BIAS.astype(jnp.float16)),
]


@pytest.mark.parametrize("case", NORM_CASES, ids=range(len(NORM_CASES)))
def test_normalize(case):
    t_stats, _ = _pair("nn.normalization", "_compute_stats")
    theirs, ours = _pair("nn.normalization", "_normalize")
    mean, var = t_stats(X, case["red"], None)
    if case.get("keep"):  # statistics with the reduced axes kept as size 1
        mean, var = jnp.expand_dims(mean, case["red"]), jnp.expand_dims(var, case["red"])
    args = (X, mean, var, case["scale"], case["bias"], case["red"], case["feat"],
            case.get("dtype"), 1e-5)
    a, b = ours(*args), theirs(*args)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a.astype(jnp.float32), b.astype(jnp.float32), rtol=1e-6,
                               atol=1e-6)


def test_select_last_carry_and_concatenate():
    t_sel, o_sel = _pair("nn.recurrent", "_select_last_carry")
    carries = {"h": jax.random.normal(jax.random.key(2), (6, 4, 3)),
               "c": jnp.arange(24.0).reshape(6, 4)}
    lengths = jnp.array([1, 6, 3, 4])
    jax.tree_util.tree_map(np.testing.assert_array_equal, o_sel(carries, lengths),
                           t_sel(carries, lengths))
    t_cat, o_cat = _pair("nn.recurrent", "_concatenate")
    a, b = jnp.ones((2, 3, 1)), jnp.zeros((2, 3, 2))
    np.testing.assert_array_equal(o_cat(a, b), t_cat(a, b))


def _resolve_facts(lib, resolve):
    class Counter(lib.Module):
        def __init__(self):
            self.n = 1

        def add(self, x, y=0):
            return self.n + x + y

    class Plain:
        def add(self, x, y=0):
            return x + y

    def free(x, y=0):
        return x + y

    m, p = Counter(), Plain()
    out = []
    for f in (m.add, functools.partial(m.add, y=3), functools.partial(m.add, 2),
              functools.partial(functools.partial(m.add, y=3), x=2), Counter.add, p.add,
              functools.partial(p.add, 1), free, functools.partial(free, y=1)):
        fn, owner, was_bound = resolve(f)
        inner = fn.func if isinstance(fn, functools.partial) else fn
        out.append((
            was_bound, owner is m, owner is None, type(fn).__name__, fn is f,
            getattr(inner, "__name__", None), inner is getattr(f, "__self__", None),
            getattr(fn, "args", None), getattr(fn, "keywords", None),
        ))
    return out


def test_resolve_bound_callable():
    theirs, ours = _pair("transforms.transforms", "_resolve_bound_callable")
    assert _resolve_facts(nnx, ours) == _resolve_facts(fnnx, theirs)


def test_vars_as_warns_and_matches_with_vars():
    def run(lib, vars_as):
        tree = [lib.Variable(1.0), lib.Param(2.0), lib.BatchStat(3.0)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = vars_as(tree, ref=True, only=lib.Param)
        kinds = [w.category.__name__ for w in caught]
        return kinds, [(type(v).__name__, v.ref, float(v.get_value())) for v in out]

    for path in ("graph", "graphlib"):
        theirs, ours = _pair(path, "vars_as")
        assert run(nnx, ours) == run(fnnx, theirs)
    assert run(nnx, nnx.vars_as) == run(fnnx, fnnx.vars_as)
    assert nnx.vars_as.__name__ == fnnx.vars_as.__name__ == "with_vars"


def test_hashable_mapping_from_graph():
    theirs, ours = _pair("graph", "HashableMapping")
    items = {"b": 1, 0: 2, "a": (3,)}
    t, o = theirs(items), ours(items)
    assert (dict(o), len(o), list(o), repr(o)) == (dict(t), len(t), list(t), repr(t))
    assert (hash(o) == hash(ours(dict(reversed(items.items()))))) is True
    assert (o == ours(items), o == items) == (t == theirs(items), t == items)


def test_norm_math_helpers_as_flax():
    from flax.nnx.nn import normalization as theirs

    from flaxen.nnx.nn import normalization as ours

    z = jnp.array([[1 + 2j, 3 - 1j], [0.5j, -2.0]])
    np.testing.assert_array_equal(ours._abs_sq(z), theirs._abs_sq(z))
    y = jnp.arange(6.0).reshape(2, 3) - 2.5
    for axis in (None, 0, 1, (0, 1)):
        np.testing.assert_array_equal(ours._l2_normalize(y, axis), theirs._l2_normalize(y, axis))
        np.testing.assert_array_equal(ours._l2_normalize(y, axis, eps=1.0),
                                      theirs._l2_normalize(y, axis, eps=1.0))
