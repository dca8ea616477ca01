"""Differential tests: flaxen.traverse_util against flax.traverse_util on the same inputs."""

import collections

import pytest
from flax import struct as fstruct
from flax import traverse_util as ftu
from flax.core import FrozenDict as FFrozenDict
from hypothesis import given, settings
from hypothesis import strategies as st

from flaxen import struct as xstruct
from flaxen import traverse_util as xtu
from flaxen.core.frozen_dict import FrozenDict as XFrozenDict

NESTED = [
    {"foo": 1, "bar": {"a": 2, "b": {}}},
    {"b": {"y": 1, "x": 2}, "a": 3, "e": {"f": {"g": {}}}},
    {"params": {"Dense_0": {"kernel": 1, "bias": 2}, "Dense_1": {"kernel": 3}}, "batch_stats": {}},
    {},
    {"a": {"b": None, "c": [1, 2]}},
]


def _normalise_empty(flat, empty):
    return {k: ("<empty>" if v is empty else v) for k, v in flat.items()}


@pytest.mark.parametrize("tree", NESTED, ids=range(len(NESTED)))
@pytest.mark.parametrize("keep_empty_nodes", [False, True])
@pytest.mark.parametrize("sep", [None, "/"])
def test_flatten_unflatten_match(tree, keep_empty_nodes, sep):
    f = ftu.flatten_dict(tree, keep_empty_nodes=keep_empty_nodes, sep=sep)
    x = xtu.flatten_dict(tree, keep_empty_nodes=keep_empty_nodes, sep=sep)
    assert list(_normalise_empty(f, ftu.empty_node).items()) == list(
        _normalise_empty(x, xtu.empty_node).items())
    assert ftu.unflatten_dict(f, sep=sep) == xtu.unflatten_dict(x, sep=sep)


@pytest.mark.parametrize("tree", NESTED, ids=range(len(NESTED)))
def test_frozen_inputs_and_is_leaf_match(tree):
    f = ftu.flatten_dict(FFrozenDict(tree), is_leaf=lambda p, v: len(p) >= 2)
    x = xtu.flatten_dict(XFrozenDict(tree), is_leaf=lambda p, v: len(p) >= 2)
    assert list(f) == list(x)
    assert [dict(v) if hasattr(v, "keys") else v for v in f.values()] == [
        dict(v) if hasattr(v, "keys") else v for v in x.values()]


def test_path_aware_map_matches():
    params = {"a": {"x": 10, "y": 3}, "b": {"x": 20}, "e": {}}
    fn = lambda path, v: v + len(path) if "x" in path else -v  # noqa: E731
    assert ftu.path_aware_map(fn, params) == xtu.path_aware_map(fn, params)


def test_model_param_traversal_matches():
    params = {"params": {"Dense_0": {"kernel": 1, "bias": 2}, "w": 3, "e": {}}}
    for keyword in ("kernel", "bias", "/params/w", ""):
        f = ftu.ModelParamTraversal(lambda n, v, k=keyword: k in n)
        with pytest.warns(DeprecationWarning, match="Traversal` will be deprecated"):
            x = xtu.ModelParamTraversal(lambda n, v, k=keyword: k in n)
        assert list(f.iterate(params)) == list(x.iterate(params))
        fo, xo = f.update(lambda v: v * 10, params), x.update(lambda v: v * 10, params)
        assert fo == xo and list(fo["params"]) == list(xo["params"])
        assert dict(f.update(lambda v: -v, FFrozenDict(params))) == dict(
            x.update(lambda v: -v, XFrozenDict(params)))


# Every Traversal construction warns, in flaxen as in flax (test_deprecations_ref compares the
# warnings); here only what the traversals select and update is compared.
@pytest.mark.filterwarnings(
    "ignore:`flax.traverse_util.Traversal` will be deprecated:DeprecationWarning")
def test_traversal_chains_match():
    @fstruct.dataclass
    class FFoo:
        foo: int = 1
        bar: int = 2

    @xstruct.dataclass
    class XFoo:
        foo: int = 1
        bar: int = 2

    Pair = collections.namedtuple("Pair", "foo bar")
    cases = [
        (lambda t: t.each()["foo"], [{"foo": 1, "bar": 2}, {"foo": 3, "bar": 4}]),
        (lambda t: t.each().filter(lambda v: v > 1), [1, 2, 3]),
        (lambda t: t.merge(t["a"], t["b"]), {"a": 1, "b": 2}),
        (lambda t: t.tree(), {"a": [1, (2, 3)], "b": None}),
        (lambda t: t[1], (5, 6)),
        (lambda t: t.foo, Pair(1, 2)),
        (lambda t: t.each(), {"b": 1, "a": 2}),
    ]
    for build, data in cases:
        ft, xt = build(ftu.t_identity), build(xtu.t_identity)
        assert list(ft.iterate(data)) == list(xt.iterate(data))
        assert ft.update(lambda v: v * 2, data) == xt.update(lambda v: v * 2, data)
    # A slice traversal: both iterate the selected items; flaxen's update applies fn to each of
    # them (as iterate and set see them), where flax 0.12.8 applies it to the sub-list.
    assert list(ftu.t_identity[0:2].iterate([1, 2, 3])) == [1, 2]
    assert list(xtu.t_identity[0:2].iterate([1, 2, 3])) == [1, 2]
    assert xtu.t_identity[0:2].update(lambda v: v * 2, [1, 2, 3]) == [2, 4, 3]
    n = len(list(xtu.t_identity.each()["foo"].iterate(cases[0][1])))
    assert ftu.t_identity.each()["foo"].set(list(range(n)), cases[0][1]) == xtu.t_identity.each()[
        "foo"].set(list(range(n)), cases[0][1])
    f_out = ftu.t_identity["foo"].bar.update(lambda v: v + v, {"foo": FFoo(bar=2)})
    x_out = xtu.t_identity["foo"].bar.update(lambda v: v + v, {"foo": XFoo(bar=2)})
    assert (f_out["foo"].foo, f_out["foo"].bar) == (x_out["foo"].foo, x_out["foo"].bar)


_keys = st.text(alphabet="abcxyz", min_size=1, max_size=3)
_nested = st.recursive(
    st.integers(0, 9) | st.none(),
    lambda kids: st.dictionaries(_keys, kids, max_size=4),
    max_leaves=20,
).filter(lambda t: isinstance(t, dict))


@settings(max_examples=100, deadline=None)
@given(_nested, st.booleans())
def test_property_flatten_matches(tree, keep):
    f = ftu.flatten_dict(tree, keep_empty_nodes=keep)
    x = xtu.flatten_dict(tree, keep_empty_nodes=keep)
    assert list(_normalise_empty(f, ftu.empty_node).items()) == list(
        _normalise_empty(x, xtu.empty_node).items())
    assert ftu.unflatten_dict(f) == xtu.unflatten_dict(x)


def _ordered(x):
    # Nested dicts as nested (key, value) lists: equality then also checks key order.
    return [(k, _ordered(v)) for k, v in x.items()] if isinstance(x, dict) else x


@settings(max_examples=100, deadline=None)
@given(_nested, st.randoms(use_true_random=False))
def test_property_unflatten_any_key_order_matches(tree, rnd):
    # Shuffled keys of mixed lengths: no sub-dict path is a leaf, so Flax's result is the reference.
    flat = list(ftu.flatten_dict(tree).items())
    rnd.shuffle(flat)
    flat = dict(flat)
    assert _ordered(ftu.unflatten_dict(flat)) == _ordered(xtu.unflatten_dict(flat))
    joined = {"/".join(k): v for k, v in flat.items()}
    assert _ordered(ftu.unflatten_dict(joined, sep="/")) == _ordered(
        xtu.unflatten_dict(joined, sep="/"))
