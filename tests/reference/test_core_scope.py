"""Differential tests: flaxen.core scope/init/apply against flax.core, leaf for leaf."""

import flax
import flax.core as fcore
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen
import flaxen.core as xcore
from flaxen.core import scope as xscope


def _model(scope, x, depth=3):
    """Params, variables and draws of several streams at several depths."""
    out = {}
    h = x
    for i in range(depth):
        child = scope.push(f"layer_{i}")
        w = child.param("kernel", jax.nn.initializers.lecun_normal(), (h.shape[-1], 3))
        b = child.param("bias", jax.nn.initializers.zeros, (3,))
        h = jnp.tanh(h @ w + b)
        out[f"drop_{i}"] = child.make_rng("dropout")
        inner = child.push("inner")
        out[f"noise_{i}"] = jax.random.normal(inner.make_rng("noise"), (2,))
        inner.param("scale", jax.random.normal, (2,))
        inner.variable("stats", "count", lambda: jnp.zeros(()))
    auto = scope.push(prefix="Auto_")
    auto.param("p", jax.random.uniform, (4,))
    out["root_params_rng"] = scope.make_rng("params")
    out["fallback"] = scope.push("fb").make_rng("missing_stream")
    return h, out


def _assert_trees_equal(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert x.dtype == y.dtype


@pytest.mark.parametrize("fix_sep", [False, True])
@pytest.mark.parametrize("typed", [False, True])
def test_init_bit_identical(fix_sep, typed):
    mk = jax.random.key if typed else jax.random.PRNGKey
    rngs = {"params": mk(0), "dropout": mk(1), "noise": mk(2)}
    x = jnp.ones((2, 4))
    old_f, old_x = flax.config.flax_fix_rng_separator, flaxen.config.flax_fix_rng_separator
    flax.config.update("flax_fix_rng_separator", fix_sep)
    flaxen.config.update("flax_fix_rng_separator", fix_sep)
    try:
        ref = fcore.init(_model)(rngs, x)
        got = xcore.init(_model)(rngs, x)
    finally:
        flax.config.update("flax_fix_rng_separator", old_f)
        flaxen.config.update("flax_fix_rng_separator", old_x)
    _assert_trees_equal(got, ref)
    assert list(got[1]["params"]) == list(ref[1]["params"])  # creation order


def test_apply_and_mutation_match():
    rngs = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1),
            "noise": jax.random.PRNGKey(2)}
    x = jnp.ones((2, 4))
    _, v = fcore.init(_model)(rngs, x)

    def stateful(scope, x):
        y, _ = _model(scope, x)
        c = scope.push("layer_0", reuse=True).push("inner", reuse=True).variable("stats", "count")
        c.value = c.value + 1
        return y, scope.make_rng("dropout")

    ref = fcore.apply(stateful, mutable=["stats"])(v, x, rngs=rngs)
    got = xcore.apply(stateful, mutable=["stats"])(v, x, rngs=rngs)
    _assert_trees_equal(got, ref)


def test_repush_and_rewound_match():
    def f(scope):
        keys = [scope.push("c", reuse=True).make_rng() for _ in range(3)]
        keys.append(scope.rewound().make_rng())
        keys.append(scope.rewound(rewind_rngs=True).make_rng())
        keys.append(scope.rewound().push("c", reuse=True).make_rng())
        return keys

    k = jax.random.PRNGKey(3)
    _assert_trees_equal(xcore.init(f)(k)[0], fcore.init(f)(k)[0])


_FILTERS = [True, False, "a", ["a", "b"], ("c",), fcore.DenyList("a"),
            fcore.DenyList(["a", "c"])]


def _to_x(f):
    return xcore.DenyList(f.deny) if isinstance(f, fcore.DenyList) else f


@pytest.mark.parametrize("op", ["union_filters", "intersect_filters", "subtract_filters"])
def test_filter_algebra_matches(op):
    fop = getattr(fcore.scope, op)
    xop = getattr(xscope, op)
    for a in _FILTERS:
        for b in _FILTERS:
            ref = fop(a, b)
            got = xop(_to_x(a), _to_x(b))
            for col in ["a", "b", "c", "d"]:
                assert xscope.in_filter(got, col) == fcore.scope.in_filter(ref, col), (a, b, col)


def test_group_collections_matches():
    xs = {"a": 1, "b": 2, "c": 3, "d": 4}
    for filters in ([["a"], True], [["a"], "a", fcore.DenyList("c")], [False, "d"]):
        ref = fcore.scope.group_collections(xs, filters)
        got = xscope.group_collections(xs, [_to_x(f) for f in filters])
        assert tuple(got) == tuple(ref)


def test_error_classes_match():
    def shape(scope, n):
        return scope.param("w", jax.nn.initializers.zeros, (n,))

    _, v = fcore.init(shape)(jax.random.PRNGKey(0), 2)
    cases = [
        (lambda m: m.apply(shape)(v, 3), "ScopeParamShapeError"),
        (lambda m: m.apply(shape)({}, 2), "ScopeCollectionNotFound"),
        (lambda m: m.apply(shape)({"params": {"q": 1}}, 2), "ScopeParamNotFoundError"),
        (lambda m: m.apply(lambda s: s.make_rng("x"))({}), "InvalidRngError"),
        (lambda m: m.apply(lambda s: s.variable("c", "v"))({"c": {"u": 1}}),
         "ScopeVariableNotFoundError"),
        (lambda m: m.apply(lambda s: s.put_variable("c", "v", 1))({}),
         "ModifyScopeVariableError"),
        (lambda m: m.apply(lambda s: 1)({"params": 3}), "ApplyScopeInvalidVariablesTypeError"),
    ]
    for call, name in cases:
        with pytest.raises(getattr(flax.errors, name)):
            call(fcore)
        with pytest.raises(getattr(flaxen.errors, name)):
            call(xcore)
    with pytest.raises(ValueError):
        fcore.init(lambda s: (s.push("a"), s.push("a")))(jax.random.PRNGKey(0))
    with pytest.raises(ValueError):
        xcore.init(lambda s: (s.push("a"), s.push("a")))(jax.random.PRNGKey(0))
