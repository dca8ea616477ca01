"""Today's (Flax 0.12.8) Variable, State and traversal API at ``flaxen.nnx``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import errors, nnx
from flaxen.core import freeze
from flaxen.experimental import nnx as old_nnx

# -- Variable as a pytree and as an array ---------------------------------------------------


def test_variable_is_a_pytree_whose_leaf_is_the_value():
    p = nnx.Param(jnp.array(1.0), tag="w")
    q = jax.tree.map(lambda x: x * 3, p)
    assert type(q) is nnx.Param and q is not p
    assert float(q[...]) == 3.0 and float(p[...]) == 1.0
    assert q.get_metadata("tag") == "w"
    (path, leaf), = jax.tree_util.tree_flatten_with_path(p)[0]
    assert path == (jax.tree_util.GetAttrKey("value"),) and float(leaf) == 1.0


def test_variable_operators_and_reflection():
    a, b = nnx.Param(jnp.array(6.0)), nnx.Param(jnp.array(3.0))
    assert float(a + b) == 9.0 and float(a - b) == 3.0 and float(a / b) == 2.0
    assert float(1 + a) == 7.0 and float(12 / a) == 2.0 and float(2 ** b) == 8.0
    assert float(-a) == -6.0 and float(abs(nnx.Param(jnp.array(-2.0)))) == 2.0
    assert bool(a[...] > b[...]) and not bool(a == b) and bool(a != b)
    m = nnx.Param(jnp.ones((2, 3)))
    assert (jnp.ones((4, 2)) @ m).shape == (4, 3) and m.T.shape == (3, 2)
    assert jnp.dot(jnp.ones(2), m).shape == (3,)
    # python scalars compare like python scalars
    assert (nnx.Param(3) == nnx.Param(3)) is True


def test_variable_index_get_set_and_inplace():
    v = nnx.Param(jnp.zeros(3))
    v[...] += 2
    v[1] = 7.0
    assert v[...].tolist() == [2.0, 7.0, 2.0] and float(v[1]) == 7.0
    with pytest.raises(NotImplementedError, match="In-place operations are no longer "
                       r"supported for Variable.*v\[\.\.\.\] \+= x"):
        v += 1  # as in Flax 0.12.8: refused, the value is updated through v[...]
    assert isinstance(v, nnx.Param) and v[...].tolist() == [2.0, 7.0, 2.0]
    with pytest.raises(errors.VariableInPlaceError, match=r"v @= x"):
        v @= v
    d = nnx.Variable({"a": 1})
    d["b"] = 2
    assert d.get_value() == {"a": 1, "b": 2} and len(d) == 2 and "a" in d


def test_variable_proxies_value_attributes_and_calls():
    class Scale:
        factor = 3

        def __call__(self, x):
            return self.factor * x

    v = nnx.Variable(Scale())
    assert v(2) == 6 and v.factor == 3
    with pytest.raises(AttributeError, match="no attribute or metadata 'nope'"):
        v.nope  # noqa: B018


def test_get_value_set_value_overrides_in_subclasses():
    class Plus3(nnx.Param):
        def get_value(self, **kwargs):
            return super().get_value(**kwargs) + 3

    class Plus7OnSet(nnx.Param):
        def set_value(self, value, **kwargs):
            super().set_value(value + 7, **kwargs)

    assert int(Plus3(jnp.array(1))[...]) == 4 and int(Plus3(jnp.array(1)).value) == 4
    x = Plus7OnSet(jnp.array(1))
    x[...] = 5
    assert int(x.get_raw_value()) == 12


def test_metadata_api():
    v = nnx.Variable(jnp.array(1.0))
    assert v.get_metadata() == {"hijax": False, "ref": False, "eager_sharding": True}
    v.set_metadata(a=1)
    v.set_metadata("b", 2)
    assert v.get_metadata("a") == 1 and v.get_metadata("b") == 2 and v.a == 1
    assert v.get_metadata("missing", default=5) == 5
    v.set_metadata({"c": 3})
    assert v.get_metadata() == {"c": 3, "hijax": False, "ref": False, "eager_sharding": True}
    assert v.get_metadata(exclude_required=True) == {"c": 3}
    with pytest.raises(ValueError, match="Cannot change the `ref` metadata"):
        v.set_metadata(ref=True)
    with pytest.raises(KeyError, match="has no metadata 'zzz'"):
        v.get_metadata("zzz")


def test_set_metadata_on_a_module_with_a_filter():
    class M(nnx.Module):
        def __init__(self):
            self.v = nnx.Variable(jnp.array(0.0))
            self.p = nnx.Param(jnp.array(1.0))

    m = M()
    nnx.set_metadata(m, foo="bar")
    nnx.set_metadata(m, frozen=True, only=nnx.Param)
    assert m.v.get_metadata("foo") == "bar" and m.p.get_metadata("foo") == "bar"
    assert m.p.get_metadata("frozen") is True and not m.v.has_metadata("frozen")


# -- var_defaults, ref mode, with_vars ------------------------------------------------------


def test_creation_defaults_context_decorator_and_mapping():
    assert dict(nnx.var_defaults()) == {"hijax": False, "ref": False}
    with nnx.var_defaults(ref=True):
        assert nnx.Variable(1.0).ref
        with nnx.var_defaults(ref=False):
            assert not nnx.Variable(1.0).ref
        assert nnx.var_defaults().ref
    assert not nnx.var_defaults().ref

    @nnx.var_defaults(ref=True)
    def make():
        return nnx.Variable(1.0)

    assert make().ref and not nnx.var_defaults().ref
    with nnx.var_defaults(ref=True):
        assert not nnx.Variable(1.0, ref=False).ref


def test_ref_variables_are_updated_in_place_by_jax_jit():
    v = nnx.Variable(jnp.array(1), ref=True)
    assert isinstance(v.get_raw_value(), jax.Ref) and int(v[...]) == 1

    @jax.jit
    def inc(v):
        v[...] += 1

    inc(v)
    inc(v)
    assert int(v[...]) == 3
    c = v.copy(ref=False)
    assert not c.ref and not isinstance(c.get_raw_value(), jax.Ref) and int(c[...]) == 3


def test_with_vars_copies_selected_variables_and_keeps_the_rest():
    tree = [nnx.Variable(1.0), nnx.Param(2.0)]
    out = nnx.with_vars(tree, ref=True, only=nnx.Param)
    assert out is not tree and out[0] is tree[0]
    assert out[1].ref and isinstance(out[1].get_raw_value(), jax.Ref)
    shared = nnx.Variable(1.0)
    with pytest.raises(ValueError, match="Found duplicate at path"):
        nnx.with_vars([shared, shared], ref=True)
    both = nnx.with_vars([shared, shared], ref=True, allow_duplicates=True)
    assert both[0] is both[1]  # shared objects stay shared in the copy


# -- State and statelib ---------------------------------------------------------------------


def test_state_of_variables_attribute_access_and_pure_dicts():
    s = nnx.State({"a": nnx.Param(jnp.array(1)), "b": {"c": nnx.Param(jnp.array(2))}})
    s.a[...] = 3
    s.b.d = nnx.BatchStat(jnp.array(5))
    assert int(s["a"][...]) == 3 and int(s["b"]["d"][...]) == 5
    pure = nnx.to_pure_dict(s)
    assert isinstance(pure["b"]["c"], jax.Array) and int(pure["a"]) == 3
    nnx.replace_by_pure_dict(s, jax.tree.map(jnp.zeros_like, pure))
    assert type(s["b"]["d"]) is nnx.BatchStat and int(s["b"]["d"][...]) == 0
    with pytest.raises(ValueError, match="not in the State"):
        nnx.replace_by_pure_dict(s, {"zz": 1})


def test_flat_state_and_diff():
    s = nnx.State({"b": nnx.Param(1.0), "a": {"c": nnx.Param(2.0), "e": {}}})
    flat = nnx.to_flat_state(s)
    assert isinstance(flat, nnx.FlatState) and flat.paths == (("a", "c"), ("b",))
    assert len(flat) == 2 and dict(flat)[("b",)].get_value() == 1.0
    params, = [flat.filter(nnx.Param)]
    assert len(params) == 2
    back = nnx.from_flat_state(flat)
    assert back == s
    assert list(nnx.statelib.diff(s, nnx.State({"b": nnx.Param(0.0)}))) == ["a"]
    assert nnx.statelib.diff(s, nnx.State({})) is s
    assert nnx.restore_int_paths({"l": {"0": 1}}) == {"l": {0: 1}}


def test_path_contains_exact_and_substring():
    pred = nnx.filterlib.to_predicate(nnx.PathContains("backbone", exact=False))
    assert pred(("backbone1", "kernel"), None) and not pred(("head", "kernel"), None)
    assert not nnx.filterlib.to_predicate(nnx.PathContains("backbone"))(("backbone1",), None)


def test_traversals_flatten_and_unflatten():
    xs = {"foo": 1, "bar": {"a": 2, "b": {}}}
    assert nnx.traversals.flatten_mapping(freeze(xs)) == {("foo",): 1, ("bar", "a"): 2}
    flat = nnx.traversals.flatten_mapping(xs, keep_empty_nodes=True)
    assert nnx.traversals.unflatten_mapping(flat) == xs
    assert nnx.traversals.unflatten_mapping({"bar/a": 2}, sep="/") == {"bar": {"a": 2}}
    assert nnx.traversals.flatten_mapping(
        xs, is_leaf=lambda path, x: len(path) == 1 and len(x) == 2) == {
            ("foo",): 1, ("bar",): {"a": 2, "b": {}}}


# -- the 0.8.3 face keeps its VariableState; today's to_state is copy -------------------------


def test_to_state_is_a_variable_copy():
    w = nnx.Param(jnp.zeros(2), tag="w")
    c = w.to_state(tag="c")
    assert type(c) is nnx.Param and c is not w and c.get_metadata("tag") == "c"
    assert w.get_metadata("tag") == "w"  # the original keeps its metadata
    assert nnx.Variable.to_state is nnx.Variable.copy
    s = nnx.Param.state(jnp.ones(2), tag="s")  # 0.8.3's spelling: today a State leaf is a Variable
    assert type(s) is nnx.Param and s.get_metadata("tag") == "s"


def test_old_face_variable_state_hides_required_metadata():
    w = old_nnx.Param(jnp.zeros(2), tag="w")
    vs = old_nnx.VariableState.of(w)
    assert type(vs) is old_nnx.VariableState and vs.get_metadata() == {"tag": "w"}
    assert vs == old_nnx.VariableState(old_nnx.Param, jnp.zeros(2), tag="w")
    back = vs.to_variable()
    assert back.get_metadata() == w.get_metadata()
    with pytest.warns(DeprecationWarning, match="alias of Variable"):
        assert nnx.VariableState is nnx.Variable
    assert nnx.variablelib.VariableState is nnx.Variable
    np.testing.assert_array_equal(back[...], w[...])


# -- hijax Variables ---------------------------------------------------------------------------


def test_hijax_variable_is_updated_in_place_by_jax_transforms():
    v = nnx.Param(jnp.array(1.0), tag="t", hijax=True)
    assert type(v) is nnx.variablelib.HijaxVariable and isinstance(v, nnx.Param)
    assert not isinstance(v, nnx.BatchStat) and v.var_type is nnx.Param
    assert not isinstance(v.get_raw_value(), jax.Ref)  # ref=False: reads as an array
    assert v.get_metadata() == {"tag": "t", "hijax": True, "ref": False, "eager_sharding": True}

    @jax.jit
    def step(v, x):
        v[...] += x
        return v * 2

    y = step(v, 2.0)
    assert float(v[...]) == 3.0 and float(y) == 6.0

    def loss(x):  # captured by closure inside jax.grad
        v[...] = jax.lax.stop_gradient(x)
        return x**2

    assert float(jax.grad(loss)(jnp.array(4.0))) == 8.0 and float(v[...]) == 4.0
    low = nnx.with_vars(v, hijax=False)
    assert type(low) is nnx.Param and not low.hijax and float(low[...]) == 4.0


def test_hijax_defaults_copy_and_filters():
    with nnx.var_defaults(hijax=True):
        v = nnx.BatchStat(jnp.zeros(2))
    assert v.hijax and type(v) is nnx.variablelib.HijaxVariable
    r = nnx.Variable(jnp.array(1)).copy(hijax=True, ref=True)
    assert r.hijax and r.ref and isinstance(r.get_raw_value(), jax.Ref)
    s = nnx.State({"a": v, "b": nnx.Param(jnp.ones(1))})
    stats = s.filter(nnx.BatchStat)
    assert list(stats) == ["a"]
    d = nnx.Variable({"a": jnp.array(0)}, hijax=True)

    @jax.jit
    def inc(d):
        d["a"] += 1

    inc(d)
    assert int(d["a"]) == 1


def test_hijax_indexing_and_whole_value_writes():
    b = nnx.Param(jnp.zeros(4), hijax=True)
    assert b[None].shape == (1, 4) and b[1:3].shape == (2,)
    x = nnx.Variable(jnp.array(1.0), hijax=True)
    x[...] = 5  # a Python scalar keeps the Variable's dtype
    assert x[...].dtype == jnp.float32 and float(x[...]) == 5.0
    x[...] = jnp.ones(3)  # outside a trace the value may change shape
    assert x[...].shape == (3,)

    @jax.jit
    def set_all(x, a):
        x[...] = a  # inside a trace it is broadcast into the Ref

    set_all(x, 2.0)
    assert x[...].tolist() == [2.0, 2.0, 2.0]


def test_with_vars_keeps_a_pytree_data_status():
    class Params(nnx.Pytree):
        def __init__(self):
            self.w = nnx.Param(jnp.zeros((2, 3)))
            self.count = nnx.Variable(jnp.array(0))

    p = nnx.with_vars(Params(), ref=True)
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(p)[0]]
    assert paths == [(jax.tree_util.GetAttrKey("count"), jax.tree_util.GetAttrKey("value")),
                     (jax.tree_util.GetAttrKey("w"), jax.tree_util.GetAttrKey("value"))]

    @jax.jit
    def count(p):
        p.count[...] += 1

    count(p)
    assert int(p.count[...]) == 1


def test_numpy_reads_a_variable_as_its_array():
    p = nnx.Param(jnp.arange(3.0))
    np.testing.assert_allclose(np.asarray(p), [0.0, 1.0, 2.0])
    assert np.asarray(p, np.int32).dtype == np.int32


def test_numeric_dunders_call_the_value_own_methods():
    import math

    p = nnx.Param(jnp.array(1.6))
    assert round(p).dtype == jnp.float32 and float(round(p)) == 2.0
    assert round(nnx.Param(1.6)) == 2.0 and isinstance(round(nnx.Param(1.6)), float)
    with pytest.raises(AttributeError):  # jax.Array has no __floor__
        math.floor(p)
    with pytest.raises(TypeError):  # int.__add__(float) is NotImplemented, and so is the sum
        nnx.Param(3) + 1.5
    ne = p != 1.0  # no __ne__: Python negates __eq__, a Python bool
    assert ne is True


def test_metadata_keys_in_flax_order():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        renamed = nnx.Param(jnp.ones(1), tag="t", sharding_names=("a",), eager_sharding=False)
    # the modes follow the given keys; a renamed sharding_names lands last as out_sharding
    assert list(renamed.get_metadata()) == ["tag", "hijax", "ref", "eager_sharding",
                                            "out_sharding"]
    given = nnx.Param(jnp.ones(1), out_sharding=("a",), eager_sharding=False)
    assert list(given.get_metadata()) == ["out_sharding", "hijax", "ref", "eager_sharding"]
    init = nnx.with_metadata(nnx.initializers.zeros_init(), foo=1, bar=3)
    merged = nnx.Param(init(jax.random.key(0), (1,)), bar=2, baz=0)
    # the keywords' keys first; the initializer's metadata wins a clash
    assert list(merged.get_metadata())[:3] == ["bar", "baz", "foo"]
    assert merged.get_metadata("bar") == 3


def test_a_variable_rebuilt_by_unflatten_lists_its_metadata_sorted():
    # as Flax: jax.tree.map and jitted outputs rebuild Variables from the sorted aux
    p = nnx.Param(jnp.ones(2), zeta=1, alpha=2)
    assert list(p.get_metadata())[:2] == ["zeta", "alpha"]
    for rebuilt in (jax.tree.map(lambda x: x, p), jax.jit(lambda v: v)(p)):
        keys = list(rebuilt.get_metadata())
        assert keys == sorted(keys) and rebuilt.get_metadata() == p.get_metadata()
        rebuilt.set_metadata("beta", 3)  # a write copies the shared dict first
        assert "beta" not in jax.tree.map(lambda x: x, p).get_metadata()


def test_a_variable_rebuilt_from_its_definition_keeps_its_metadata_order():
    v = nnx.jit(lambda: nnx.Param(jnp.ones(2), zeta=1, alpha=2))()
    assert list(v.get_metadata())[:2] == ["zeta", "alpha"]
    # the order is not part of the structure: the same metadata in another order is the
    # same definition
    a = nnx.graphdef(nnx.Param(jnp.ones(2), zeta=1, alpha=2))
    b = nnx.graphdef(nnx.Param(jnp.ones(2), alpha=2, zeta=1))
    assert a == b and hash(a) == hash(b)
