"""Probe findings against Flax: root debug paths of lifted transforms, ``core.lift.jit``'s
calling convention, the classes of rank errors, and vmap's batch-size check."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

flax = pytest.importorskip("flax")

import flax.linen as fnn  # noqa: E402
from flax.core import lift as flift  # noqa: E402

import flaxen  # noqa: E402
import flaxen.linen as nn  # noqa: E402
from flaxen.core import lift  # noqa: E402

K = jax.random.key


def _outcome(fn):
    """(result, None) or (None, exception) of ``fn()``."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever is raised
        return None, e


def _same_failure(ours, theirs, phrase=None):
    """Our exception is caught by every ``except`` that catches theirs, with their phrase."""
    assert theirs is not None and ours is not None
    for cls in type(theirs).__mro__:
        if cls.__module__ == "builtins":
            assert isinstance(ours, cls), (type(ours).__mro__, cls)
    if phrase is not None:
        assert phrase in str(theirs)
        assert phrase in str(ours)


def _counter(lib):
    class C(lib.Module):
        @lib.compact
        def __call__(self, x):
            return x + self.variable("col", "n", jnp.zeros, ()).value

    return C


def _scan_counter(lib):
    class C(lib.Module):
        @lib.compact
        def __call__(self, c, x):
            return c + self.variable("col", "n", jnp.zeros, ()).value, x

    return C


# --- 1 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["jit", "vmap", "map_variables", "remat", "scan"])
def test_root_transform_debug_path(name):
    def run(lib):
        if name == "scan":
            model = lib.scan(_scan_counter(lib), variable_broadcast="col", split_rngs={},
                             in_axes=0)()
            return _outcome(lambda: model.apply({}, 0.0, jnp.ones(3)))
        C = _counter(lib)
        make = {"jit": lambda: lib.jit(C), "vmap": lambda: lib.vmap(C, in_axes=0),
                "map_variables": lambda: lib.map_variables(C, "col"),
                "remat": lambda: lib.remat(C)}[name]
        return _outcome(lambda: make()().apply({}, jnp.ones(2)))

    (_, ours), (_, theirs) = run(nn), run(fnn)
    assert type(ours).__name__ == type(theirs).__name__ == "ScopeCollectionNotFound"
    assert isinstance(ours, flaxen.errors.ScopeCollectionNotFound)
    _same_failure(ours, theirs, f'in "/{name}()"')


# --- 2 ----------------------------------------------------------------------------------------


def test_core_jit_convention_matches():
    def run(core, lft):
        def f(scope, key, x):
            return x * scope.param("k", jax.nn.initializers.ones, ())

        y, v = core.init(lambda s, x: lft.jit(f)(s, "abc", x))(K(0), 2.0)
        y2 = core.apply(lambda s, x: lft.jit(f)(s, "abc", x))(v, 5.0)
        return float(y), float(y2), float(v["params"]["k"])

    assert run(flaxen.core, lift) == run(flax.core, flift) == (2.0, 5.0, 1.0)


def test_core_jit_static_arguments_match():
    def run(core, lft):
        seen = []

        def g(scope, key, x, n):
            seen.append((key, isinstance(x, jax.core.Tracer), isinstance(n, jax.core.Tracer)))
            return x * n

        a = core.init(lambda s: lft.jit(g, static_argnums=1)(s, "k", 2.0, 3))(K(0))[0]
        b = core.init(lambda s: lft.jit(g, static_argnames="n")(s, "k", 2.0, n=3))(K(0))[0]
        return float(a), float(b), seen

    assert run(flaxen.core, lift) == run(flax.core, flift)


@pytest.mark.parametrize("case", ["no_key", "unhashable_key", "argnum_out_of_range"])
def test_core_jit_failures_match(case):
    def run(core, lft):
        def g(scope, key, x, n):
            return x * n

        body = {
            "no_key": lambda s: lft.jit(g)(s),
            "unhashable_key": lambda s: lft.jit(g)(s, ["k"], 1.0, 2.0),
            "argnum_out_of_range": lambda s: lft.jit(g, static_argnums=2)(s, "k", 1.0, 2.0),
        }[case]
        return _outcome(lambda: core.init(body)(K(0)))[1]

    ours, theirs = run(flaxen.core, lift), run(flax.core, flift)
    _same_failure(ours, theirs)


def test_linen_jit_results_match():
    def run(lib):
        class D(lib.Module):
            @lib.compact
            def __call__(self, x, n):
                return lib.Dense(n)(x)

        x = jnp.arange(3.0)[None]
        v = lib.jit(D, static_argnums=2)().init(K(0), x, 2)
        return (np.asarray(lib.jit(D, static_argnums=2)().apply(v, x, 2)),
                np.asarray(lib.jit(D, static_argnames="n")().apply(v, x, n=2)))

    for a, b in zip(run(nn), run(fnn)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# --- 3 ----------------------------------------------------------------------------------------


def _rank_cases(lib):
    x2 = jnp.ones((2, 4))
    x3 = jnp.ones((1, 2, 4))
    return {
        "rnn_1d": lambda: lib.RNN(lib.LSTMCell(4)).init(K(0), jnp.ones(3)),
        "rnn_0d": lambda: lib.RNN(lib.LSTMCell(4)).init(K(0), jnp.ones(())),
        "attention_rank2": lambda: lib.dot_product_attention(x2, x2, x2),
        "attention_mixed_ranks": lambda: lib.dot_product_attention(x3, x2, x2),
        "weights_mixed_ranks": lambda: lib.dot_product_attention_weights(x3, x2),
        "weights_rank2": lambda: lib.dot_product_attention_weights(x2, x2),
    }


@pytest.mark.parametrize("case", sorted(_rank_cases(fnn)))
def test_rank_error_classes_are_catch_compatible(case):
    ours = _outcome(_rank_cases(nn)[case])[1]
    theirs = _outcome(_rank_cases(fnn)[case])[1]
    phrase = {"attention_mixed_ranks": "q, k, v must have same rank",
              "weights_mixed_ranks": "q, k must have same rank"}.get(case)
    _same_failure(ours, theirs, phrase)


# --- 4 ----------------------------------------------------------------------------------------


def test_vmap_inconsistent_batch_axis_sizes():
    def run(lib):
        vd = lib.vmap(lib.Dense, variable_axes={"params": 0}, split_rngs={"params": True},
                      in_axes=1)
        v = vd(2).init(K(0), jnp.ones((4, 3)))
        good = vd(2).apply(v, jnp.arange(12.0).reshape(4, 3))
        return np.asarray(good), _outcome(lambda: vd(2).apply(v, jnp.ones((4, 5))))[1]

    (ours_y, ours), (their_y, theirs) = run(nn), run(fnn)
    np.testing.assert_allclose(ours_y, their_y, rtol=1e-6)
    _same_failure(ours, theirs, "Inconsistent batch axis sizes: {3, 5}")


@pytest.mark.parametrize("case", ["tuple_axes", "nested_axes", "nothing_mapped", "int_axes"])
def test_vmap_axis_size_inference_matches(case):
    def run(lib):
        class Two(lib.Module):
            @lib.compact
            def __call__(self, a, b):
                return jax.tree_util.tree_leaves(a)[0].sum() + b.sum()

        a, b = jnp.ones((3, 2)), jnp.ones((5, 2))
        in_axes, args = {
            "tuple_axes": ((0, 0), (a, b)),
            "nested_axes": (({"p": 0, "q": 1}, 0), ({"p": a, "q": jnp.ones((2, 4))}, a)),
            "nothing_mapped": (None, (a, a)),
            "int_axes": (0, (a, b)),
        }[case]
        model = lib.vmap(Two, variable_axes={}, split_rngs={}, in_axes=in_axes)()
        return _outcome(lambda: model.init(K(0), *args))[1]

    ours, theirs = run(nn), run(fnn)
    phrase = {"tuple_axes": "Inconsistent batch axis sizes: {3, 5}",
              "nested_axes": "Inconsistent batch axis sizes: {3, 4}",
              "nothing_mapped": "axis_size should be specified manually",
              "int_axes": "vmap got inconsistent sizes"}[case]
    _same_failure(ours, theirs, phrase)


def _kw_only_layout(lib_nn):
    import dataclasses
    import inspect

    class KW(lib_nn.Module):
        a: int
        _: dataclasses.KW_ONLY
        b: int = 2

    class Sub(KW):
        c: int = 3

    class Field(lib_nn.Module):
        a: int
        b: int = dataclasses.field(default=2, kw_only=True)

    out = []
    for cls in (KW, Sub, Field):
        params = inspect.signature(cls).parameters.values()
        out.append(([(p.name, p.kind) for p in params],
                    [(f.name, f.kw_only) for f in dataclasses.fields(cls)]))
    return out


def test_kw_only_marker_makes_parent_and_name_keyword_only_as_flax():
    assert _kw_only_layout(nn) == _kw_only_layout(fnn)
