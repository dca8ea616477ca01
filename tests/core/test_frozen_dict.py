"""FrozenDict and the freeze/unfreeze/copy/pop/pretty_repr helpers."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import serialization
from flaxen.core import frozen_dict as fd
from flaxen.core.frozen_dict import FrozenDict, copy, freeze, pop, pretty_repr, unfreeze


def test_nested_values_read_back_frozen_and_match_the_dict():
    d = FrozenDict({"b": 1, "a": {"d": 2, "c": 3}})
    assert isinstance(d["a"], FrozenDict)
    assert d["a"]["c"] == 3
    assert list(d) == ["b", "a"]
    assert len(d) == 2 and "a" in d and "z" not in d
    assert d == {"b": 1, "a": {"d": 2, "c": 3}}
    assert d.get("z") is None and d.get("z", 5) == 5
    assert isinstance(d.get("a"), FrozenDict)


def test_constructor_copies_its_input():
    src = {"k": {"j": 1}}
    d = FrozenDict(src)
    src["k"]["j"] = 99
    assert d["k"]["j"] == 1
    assert FrozenDict({"a": 1}, b=2) == {"a": 1, "b": 2}
    assert FrozenDict([("a", 1)]) == {"a": 1}


def test_mutation_raises_clear_errors():
    d = FrozenDict({"a": 1})
    with pytest.raises(ValueError, match="immutable.*copy"):
        d["a"] = 2
    # as in Flax 0.12.8: __setitem__ but no __delitem__, so Python raises AttributeError
    with pytest.raises(AttributeError, match="__delitem__"):
        del d["a"]
    with pytest.raises(AttributeError, match="immutable"):
        d.x = 1
    for name in ("update", "setdefault", "popitem", "clear"):
        assert not hasattr(d, name)


def test_hash_and_equality_ignore_order():
    a = FrozenDict({"a": 1, "b": {"c": 2}})
    b = FrozenDict({"b": {"c": 2}, "a": 1})
    assert a == b and hash(a) == hash(b)
    assert a != FrozenDict({"a": 1, "b": {"c": 3}})
    assert hash(FrozenDict()) == hash(FrozenDict({}))
    with pytest.raises(TypeError):
        hash(FrozenDict({"a": [1]}))


def test_copy_and_pop():
    d = FrozenDict({"b": 1, "a": {"x": 2}})
    c = d.copy({"z": 5, "b": 0})
    assert c == {"b": 0, "a": {"x": 2}, "z": 5} and d["b"] == 1
    rest, value = d.pop("a")
    assert value == {"x": 2} and isinstance(value, FrozenDict)
    assert rest == {"b": 1} and "a" in d
    with pytest.raises(KeyError):
        d.pop("missing")
    # `|` is not defined for FrozenDict in Flax 0.12.8 either (copy() merges)
    with pytest.raises(TypeError):
        d | {"q": 1}  # noqa: B018
    with pytest.raises(TypeError):
        {"q": 1} | d  # noqa: B018


def test_unfreeze_returns_nested_plain_dicts_sharing_leaves():
    arr = np.ones(3)
    d = FrozenDict({"b": {"z": arr}, "a": 1})
    u = d.unfreeze()
    assert type(u) is dict and type(u["b"]) is dict
    assert u["b"]["z"] is arr
    u["b"]["z"] = 0
    assert d["b"]["z"] is arr
    assert unfreeze(5) == 5
    plain = {"x": {"y": 1}}
    copied = unfreeze(plain)
    assert copied == plain and copied["x"] is not plain["x"]
    mixed = unfreeze({"f": FrozenDict({"y": 1})})
    assert type(mixed["f"]) is dict


def test_module_functions_follow_the_input_type():
    assert copy({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    assert type(copy({"a": 1})) is dict
    assert type(copy(FrozenDict({"a": 1}), {"b": 2})) is FrozenDict
    rest, v = pop({"params": 1, "s": 2}, "params")
    assert (rest, v) == ({"s": 2}, 1)
    rest, v = pop(FrozenDict({"params": 1, "s": 2}), "params")
    assert isinstance(rest, FrozenDict) and v == 1
    assert isinstance(freeze({"a": {}}), FrozenDict)
    with pytest.raises(TypeError):
        copy([1], {})
    with pytest.raises(TypeError, match="freeze"):
        freeze(5)


def test_pretty_repr_layout():
    d = FrozenDict({"a": {"b": 1, "e": {}}, "s": "x"})
    assert repr(d) == (
        "FrozenDict({\n    a: {\n        b: 1,\n        e: {},\n    },\n    s: 'x',\n})")
    assert str(d) == repr(d)
    assert repr(FrozenDict()) == "FrozenDict({})"
    assert pretty_repr({"a": {"b": 1}}, num_spaces=2) == "{\n  a: {\n    b: 1,\n  },\n}"
    assert pretty_repr(5) == "5" and pretty_repr([1, 2]) == "[1, 2]"
    assert d.pretty_repr(num_spaces=1).startswith("FrozenDict({\n a: {\n  b: 1")


def test_views():
    d = FrozenDict({"a": 1, "b": {"c": 2}})
    assert repr(d.keys()) == "frozen_dict_keys(['a', 'b'])"
    assert repr(FrozenDict().values()) == "frozen_dict_values([])"
    assert list(d.items())[0] == ("a", 1)
    assert isinstance(list(d.values())[1], FrozenDict)


def test_pytree_with_keys_in_sorted_key_order():
    d = FrozenDict({"b": 1, "a": {"d": 2, "c": 3}})
    leaves_with_path, treedef = jax.tree_util.tree_flatten_with_path(d)
    assert [v for _, v in leaves_with_path] == [3, 2, 1]
    assert leaves_with_path[0][0] == (jax.tree_util.DictKey("a"), jax.tree_util.DictKey("c"))
    rebuilt = jax.tree_util.tree_unflatten(treedef, [10, 20, 30])
    assert isinstance(rebuilt, FrozenDict) and rebuilt == {"a": {"c": 10, "d": 20}, "b": 30}
    assert jax.tree_util.tree_structure(d) == jax.tree_util.tree_structure(
        FrozenDict({"a": {"c": 0, "d": 0}, "b": 0}))


def test_under_jit_and_grad():
    params = FrozenDict({"w": jnp.ones(2), "b": {"c": jnp.zeros(())}})
    out = jax.jit(lambda p: jax.tree_util.tree_map(lambda x: x + 1, p))(params)
    assert isinstance(out, FrozenDict) and float(out["b"]["c"]) == 1.0
    grads = jax.grad(lambda p: (p["w"] * 3).sum() + p["b"]["c"])(params)
    assert isinstance(grads, FrozenDict)
    np.testing.assert_allclose(grads["w"], [3.0, 3.0])


def test_mixed_key_types_give_a_clear_error_when_flattened():
    with pytest.raises(TypeError, match="keys must be mutually comparable"):
        jax.tree_util.tree_leaves(FrozenDict({1: 1, "a": 2}))


def test_pickle_and_serialization_state_dict():
    d = FrozenDict({"b": 1, "a": {"c": np.arange(2)}})
    back = pickle.loads(pickle.dumps(d))
    assert isinstance(back, FrozenDict) and back["b"] == 1
    state = serialization.to_state_dict(d)
    assert type(state) is dict and type(state["a"]) is dict
    restored = serialization.from_state_dict(d, {"a": {"c": np.zeros(2)}, "b": 7})
    assert isinstance(restored, FrozenDict) and restored["b"] == 7
    assert fd.FrozenDict is FrozenDict
