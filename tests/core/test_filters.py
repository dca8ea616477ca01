"""Tests for the collection-filter algebra (flaxen.core._filters, public via core.scope)."""

import itertools

import pytest

from flaxen import errors
from flaxen.core.scope import (
    DenyList,
    group_collections,
    in_filter,
    intersect_filters,
    is_filter_empty,
    subtract_filters,
    union_filters,
)

FILTERS = [True, False, "a", ["a", "b"], ("c",), set(), DenyList("a"), DenyList(["a", "c"])]
COLS = ["a", "b", "c", "d"]


@pytest.mark.parametrize("a,b", list(itertools.product(FILTERS, FILTERS)))
def test_algebra_is_set_algebra(a, b):
    for col in COLS:
        x, y = in_filter(a, col), in_filter(b, col)
        assert in_filter(union_filters(a, b), col) == (x or y)
        assert in_filter(intersect_filters(a, b), col) == (x and y)
        assert in_filter(subtract_filters(a, b), col) == (x and not y)


def test_empty_and_group():
    assert is_filter_empty(False) and is_filter_empty([]) and not is_filter_empty("a")
    assert not is_filter_empty(DenyList("a"))
    groups = group_collections({"a": 1, "b": 2, "c": 3}, [["a"], "a", DenyList("c")])
    assert groups == ({"a": 1}, {}, {"b": 2})


def test_invalid_filter_names_the_value():
    with pytest.raises(errors.InvalidFilterError, match="3"):
        in_filter(3, "a")
    with pytest.raises(errors.InvalidFilterError):
        in_filter(["a", 1], "b")
