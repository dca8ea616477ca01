"""flaxen.traverse_util: flatten/unflatten_dict, path_aware_map, Traversals, ModelParamTraversal."""

import collections
import copy
import dataclasses
import pickle

import pytest

from flaxen import serialization, struct
from flaxen import traverse_util as tu
from flaxen.core.frozen_dict import FrozenDict

# Every Traversal construction warns (tests/test_deprecation_warnings.py asserts it); the
# tests below are about what traversals select and update, so the warning is expected there.
_traversal_deprecated = pytest.mark.filterwarnings(
    "ignore:`flax.traverse_util.Traversal` will be deprecated:DeprecationWarning")


@struct.dataclass
class Foo:
    foo: int = 1
    bar: int = 2


def test_flatten_drops_empty_nodes_unless_asked():
    xs = {"foo": 1, "bar": {"a": 2, "b": {}}}
    assert tu.flatten_dict(xs) == {("foo",): 1, ("bar", "a"): 2}
    kept = tu.flatten_dict(xs, keep_empty_nodes=True)
    assert kept[("bar", "b")] is tu.empty_node
    assert tu.unflatten_dict(kept) == xs
    assert tu.unflatten_dict(tu.flatten_dict(xs)) == {"foo": 1, "bar": {"a": 2}}
    assert tu.flatten_dict({}) == {} and tu.flatten_dict({}, keep_empty_nodes=True) == {}


def test_flatten_keeps_insertion_order_and_handles_frozen_dicts():
    flat = tu.flatten_dict({"b": {"y": 1, "x": 2}, "a": FrozenDict({"q": {}, "r": 3})})
    assert list(flat) == [("b", "y"), ("b", "x"), ("a", "r")]
    assert tu.flatten_dict(FrozenDict({"a": {"b": None}})) == {("a", "b"): None}


def test_sep_joins_and_splits_keys():
    flat = tu.flatten_dict({"a": {"b": 1, "c": {}}}, keep_empty_nodes=True, sep=".")
    assert flat == {"a.b": 1, "a.c": tu.empty_node}
    assert tu.unflatten_dict(flat, sep=".") == {"a": {"b": 1, "c": {}}}
    with pytest.raises(TypeError, match="needs str keys"):
        tu.flatten_dict({1: {2: 3}}, sep="/")


def test_is_leaf_stops_descent():
    calls = []

    def is_leaf(path, value):
        calls.append(path)
        return path == ("a",)

    flat = tu.flatten_dict({"a": {"b": 1}, "c": {"d": 2}}, is_leaf=is_leaf)
    assert flat == {("a",): {"b": 1}, ("c", "d"): 2}
    assert calls == [(), ("a",), ("c",)]
    assert tu.flatten_dict({"a": 1}, is_leaf=lambda p, v: True) == {(): {"a": 1}}


def test_flatten_rejects_non_dicts():
    with pytest.raises(TypeError, match="expects a dict"):
        tu.flatten_dict([1, 2])
    with pytest.raises(AssertionError):  # Flax raises AssertionError here; stay catchable
        tu.flatten_dict(5)


def test_unflatten_conflicts_and_empty_paths_raise():
    with pytest.raises(ValueError, match=r"key \('a',\) holds a leaf, but key \('a', 'b'\)"):
        tu.unflatten_dict({("a",): 1, ("a", "b"): 2})
    with pytest.raises(TypeError):  # what Flax raises there: stays catchable as that
        tu.unflatten_dict({("a",): 1, ("a", "b"): 2})
    with pytest.raises(ValueError, match="both a leaf and a sub-dict"):
        tu.unflatten_dict({("a", "b"): 2, ("a",): 1})
    with pytest.raises(ValueError, match="empty path"):
        tu.unflatten_dict({(): 1})
    assert tu.unflatten_dict(FrozenDict({("a", "b"): 1})) == {"a": {"b": 1}}
    # str keys are paths too
    assert tu.unflatten_dict({"ab": 1, ("c",): 2}) == {"a": {"b": 1}, "c": 2}
    assert tu.unflatten_dict({("a",): None, ("b", "c"): None}) == {"a": None, "b": {"c": None}}
    with pytest.raises(ValueError, match="both a leaf and a sub-dict"):
        tu.unflatten_dict({("a",): None, ("a", "b"): 1})
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({("a",): [1], ("a", "b"): 1})
    leaf = {"x": 1}
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({("a",): leaf, ("a", "b"): 2})
    assert leaf == {"x": 1}  # Flax would merge into (mutate) the leaf dict
    with pytest.raises(ValueError, match="both a leaf and a sub-dict"):
        tu.unflatten_dict({("a", "b", "c"): 1, ("a", "b"): 2, ("a", "b", "d"): 3})


def test_path_aware_map():
    params = {"a": {"x": 10, "y": 3}, "b": {"x": 20}, "e": {}}
    out = tu.path_aware_map(lambda path, x: x + 5 if "x" in path else -x, params)
    assert out == {"a": {"x": 15, "y": -3}, "b": {"x": 25}, "e": {}}
    seen = tu.path_aware_map(lambda path, x: path, FrozenDict({"a": {"b": 1}}))
    assert seen == {"a": {"b": ("a", "b")}}


def test_empty_node_is_a_singleton_pytree_and_serializable():
    assert tu._EmptyNode() is tu.empty_node
    assert copy.deepcopy(tu.empty_node) is tu.empty_node
    assert pickle.loads(pickle.dumps(tu.empty_node)) is tu.empty_node
    assert repr(tu.empty_node) == "_EmptyNode()"
    assert serialization.to_state_dict(tu.empty_node) == {}
    assert serialization.from_state_dict(tu.empty_node, {}) is tu.empty_node


@_traversal_deprecated
def test_documented_traversal_examples():
    assert list(tu.TraverseAttr("foo").iterate(Foo(foo=1))) == [1]
    t = tu.t_identity.each()["foo"]
    assert list(t.iterate([{"foo": 1, "bar": 2}, {"foo": 3, "bar": 4}])) == [1, 3]
    out = tu.t_identity["foo"].bar.update(lambda x: x + x, {"foo": Foo(bar=2)})
    assert out == {"foo": Foo(foo=1, bar=4)}


@_traversal_deprecated
def test_chaining_builds_compositions():
    ti = tu.t_identity
    for t in (ti["a"], ti.a, ti.each(), ti.filter(bool), ti.tree(), ti.merge(ti), ti.compose(ti)):
        assert isinstance(t, tu.TraverseCompose)
    with pytest.raises(TypeError):
        tu.Traversal()
    with pytest.raises(AttributeError):
        ti.__not_a_traversal__  # noqa: B018


@_traversal_deprecated
def test_set_checks_the_number_of_values():
    t = tu.t_identity.each()["foo"]
    inputs = [{"foo": 1}, {"foo": 3}]
    assert t.set([9, 8], inputs) == [{"foo": 9}, {"foo": 8}]
    assert inputs == [{"foo": 1}, {"foo": 3}]
    with pytest.raises(ValueError, match="Not enough values"):
        t.set([9], inputs)
    with pytest.raises(ValueError, match="Too many values"):
        t.set([9, 8, 7], inputs)


@_traversal_deprecated
def test_each_filter_merge_tree_items_and_attrs():
    ti = tu.t_identity
    assert ti.each().update(lambda x: -x, {"b": 1, "a": 2}) == {"b": -1, "a": -2}
    assert ti.each().update(lambda x: -x, (1, 2)) == (-1, -2)
    assert isinstance(ti.each().update(lambda x: x, FrozenDict({"a": 1})), FrozenDict)
    evens = ti.each().filter(lambda x: x > 1)
    assert list(evens.iterate([1, 2, 3])) == [2, 3]
    assert evens.update(lambda x: 0, [1, 2, 3]) == [1, 0, 0]
    both = ti.merge(ti["a"], ti["b"])
    assert list(both.iterate({"a": 1, "b": 2})) == [1, 2]
    assert tu.TraverseMerge(ti["a"], ti["a"]).update(lambda x: x + 1, {"a": 1}) == {"a": 3}
    assert list(ti.tree().iterate({"a": [1, (2, 3)], "b": None})) == [1, 2, 3]
    assert ti.tree().update(lambda x: x * 10, {"a": [1, (2, 3)]}) == {"a": [10, (20, 30)]}
    assert ti[1].update(lambda x: x + 1, (0, 1)) == (0, 2)
    assert list(ti[0:2].iterate([5, 6, 7])) == [5, 6]
    assert ti["a"].update(lambda x: x + 1, FrozenDict({"a": 1})) == {"a": 2}
    Pair = collections.namedtuple("Pair", "foo bar")
    assert ti.foo.update(lambda x: x + 1, Pair(1, 2)) == Pair(2, 2)
    assert ti[0].update(lambda x: 9, Pair(1, 2)) == Pair(9, 2)

    class Obj:
        def __init__(self):
            self.foo = 1

    o = Obj()
    r = ti.foo.update(lambda x: x + 1, o)
    assert (r.foo, o.foo) == (2, 1)
    with pytest.raises(KeyError):
        list(ti["zz"].iterate({"a": 1}))
    assert tu.TraverseId().update(lambda x: x + 1, 1) == 2


@_traversal_deprecated
def test_update_never_mutates_inputs():
    data = {"a": [1, 2], "b": {"c": 3}}
    snapshot = copy.deepcopy(data)
    tu.t_identity["a"][0].update(lambda x: 100, data)
    tu.t_identity["b"]["c"].update(lambda x: 100, data)
    assert data == snapshot


def test_model_param_traversal():
    params = {"Dense_0": {"kernel": 1, "bias": 2}, "w": 3, "e": {}}
    names = []

    def pick(name, value):
        names.append(name)
        return "kernel" in name

    with pytest.warns(DeprecationWarning, match="Traversal` will be deprecated"):
        t = tu.ModelParamTraversal(pick)
    assert list(t.iterate(params)) == [1]
    assert names == ["/Dense_0/bias", "/Dense_0/kernel", "/w"]
    out = t.update(lambda x: x * 10, params)
    assert out == {"Dense_0": {"bias": 2, "kernel": 10}, "e": {}, "w": 3}
    assert params["Dense_0"]["kernel"] == 1
    assert isinstance(t.update(lambda x: x, FrozenDict(params)), FrozenDict)
    with pytest.raises(ValueError, match="nested dict"):
        list(t.iterate([1]))


@_traversal_deprecated
def test_model_param_traversal_on_a_dataclass_field():
    @dataclasses.dataclass
    class Holder:
        params: dict

    h = Holder({"a": {"kernel": 1}})
    out = tu.t_identity.params.update(
        lambda p: tu.ModelParamTraversal(lambda n, _: True).update(lambda x: -x, p), h)
    assert out.params == {"a": {"kernel": -1}}


def _slow_unflatten(flat):
    # The plain algorithm: walk from the root for every key.
    out = {}
    for path, value in flat.items():
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = {} if value is tu.empty_node else value
    return out


def _same(a, b):
    # Equal, with every dict's keys in the same order.
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_unflatten_mixed_lengths_keeps_order():
    flat = {
        ("p", "a", "k"): 1, ("p", "a", "b"): 2, ("p", "x"): 3, ("p", "b", "c", "k"): 4,
        ("p", "b", "c", "j"): 5, ("p", "a", "z"): 6, ("q",): 7, ("p", "b", "d"): 8,
        ("p", "b", "c", "i"): 9, ("r", "s", "t", "u", "v", "w", "x", "y", "z"): 10,
        ("p", "e"): tu.empty_node,
    }
    assert _same(tu.unflatten_dict(flat), _slow_unflatten(flat))
    many = {tuple("abcdefghijkl"[:n]) + ("leaf",): n for n in range(12)}  # 12 lengths
    assert _same(tu.unflatten_dict(many), _slow_unflatten(many))
    joined = {"/".join(k): v for k, v in many.items()}
    assert _same(tu.unflatten_dict(joined, sep="/"), _slow_unflatten(many))
    # Equal but not identical parts still land in the same sub-dict.
    flat = {("a" * 3, "b"): 1, ("".join(["a"] * 3), "c"): 2}
    assert tu.unflatten_dict(flat) == {"aaa": {"b": 1, "c": 2}}


def test_unflatten_sep_edge_cases():
    flat = {"x": 1, "/y": 2, "a/b": 3, "/z": 4, "a//c": 6, "a/d": 7}
    assert tu.unflatten_dict({"": 5, "b": 1}, sep="/") == {"": 5, "b": 1}
    expected = _slow_unflatten({tuple(k.split("/")): v for k, v in flat.items()})
    assert _same(tu.unflatten_dict(flat, sep="/"), expected)
    # A separator that overlaps itself splits like str.split.
    flat = {"x///y": 1, "x//z": 2}
    assert tu.unflatten_dict(flat, sep="//") == {"x": {"/y": 1, "z": 2}}
    with pytest.raises(TypeError, match="needs str keys"):
        tu.unflatten_dict({("a", "b"): 1}, sep="/")
    with pytest.raises(AttributeError):  # what Flax raises, too
        tu.unflatten_dict({1: 1}, sep="/")
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({"a": 1, "a/b": 2}, sep="/")
    leaf = {"x": 1}
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({"a/b": 0, "a": leaf, "a/c": 2}, sep="/")
    assert leaf == {"x": 1}


def test_unflatten_never_writes_into_leaves():
    arr = [0, 1]
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({("a",): arr, ("a", 0): 9})
    assert arr == [0, 1]
    leaf = {"b": {}}
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({("x", "y"): 0, ("a",): leaf, ("a", "b", "c"): 1})
    assert leaf == {"b": {}}
    with pytest.raises(ValueError, match="holds a leaf"):  # a revisit after other keys
        tu.unflatten_dict(
            {("a", "b", "c"): 1, ("d", "e", "f"): 2, ("a", "b"): 3, ("a", "b", "g"): 4})
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({("a",): tu.empty_node, ("a", "b"): 1})
    ordered = collections.OrderedDict(x=1)
    with pytest.raises(ValueError, match="holds a leaf"):
        tu.unflatten_dict({("a",): ordered, ("a", "b"): 1})
    assert ordered == {"x": 1}
    # Revisiting a sub-dict built earlier is fine.
    flat = {("a", "b", "c"): 1, ("d", "e", "f"): 2, ("a", "b", "g"): 3,
            ("a", "h", "i"): {"leaf": 1}}
    assert _same(tu.unflatten_dict(flat), _slow_unflatten(flat))
    with pytest.raises(TypeError):
        tu.unflatten_dict({1: 2})


def test_unflatten_random_keys_match_plain_algorithm():
    import random

    rnd = random.Random(0)
    for _ in range(400):
        flat = {}
        for _ in range(rnd.randint(1, 12)):
            path = tuple(rnd.choice("ab") for _ in range(rnd.randint(1, 5)))
            flat[path] = rnd.choice([1, None, tu.empty_node, [2]])
        keys = set(flat)
        conflict = any(p[:i] in keys for p in flat for i in range(1, len(p)))
        if conflict:
            with pytest.raises(ValueError):
                tu.unflatten_dict(flat)
        else:
            assert _same(tu.unflatten_dict(flat), _slow_unflatten(flat)), flat
            joined = {"/".join(k): v for k, v in flat.items()}
            assert _same(tu.unflatten_dict(joined, sep="/"), _slow_unflatten(flat))


@_traversal_deprecated
def test_slice_items_update_each_selected_item():
    assert tu.t_identity[1:3].update(lambda x: x + x, (1, 2, 3, 4)) == (1, 4, 6, 4)
    assert tu.t_identity[::2].update(lambda x: -x, [1, 2, 3, 4]) == [-1, 2, -3, 4]
    assert list(tu.t_identity[1:3].iterate((1, 2, 3, 4))) == [2, 3]


def test_names_flax_code_imports_from_traverse_util():
    from flaxen import struct as struct_mod
    from flaxen import traverse_util as tu
    from flaxen.traverse_util import PathParts, VariableDict, struct  # noqa: F401

    assert struct is struct_mod and tu.struct.PyTreeNode is struct_mod.PyTreeNode
