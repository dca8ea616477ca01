"""Guards for the caches and shortcuts that make tree mode, update, state, merge and dtype
promotion fast: each must give what the general path gives, and see every change."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.layer_math import dtypes as ldt
from flaxen.nnx.nn import dtypes as ndt

# -- promote_dtype shortcut ---------------------------------------------------------------

def _slow_promote(*args, dtype=None, inexact=True):
    dt = ldt.canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    return [None if x is None else jnp.asarray(x, dt) for x in args]


@pytest.mark.parametrize("args,kw", [
    ((jnp.ones(2), jnp.ones(2), None), {}),
    ((jnp.ones(2, jnp.bfloat16), jnp.ones(2), None), {}),
    ((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.int32)), {}),
    ((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.int32)), {"inexact": False}),
    ((jnp.ones(2), jnp.ones(2)), {"dtype": jnp.bfloat16}),
    ((jnp.ones(2), jnp.ones(2)), {"dtype": "float32"}),
    ((jnp.asarray(1.0), jnp.ones(2, jnp.bfloat16)), {}),
    ((np.ones(2, np.float32), jnp.ones(2)), {}),
])
def test_promote_dtype_equals_general_path(args, kw):
    got = ldt.promote_dtype(*args, **kw)
    want = _slow_promote(*args, **kw)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        assert g.dtype == w.dtype and g.weak_type == w.weak_type
        np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


def test_promote_dtype_returns_same_arrays_when_dtypes_match():
    x, k = jnp.ones((2, 3)), jnp.ones((3, 4))
    out = ndt.promote_dtype((x, k, None))
    assert out[0] is x and out[1] is k and out[2] is None
    assert isinstance(out, tuple)


def test_promote_dtype_still_casts_and_rejects():
    out = ldt.promote_dtype(jnp.ones(2, jnp.float16), jnp.ones(2, jnp.float32))
    assert [a.dtype for a in out] == [jnp.float32, jnp.float32]
    with pytest.raises(ValueError, match="inexact"):
        ldt.promote_dtype(jnp.ones(2), dtype=jnp.int32)


def test_promote_dtype_under_jit_keeps_dtype():
    @jax.jit
    def f(x, k):
        a, b = ldt.promote_dtype(x, k)
        return a + b

    assert f(jnp.ones(2, jnp.bfloat16), jnp.ones(2, jnp.bfloat16)).dtype == jnp.bfloat16
    assert f(jnp.ones(2, jnp.bfloat16), jnp.ones(2)).dtype == jnp.float32


# -- tree mode: split / state / merge cached per walk ---------------------------------------

from flaxen import nnx  # noqa: E402
from flaxen.nnx import _graph_engine as eng  # noqa: E402
from flaxen.nnx import graphlib  # noqa: E402
from flaxen.nnx._graph_walk import TreeWalk  # noqa: E402


class Block(nnx.Module):
    def __init__(self, n, rngs):
        self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs) for _ in range(n)])
        self.extra = nnx.data({"b": nnx.Param(jnp.zeros(3)), "a": nnx.BatchStat(jnp.ones(1))})
        self.name = "block"


def _slow(node):
    gd, paths, leaves = graphlib._tree_flatten_slow(node)
    return gd, graphlib._nest(paths, leaves)


def _same(a, b):
    fa, fb = nnx.to_flat_state(a), nnx.to_flat_state(b)
    assert [p for p, _ in fa] == [p for p, _ in fb]
    assert all(x is y for (_, x), (_, y) in zip(fa, fb))


def _assert_like_slow(model, calls=4):
    want_gd, want = _slow(model)
    for _ in range(calls):  # past the second use, where the generated code takes over
        gd, st = nnx.split(model, graph=False)
        assert gd == want_gd
        _same(st, want)
        _same(nnx.state(model, graph=False), want)
    return gd, st


def test_tree_split_is_reused_and_equals_uncached_path():
    model = Block(12, nnx.Rngs(0))
    gd, st = _assert_like_slow(model)
    assert list(nnx.to_flat_state(st))[0][0] == ("extra", "a")
    assert nnx.split(model, graph=False)[0] is gd  # the cached definition itself
    assert isinstance(graphlib._walk(model).tree, TreeWalk)  # the cache was really used


def test_tree_cache_sees_attribute_changes():
    model = Block(3, nnx.Rngs(0))
    _assert_like_slow(model)
    model.new = nnx.Param(jnp.ones(2))
    _, st = _assert_like_slow(model)
    assert st["new"] is model.new
    model.layers[0].kernel = nnx.Param(jnp.zeros((2, 2)))  # a Variable replaced
    _, st = _assert_like_slow(model)
    assert st["layers"][0]["kernel"] is model.layers[0].kernel
    del model.new
    _, st = _assert_like_slow(model)
    assert "new" not in st


def test_tree_cache_sees_in_place_container_changes():
    model = Block(3, nnx.Rngs(0))
    _assert_like_slow(model)
    model.extra["c"] = nnx.Param(jnp.ones(4))
    _, st = _assert_like_slow(model)
    assert st["extra"]["c"] is model.extra["c"]
    model.layers.append(nnx.Linear(2, 2, rngs=nnx.Rngs(1)))
    _, st = _assert_like_slow(model)
    assert st["layers"][3]["kernel"] is model.layers[3].kernel
    model.extra["c"] = nnx.Param(jnp.zeros(4))  # same key, new Variable
    _, st = _assert_like_slow(model)
    assert st["extra"]["c"] is model.extra["c"]


def test_tree_cache_other_objects_of_the_same_type():
    a, b = Block(3, nnx.Rngs(0)), Block(3, nnx.Rngs(1))
    _, sa = _assert_like_slow(a)
    _, sb = _assert_like_slow(b)
    assert sa["layers"][0]["kernel"] is a.layers[0].kernel
    assert sb["layers"][0]["kernel"] is b.layers[0].kernel
    assert sa["layers"][0]["kernel"] is not sb["layers"][0]["kernel"]


def test_tree_cache_still_rejects_sharing_added_later():
    model = Block(2, nnx.Rngs(0))
    _assert_like_slow(model)
    model.other = model.layers[0]
    with pytest.raises(ValueError, match="shared references"):
        nnx.split(model, graph=False)
    with pytest.raises(ValueError, match="shared references"):
        nnx.split(model, graph=False)


def test_tree_cache_with_bare_arrays_and_filters():
    class WithArray(nnx.Pytree):
        def __init__(self):
            self.w = nnx.data(jnp.ones(2))
            self.p = nnx.Param(jnp.zeros(2))

    obj = WithArray()
    for _ in range(3):
        gd, st = nnx.split(obj, graph=False)
        assert st["w"] is obj.w and st["p"] is obj.p
    model = Block(2, nnx.Rngs(0))
    for _ in range(3):
        _, params, rest = nnx.split(model, nnx.Param, ..., graph=False)
        assert "a" not in params["extra"] and rest["extra"]["a"] is model.extra["a"]
        assert nnx.state(model, nnx.BatchStat, graph=False)["extra"]["a"] is model.extra["a"]


def test_tree_merge_lookup_equals_uncached_and_reports_mismatch():
    model = Block(3, nnx.Rngs(0))
    gd, st = nnx.split(model, graph=False)
    for _ in range(3):
        new = nnx.merge(gd, st)
        assert new.layers[2].bias is model.layers[2].bias and new.name == "block"
        assert new.extra["b"] is model.extra["b"]
    # an extra key, a missing key, a plain dict and a nested mapping at a leaf
    extra = nnx.State({**st, "zzz": nnx.Param(jnp.ones(1))})
    new = nnx.merge(gd, extra)  # the general path ignores entries the tree has no place for
    assert new.layers[0].kernel is model.layers[0].kernel
    missing = nnx.State({k: v for k, v in st.items() if k != "extra"})
    with pytest.raises(ValueError, match="not found"):
        nnx.merge(gd, missing)
    plain = nnx.to_pure_dict(st)
    new = nnx.merge(gd, plain)
    np.testing.assert_array_equal(new.layers[1].kernel[...], model.layers[1].kernel[...])
    broken = nnx.State({**st, "extra": nnx.State({"a": nnx.State({"x": model.extra["a"]}),
                                                   "b": model.extra["b"]})})
    with pytest.raises(ValueError):
        nnx.merge(gd, broken)


def test_tree_merge_of_a_walk_whose_order_differs():
    # nnx.List keys 10, 11 sort after 9 in both orders; dict keys mix orders
    model = Block(12, nnx.Rngs(0))
    gd, st = nnx.split(model, graph=False)
    for _ in range(3):
        new = nnx.merge(gd, st)
        assert [layer.kernel for layer in new.layers] == [layer.kernel for layer in
                                                         model.layers]


def test_tree_mode_engine_cache_cleared():
    model = Block(2, nnx.Rngs(0))
    _assert_like_slow(model)
    eng.clear_cache()
    _assert_like_slow(model)


# -- update: generated lookup per walk ------------------------------------------------------

def _values(model):
    return [np.asarray(v[...]) for _, v in nnx.to_flat_state(nnx.state(model))]


@pytest.mark.parametrize("graph", [True, False])
def test_update_writes_values_every_call(graph):
    model, other = Block(3, nnx.Rngs(0)), Block(3, nnx.Rngs(1))
    for i in range(4):  # past the second use: the generated lookup
        src = nnx.state(other, graph=graph)
        nnx.update(model, src)
        for a, b in zip(_values(model), _values(other)):
            np.testing.assert_array_equal(a, b)
        assert model.layers[0].kernel is not other.layers[0].kernel
        other.layers[0].kernel[...] = other.layers[0].kernel[...] + 1.0 + i
    assert isinstance(graphlib._ops.flatten_node(model).lookup, type(lambda: 0))


def test_update_partial_pure_dict_and_new_structure():
    model, other = Block(2, nnx.Rngs(0)), Block(2, nnx.Rngs(1))
    for _ in range(3):
        nnx.update(model, nnx.state(model))  # own Variables: nothing changes
    params = nnx.state(other, nnx.Param)
    nnx.update(model, params)  # a partial state: BatchStat keeps its value
    np.testing.assert_array_equal(model.extra["b"][...], other.extra["b"][...])
    np.testing.assert_array_equal(model.extra["a"][...], np.ones(1))
    nnx.update(model, nnx.to_pure_dict(nnx.state(other)))
    np.testing.assert_array_equal(model.layers[1].kernel[...], other.layers[1].kernel[...])
    model.layers.append(nnx.Linear(2, 2, rngs=nnx.Rngs(3)))  # the walk changes
    bigger = Block(3, nnx.Rngs(5))
    for _ in range(3):
        nnx.update(model, nnx.state(bigger))
        np.testing.assert_array_equal(model.layers[2].bias[...], bigger.layers[2].bias[...])
    with_extra = nnx.State({**nnx.state(bigger), "zzz": nnx.Param(jnp.ones(1))})
    nnx.update(model, with_extra)  # an entry the model lacks is ignored, as before


def test_update_copies_metadata_and_invalidates_walk():
    model = Block(1, nnx.Rngs(0))
    for _ in range(3):
        nnx.split(model)
    src = nnx.state(Block(1, nnx.Rngs(1)))
    src["layers"][0]["kernel"].set_metadata("note", "x")
    for _ in range(3):
        nnx.update(model, src)
    assert model.layers[0].kernel.get_metadata("note") == "x"
    gd, _ = nnx.split(model)
    assert "('note', 'x')" in repr(gd.nodes)  # the graphdef sees the new metadata


# -- Variable flatten aux ------------------------------------------------------------------

def test_variable_treedefs_equal_by_metadata_not_order():
    a = nnx.Param(jnp.ones(2), x=1, y="b")
    b = nnx.Param(jnp.zeros(2), y="b", x=1)
    c = nnx.Param(jnp.zeros(2), x=2, y="b")
    ta, tb, tc = (jax.tree_util.tree_structure(v) for v in (a, b, c))
    assert ta == tb and hash(ta) == hash(tb)
    assert ta != tc
    assert jax.tree_util.tree_structure(nnx.BatchStat(jnp.ones(2), x=1, y="b")) != ta
    unhashable = nnx.Param(jnp.ones(2), names=["a"])
    assert jax.tree_util.tree_structure(unhashable) == jax.tree_util.tree_structure(
        nnx.Param(jnp.ones(2), names=["a"]))


def test_tree_mode_graphdef_is_an_nnx_graphdef():
    # Flax has one GraphDef class for both modes: code checks isinstance(gd, nnx.GraphDef)
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    tree_gd, _ = nnx.split(model, graph=False)
    graph_gd, _ = nnx.split(model)
    assert isinstance(tree_gd, nnx.GraphDef) and isinstance(graph_gd, nnx.GraphDef)
    assert issubclass(type(tree_gd), nnx.GraphDef)
    assert not isinstance(model, nnx.GraphDef)
    # a tree-mode definition still round-trips in tree mode through the call API
    out, (gd, _) = nnx.call(nnx.split(model, graph=False))(jnp.ones((1, 2)))
    assert type(gd) is type(tree_gd)
