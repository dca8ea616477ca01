"""Tests for flaxen.core.scope: Scope, Variable, init/apply/bind and their bad-input errors."""

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import errors
from flaxen.configurations import config
from flaxen.core import FrozenDict, Partitioned, meta
from flaxen.core.scope import DenyList, Scope, Variable, apply, bind, init, lazy_init

KEY = jax.random.PRNGKey(0)


def _h32(items, sep=False):
    # Independent restatement of the documented derivation (GUIDES.md 5.0).
    m = hashlib.sha1()
    for x in items:
        if sep:
            m.update(b"\x00")
        m.update(x.encode() if isinstance(x, str) else x.to_bytes((x.bit_length() + 7) // 8, "big"))
    return int.from_bytes(m.digest()[:4], "big")


def _key(key, items, sep=False):
    return jax.random.fold_in(key, _h32(items, sep))


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(a) if jnp.issubdtype(
        a.dtype, jax.dtypes.prng_key) else a), np.asarray(jax.random.key_data(b) if jnp.issubdtype(
            b.dtype, jax.dtypes.prng_key) else b))


# -- RNG derivation ------------------------------------------------------------------------


def test_make_rng_counts_per_stream_and_path():
    d = jax.random.PRNGKey(1)
    s = bind({}, rngs={"params": KEY, "dropout": d}, mutable=True)
    _same(s.make_rng("dropout"), _key(d, (1,)))
    _same(s.make_rng("params"), _key(KEY, (1,)))
    _same(s.make_rng("params"), _key(KEY, (2,)))
    b = s.push("a").push("b")
    _same(b.make_rng("params"), _key(KEY, ("a", "b", 1)))
    _same(b.make_rng(), _key(KEY, ("a", "b", 2)))


def test_param_uses_one_tick_per_created_param():
    def f(scope):
        scope.param("a", jax.random.normal, (2,))
        scope.param("z", jax.nn.initializers.zeros, (2,))
        return scope.param("b", jax.random.normal, (2,))

    b, v = init(f)(KEY)
    np.testing.assert_array_equal(v["params"]["a"], jax.random.normal(_key(KEY, (1,)), (2,)))
    np.testing.assert_array_equal(b, jax.random.normal(_key(KEY, (3,)), (2,)))
    # An existing param does not draw a key: 'b' is then the first one drawn.
    b2, _ = apply(f, mutable=True)(
        {"params": {"a": jnp.zeros(2), "z": jnp.zeros(2)}}, rngs={"params": KEY})
    np.testing.assert_array_equal(b2, jax.random.normal(_key(KEY, (1,)), (2,)))


def test_large_counter_and_separator_flag():
    s = bind({}, rngs={"params": KEY}, mutable=True)
    for _ in range(299):
        s.make_rng()
    _same(s.make_rng(), _key(KEY, (300,)))
    with config.temp_flip_flag("fix_rng_separator", True):
        q = bind({}, rngs={"params": KEY}, mutable=True).push("q")
        _same(q.make_rng(), _key(KEY, ("q", 1), sep=True))
    # The cached hash state must follow the flag when it flips back.
    _same(q.make_rng(), _key(KEY, ("q", 2)))


def test_repushed_child_continues_its_counter_and_rewound():
    s = bind({}, rngs={"params": KEY}, mutable=True)
    k1 = s.push("c", reuse=True).make_rng()
    k2 = s.push("c", reuse=True).make_rng()
    _same(k1, _key(KEY, ("c", 1)))
    _same(k2, _key(KEY, ("c", 2)))
    s.make_rng()
    _same(s.rewound(rewind_rngs=True).make_rng(), _key(KEY, (1,)))
    _same(s.rewound().make_rng(), _key(KEY, (2,)))


def test_missing_stream_falls_back_to_params():
    s = bind({}, rngs={"params": KEY}, mutable=True)
    _same(s.make_rng("dropout"), _key(KEY, (1,)))
    _same(s.make_rng("params"), _key(KEY, (2,)))


def test_typed_keys_work():
    k = jax.random.key(0)
    s = bind({}, rngs={"params": k}, mutable=True)
    _same(s.push("x").make_rng(), jax.random.fold_in(k, _h32(("x", 1))))


# -- variables -------------------------------------------------------------------------------


def test_init_apply_roundtrip_and_return_types():
    def f(scope, x):
        w = scope.param("w", jax.nn.initializers.lecun_normal(), (x.shape[-1], 2))
        c = scope.push("child")
        st = c.variable("stats", "n", jnp.zeros, ())
        if c.is_mutable_collection("stats"):
            st.value = st.value + 1
        return x @ w

    x = jnp.ones((1, 3))
    y, v = init(f)(KEY, x)
    assert type(v) is dict and type(v["params"]) is dict
    assert list(v) == ["params", "stats"]
    assert v["stats"]["child"]["n"] == 1
    np.testing.assert_allclose(apply(f)(v, x), y)
    y2, mutated = apply(f, mutable=["stats"])(v, x)
    assert list(mutated) == ["stats"] and mutated["stats"]["child"]["n"] == 2
    assert v["stats"]["child"]["n"] == 1  # inputs are never modified
    out = apply(f, mutable=[])(v, x)
    assert isinstance(out, tuple) and out[1] == {}
    with config.temp_flip_flag("return_frozendict", True):
        _, fv = init(f)(KEY, x)
        assert isinstance(fv, FrozenDict)
        _, fm = apply(f, mutable=True)(fv, x)
        assert isinstance(fm, FrozenDict)


def test_init_flags_and_filters():
    seen = {}

    def f(scope):
        seen["flag"] = scope.get_flag("initializing", False)
        seen["p"] = scope.is_mutable_collection("params")
        scope.variable("cache", "c", lambda: 1)

    _, v = init(f, mutable=DenyList("params"))(KEY)
    assert seen == {"flag": True, "p": False} and v == {"cache": {"c": 1}}
    apply(f, mutable=True)({})
    assert seen["flag"] is False
    with pytest.raises(ValueError, match="get_flag"):
        bind({}).get_flag("nope")


def test_put_variable_merges_dicts_and_child_sees_it():
    s = bind({}, mutable=True)
    c = s.push("c")
    assert c.get_variable("params", "x") is None
    s.put_variable("params", "c", {"y": 2})
    s.put_variable("params", "c", {"x": 1})
    assert s.variables() == {"params": {"c": {"y": 2, "x": 1}}}
    assert c.get_variable("params", "x") == 1 and c.get_variable("params", "y") == 2
    # Replacing the child's dict by a leaf and back must not leave stale caches.
    s.put_variable("params", "c", 5)
    assert c.get_variable("params", "x") is None
    s.put_variable("params", "c", {"z": 3})
    assert c.get_variable("params", "z") == 3


def test_frozen_input_and_child_views():
    v = FrozenDict({"params": {"a": {"b": 1.0}}, "state": {"a": {"s": 2}}})
    s = bind(v, mutable=["state"])
    a = s.push("a")
    assert a.get_variable("params", "b") == 1.0
    assert a.variables() == {"params": {"b": 1.0}, "state": {"s": 2}}
    a.put_variable("state", "s", 3)
    assert s.mutable_variables() == {"state": {"a": {"s": 3}}}
    assert v["state"]["a"]["s"] == 2
    assert not a.is_collection_empty("params") and a.is_collection_empty("other")
    assert s.push("b").is_collection_empty("params")


def test_variable_unboxes_and_keeps_box_on_write():
    s = bind({"params": {"w": Partitioned(jnp.ones(2), ("x",))}}, mutable=True)
    w = s.variable("params", "w")
    assert isinstance(w, Variable) and w.is_mutable()
    np.testing.assert_array_equal(w.value, jnp.ones(2))
    w.value = jnp.zeros(2)
    stored = s.get_variable("params", "w")
    assert isinstance(stored, Partitioned) and stored.names == ("x",)
    raw = s.rewound().variable("params", "w", unbox=False)
    assert isinstance(raw.value, meta.AxisMetadata)


def test_param_with_boxed_and_tree_values():
    init_fn = meta.with_partitioning(jax.nn.initializers.ones, ("a", None))

    def f(scope):
        w = scope.param("w", init_fn, (2, 3))
        t = scope.param("t", lambda rng: {"u": jnp.zeros(3), "v": jnp.ones((1,))})
        return w, t

    (w, t), v = init(f)(KEY)
    assert w.shape == (2, 3) and isinstance(v["params"]["w"], Partitioned)
    assert set(t) == {"u", "v"}
    (w2, _) = apply(f)(v)
    np.testing.assert_array_equal(w2, w)


def test_names_and_children():
    s = bind({}, mutable=True)
    assert s.default_name("Dense_") == "Dense_0"
    assert s.push(prefix="Dense_").name == "Dense_0"
    assert s.default_name("Dense_") == "Dense_1"
    assert s.push().name == "0"
    s.reserve("v", "col")
    s.reserve("v", "other")  # variables clash only within a collection
    assert s.name_reserved("v", "col") and not s.name_reserved("v", "params")
    assert s.child(lambda sc, k: (sc.name, sc.path, k), k=1)() == ("<lambda>_0", ("<lambda>_0",), 1)
    c = s.push("c")
    assert c.parent is s and c.root is s and c.path_text == "/c" and s.path_text == "/"
    r = c.rewound()
    assert r.path == ("c",) and not r.reservations


def test_lazy_init_uses_shapes_only():
    def f(scope, x):
        scope.param("w", jax.random.normal, (x.shape[-1], 2))
        return x

    v = lazy_init(f)(KEY, jax.ShapeDtypeStruct((1, 3), jnp.float32))
    _, ref = init(f)(KEY, jnp.zeros((1, 3)))
    np.testing.assert_array_equal(v["params"]["w"], ref["params"]["w"])

    def bad(scope, x):
        scope.param("w", lambda rng: x * 2)

    with pytest.raises(errors.LazyInitError):
        lazy_init(bad)(KEY, jax.ShapeDtypeStruct((3,), jnp.float32))


def test_shape_check_cache_sees_new_shapes():
    def f(scope, n):
        return scope.param("w", jax.nn.initializers.zeros, (n,))

    _, v = init(f)(KEY, 2)
    apply(f)(v, 2)
    apply(f)(v, 2)  # cached
    with pytest.raises(errors.ScopeParamShapeError):
        apply(f)(v, 3)


# -- bad input: each error names the path and the fix --------------------------------------


def test_missing_rng_stream():
    s = bind({}, rngs={"dropout": KEY}).push("block")
    with pytest.raises(errors.InvalidRngError, match=r'"/block".*"noise"') as e:
        s.make_rng("noise")
    assert "rngs=" in str(e.value)


def test_write_to_immutable_collection():
    def f(scope):
        v = scope.push("bn").variable("batch_stats", "mean", jnp.zeros, (2,))
        v.value = v.value + 1

    _, variables = init(f)(KEY)
    with pytest.raises(errors.ModifyScopeVariableError, match=r'"mean" in "/bn".*mutable=') as e:
        apply(f)(variables)
    assert e.value.col == "batch_stats"


def test_scope_used_after_invalidation():
    leaked = apply(lambda scope: scope.push("inner"))({})
    with pytest.raises(errors.InvalidScopeError, match="/inner"):
        leaked.put_variable("params", "x", 1)
    with pytest.raises(errors.InvalidScopeError):
        leaked.push("more")
    with pytest.raises(errors.InvalidScopeError):
        leaked.make_rng("params")


def test_name_used_twice():
    def f(scope):
        scope.push("a")
        scope.push("a")

    with pytest.raises(errors.NameInUseError, match=r'"a".*"/"') as e:
        init(f)(KEY)
    assert isinstance(e.value, ValueError)  # Flax raises a ValueError here
    s = bind({}, mutable=True)
    s.param("w", jax.nn.initializers.zeros, (1,)) if s.rngs else None
    s.reserve("w", "params")
    with pytest.raises(errors.NameInUseError, match='"w"'):
        s.reserve("w", "params")
    with pytest.raises(errors.NameInUseError, match='"w"'):
        s.push("w")


def test_param_shape_changed():
    def f(scope, x):
        return scope.push("Dense_0").param("kernel", jax.nn.initializers.zeros, (x.shape[-1], 2))

    _, v = init(f)(KEY, jnp.ones((1, 3)))
    with pytest.raises(errors.ScopeParamShapeError, match=r'"kernel" in "/Dense_0"') as e:
        apply(f)(v, jnp.ones((1, 4)))
    assert e.value.value_shape == (3, 2) and e.value.init_shape == (4, 2)
    assert "init" in str(e.value)


def test_unknown_collection_in_filter():
    with pytest.raises(errors.InvalidFilterError, match="3"):
        apply(lambda s: None, mutable=3)
    with pytest.raises(errors.InvalidFilterError):
        init(lambda s: None, mutable=["params", 3])
    with pytest.raises(errors.InvalidFilterError):
        bind({}, mutable=DenyList([None]))


def test_missing_params_and_variables():
    def p(scope):
        return scope.push("z").param("w", jax.nn.initializers.zeros, (1,))

    with pytest.raises(errors.ScopeCollectionNotFound, match=r'"w".*"params".*"/z"'):
        apply(p)({})
    with pytest.raises(errors.ScopeParamNotFoundError, match=r'"w".*"/z"'):
        apply(p)({"params": {"z": {"other": 1}}})

    def v(scope):
        return scope.variable("col", "x")

    with pytest.raises(errors.ScopeCollectionNotFound):
        init(v)(KEY)
    with pytest.raises(errors.ScopeVariableNotFoundError, match=r'"x".*"col"'):
        apply(v)({"col": {"y": 1}})


def test_bad_variables_and_rngs():
    with pytest.raises(errors.ApplyScopeInvalidVariablesTypeError):
        apply(lambda s: 1)({"params": 3})
    with pytest.raises(errors.ApplyScopeInvalidVariablesTypeError):
        apply(lambda s: 1)([1])
    with pytest.raises(errors.ApplyScopeInvalidVariablesStructureError):
        apply(lambda s: 1)({"params": {"params": {"a": 1}}})
    with pytest.raises(ValueError, match="rngs"):
        apply(lambda s: 1)({}, rngs={"params": 3})
    with pytest.raises(ValueError, match="PRNG key"):
        init(lambda s: 1)(3)
    assert apply(lambda s: s.has_rng("params"))({}, rngs=KEY)


def test_scope_constructor_signature():
    s = Scope({}, rngs={"params": KEY}, name=None, mutable=True, flags={"a": 1})
    assert s.flags["a"] == 1 and s.is_valid and s.rngs["params"].suffix == ()
    with s.temporary() as t:
        assert t is s
    assert not s.is_valid
