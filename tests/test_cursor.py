"""Tests for flaxen.cursor: edits on immutable trees, updates, searches, errors, display."""

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import errors
from flaxen.core.frozen_dict import FrozenDict, freeze
from flaxen.cursor import AccessType, _traverse_tree, cursor
from flaxen.training.train_state import TrainState


class Pair(NamedTuple):
    left: Any
    right: Any = None


@dataclasses.dataclass(frozen=True)
class Box:
    content: Any
    label: str = "box"


def test_set_and_build_on_every_container_leave_the_original_alone():
    tree = {"d": {"k": 1}, "f": freeze({"k": 2}), "l": [3, 4], "t": (5, 6),
            "n": Pair(7, 8), "b": Box(9)}
    c = cursor(tree)
    c["d"]["k"] = -1
    c["f"]["k"] = -2
    c["l"][1] = -4
    c["t"][0] = -5
    c["n"].right = -8
    c["b"].content = -9
    out = c.build()
    assert out == {"d": {"k": -1}, "f": FrozenDict({"k": -2}), "l": [3, -4], "t": (-5, 6),
                   "n": Pair(7, -8), "b": Box(-9)}
    assert type(out["f"]) is FrozenDict and type(out["n"]) is Pair
    assert tree == {"d": {"k": 1}, "f": freeze({"k": 2}), "l": [3, 4], "t": (5, 6),
                    "n": Pair(7, 8), "b": Box(9)}
    assert cursor(tree)["t"][1].set(60)["t"] == (5, 60)
    assert cursor(5).set(6) == 6


def test_named_tuple_index_and_field_are_one_child():
    c = cursor(Pair(Pair(0, 1), Pair(2, 3)))
    c.left.left = 10
    c[0].right = 11
    c[1][0] = 12
    c.right.right = 13
    assert c.build() == Pair(Pair(10, 11), Pair(12, 13))
    assert c[0][1]._path == ".left.right"


def test_later_assignments_win_and_nest():
    c = cursor({"a": 1})
    c["a"] = (1, 2)
    c["a"][1] = 20
    c["a"][1] = 30
    assert c.build() == {"a": (1, 30)}


def test_train_state_fields():
    state = TrainState.create(apply_fn=lambda x: x, params={"w": 1}, tx=optax.sgd(0.1))
    new = cursor(state).params["w"].set(2)
    assert isinstance(new, TrainState) and new.params == {"w": 2} and state.params == {"w": 1}
    found = list(cursor(state).find_all(lambda path, v: path == "params"))
    assert len(found) == 1 and found[0]._path == ".params"


def test_apply_update_replaces_changed_nodes_only():
    params = {"Dense_0": {"kernel": jnp.ones(2), "bias": jnp.zeros(2)}}

    def double_kernels(path, value):
        return value * 2 if path.endswith("kernel") else value

    out = cursor(params).apply_update(double_kernels).build()
    np.testing.assert_array_equal(out["Dense_0"]["kernel"], [2, 2])
    assert out["Dense_0"]["bias"] is params["Dense_0"]["bias"]
    np.testing.assert_array_equal(params["Dense_0"]["kernel"], [1, 1])

    # The root is never passed to update_fn; a replaced node is not walked into.
    def extend(path, value):
        return [*value, "new"] if isinstance(value, list) else value

    assert cursor([[1], [[2]]]).apply_update(extend).build() == [[1, "new"], [[2], "new"]]


def test_traverse_tree_paths_and_misuse():
    tree = Pair([0, {"a": 3}], 3)
    assert list(_traverse_tree((), tree, cond_fn=lambda p, v: v == 3)) == [
        (("left", AccessType.ATTR), (1, AccessType.ITEM), ("a", AccessType.ITEM)),
        (("right", AccessType.ATTR),),
    ]
    with pytest.raises(errors.TraverseTreeError, match="are None.*cond_fn to find"):
        next(_traverse_tree((), tree))
    with pytest.raises(errors.TraverseTreeError, match="are not None.*both are given"):
        next(_traverse_tree((), tree, update_fn=lambda p, v: v, cond_fn=lambda p, v: True))


def test_find_one_none_or_many():
    c = cursor({"x": [1, (2, 3)], "y": {"z": (4, 5)}})
    assert c.find(lambda path, v: path == "y/z")[0].set(40) == {"x": [1, (2, 3)],
                                                                 "y": {"z": (40, 5)}}
    with pytest.raises(errors.CursorFindError, match=r"paths: \['x'\]\[1\] and \['y'\]\['z'\]"):
        c.find(lambda path, v: isinstance(v, tuple))
    with pytest.raises(errors.CursorFindError, match="No object found.*find_all"):
        c.find(lambda path, v: v == "missing")
    assert list(cursor({"a": 1}).find_all(lambda path, v: False)) == []


def test_iteration_only_for_sequences():
    c = cursor([(1, 2), (3, 4)])
    for i, sub in enumerate(c):
        sub[0] += 10 * (i + 1)
    assert c.build() == [(11, 2), (23, 4)]
    assert [sub._path for sub in reversed(c)] == ["[1]", "[0]"] and len(c) == 2
    with pytest.raises(NotImplementedError, match="only implemented for tuples and lists"):
        iter(cursor({"a": 1}))
    with pytest.raises(NotImplementedError, match="__reversed__"):
        reversed(cursor({"a": 1}))


def test_operators_act_on_the_wrapped_value():
    c = cursor({"v": 6})["v"]
    assert (c + 1, 1 + c, c - 1, 10 - c, c * 2, c / 4, 13 // c, c % 4, 2 ** c) == (
        7, 7, 5, 4, 12, 1.5, 2, 2, 64)
    assert (-c, abs(-c), ~c, c << 1, c >> 1, c & 3, c | 1, c ^ 2) == (-6, 6, -7, 12, 3, 2, 7, 4)
    assert c == 6 and c != 5 and c < 7 and 5 < c and c >= 6 and divmod(c, 4) == (1, 2)
    arr = cursor([jnp.eye(2)])[0]
    np.testing.assert_array_equal(arr @ jnp.ones(2), [1, 1])
    np.testing.assert_array_equal(jnp.ones(2) + arr, [[2, 1], [1, 2]])


def test_repr_shows_changes_nested_and_aligned():
    c = cursor({"a": (1, 2)})
    assert repr(c) == "Cursor(\n  _obj={'a': (1, 2)},\n  _changes={}\n)"
    c["a"][0] = 5
    assert repr(c) == (
        "Cursor(\n"
        "  _obj={'a': (1, 2)},\n"
        "  _changes={\n"
        "    'a': Cursor(\n"
        "           _obj=(1, 2),\n"
        "           _changes={\n"
        "             0: Cursor(\n"
        "                  _obj=5,\n"
        "                  _changes={}\n"
        "                )\n"
        "           }\n"
        "         )\n"
        "  }\n"
        ")"
    )


def test_build_of_unsupported_object_says_what_is_supported():
    class Slots:
        __slots__ = ("x",)

        def __init__(self):
            self.x = 1

    c = cursor({"s": Slots()})
    c["s"].x = 2
    with pytest.raises(NotImplementedError, match="cannot rebuild.*Slots.*supported are"):
        c.build()


def test_flax_cursor_names_parent_key_dataclass_and_helpers():
    import collections
    import dataclasses

    from flaxen import cursor as cursor_mod

    c = cursor_mod.cursor({"a": [1, 2]})
    child = c["a"][0]
    pk = child._parent_key
    assert isinstance(pk, cursor_mod.ParentKey) and dataclasses.is_dataclass(pk)
    assert pk.key == 0 and pk.access_type is cursor_mod.AccessType.ITEM
    assert dataclasses.replace(pk, key=1).key == 1
    assert cursor_mod.ParentKey[int] is not None  # generic, as in Flax
    try:
        hash(pk)
    except TypeError:
        pass
    else:
        raise AssertionError("ParentKey is an unhashable (eq) dataclass, as in Flax")
    child.set(9)
    assert c.build() == {"a": [9, 2]}
    assert isinstance({}, cursor_mod.Indexable) and not isinstance(3, cursor_mod.Indexable)
    P = collections.namedtuple("P", "x")
    assert cursor_mod.is_named_tuple(P(1)) and not cursor_mod.is_named_tuple((1,))
    assert cursor_mod.CursorFindError.__name__ == "CursorFindError"
