"""Collection filters: which variable collections (or RNG streams) a rule applies to.

A filter is ``True`` (everything), ``False`` (nothing), a name, a collection of names, or
``DenyList(filter)`` (everything the inner filter does not match). ``init``/``apply`` use
filters for ``mutable=``; the lifted transforms use them to decide which collections and
RNG streams are vectorised, broadcast, carried, ... This module is re-exported from
``flaxen.core.scope`` (the public path, as in Flax).

>>> in_filter(['params', 'batch_stats'], 'params')
True
>>> in_filter(DenyList('intermediates'), 'intermediates')
False
>>> sorted(union_filters('a', ['b']))
['a', 'b']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from flaxen import errors


@dataclasses.dataclass(frozen=True)
class DenyList:
    """A filter that matches every collection *except* those matched by ``deny``.

    >>> f = DenyList(['intermediates'])
    >>> in_filter(f, 'params'), in_filter(f, 'intermediates')
    (True, False)
    """

    deny: Any

    # Flax sorts filters mixed with collection names (e.g. keys of a mutable spec): names
    # come first, DenyLists after them, DenyLists among themselves by their text.
    def __lt__(self, other: Any) -> bool:
        if isinstance(other, str):
            return False
        if isinstance(other, DenyList):
            return str(self.deny) < str(other.deny)
        return NotImplemented

    def __gt__(self, other: Any) -> bool:
        if isinstance(other, str):
            return True
        if isinstance(other, DenyList):
            return str(self.deny) > str(other.deny)
        return NotImplemented


CollectionFilter = bool | str | Collection[str] | DenyList
PRNGSequenceFilter = CollectionFilter
Filter = CollectionFilter


def _check_names(filter_like: Any) -> None:
    for item in filter_like:
        if not isinstance(item, str):
            raise errors.InvalidFilterError(filter_like)


def in_filter(filter_like: CollectionFilter, col: str) -> bool:
    """Returns whether collection ``col`` is matched by ``filter_like``.

    >>> in_filter(True, 'params'), in_filter('params', 'cache'), in_filter(('a', 'b'), 'b')
    (True, False, True)
    """
    if isinstance(filter_like, str):
        return col == filter_like
    if filter_like is True or filter_like is False:
        return filter_like
    if isinstance(filter_like, DenyList):
        return not in_filter(filter_like.deny, col)
    if isinstance(filter_like, Collection) and not isinstance(filter_like, Mapping):
        _check_names(filter_like)
        return col in filter_like
    raise errors.InvalidFilterError(filter_like)


def check_filter(filter_like: Any) -> None:
    """Raises :class:`~flaxen.errors.InvalidFilterError` unless ``filter_like`` is a filter.

    Called eagerly by ``init``/``apply``/``bind`` and the lifted transforms, so a typo such
    as ``mutable=3`` fails where it is written rather than at first use.
    """
    if isinstance(filter_like, (str, bool)):
        return
    if isinstance(filter_like, DenyList):
        check_filter(filter_like.deny)
        return
    if isinstance(filter_like, Collection) and not isinstance(filter_like, Mapping):
        _check_names(filter_like)
        return
    raise errors.InvalidFilterError(filter_like)


def filter_to_set(x: CollectionFilter) -> set[str]:
    """The finite set of names a filter matches; ``True`` and ``DenyList`` are infinite."""
    if x is False:
        return set()
    if isinstance(x, str):
        return {x}
    if x is True or isinstance(x, DenyList):
        raise ValueError(
            f"Filter {x!r} matches infinitely many names and has no set form; "
            "use in_filter(filter, name) to test membership instead."
        )
    if isinstance(x, Collection) and not isinstance(x, Mapping):
        _check_names(x)
        return set(x)
    raise errors.InvalidFilterError(x)


def is_filter_empty(filter_like: CollectionFilter) -> bool:
    """Returns True when the filter certainly matches nothing (``False`` or empty)."""
    if filter_like is False:
        return True
    if filter_like is True or isinstance(filter_like, (str, DenyList)):
        return False
    if isinstance(filter_like, Collection) and not isinstance(filter_like, Mapping):
        return len(filter_like) == 0
    raise errors.InvalidFilterError(filter_like)


def union_filters(a: CollectionFilter, b: CollectionFilter) -> CollectionFilter:
    """A filter matching what ``a`` or ``b`` matches.

    >>> union_filters(DenyList('a'), 'a')
    True
    """
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    if isinstance(a, DenyList) and isinstance(b, DenyList):
        return _deny(intersect_filters(a.deny, b.deny))
    if isinstance(b, DenyList):
        a, b = b, a
    if isinstance(a, DenyList):
        return _deny(subtract_filters(a.deny, b))
    return filter_to_set(a) | filter_to_set(b)


def intersect_filters(a: CollectionFilter, b: CollectionFilter) -> CollectionFilter:
    """A filter matching what both ``a`` and ``b`` match.

    >>> intersect_filters(['a', 'b'], DenyList('a'))
    {'b'}
    """
    if a is True:
        return b
    if b is True:
        return a
    if a is False or b is False:
        return set()
    if isinstance(a, DenyList) and isinstance(b, DenyList):
        return DenyList(union_filters(a.deny, b.deny))
    if isinstance(b, DenyList):
        a, b = b, a
    if isinstance(a, DenyList):
        return subtract_filters(b, a.deny)
    return filter_to_set(a) & filter_to_set(b)


def subtract_filters(a: CollectionFilter, b: CollectionFilter) -> CollectionFilter:
    """A filter matching what ``a`` matches and ``b`` does not.

    >>> subtract_filters(True, 'params')
    DenyList(deny='params')
    """
    if b is True:
        return False
    if b is False:
        return a
    if isinstance(b, DenyList):
        return intersect_filters(a, b.deny)
    if a is True:
        return DenyList(b)
    if isinstance(a, DenyList):
        return DenyList(union_filters(a.deny, b))
    if a is False:
        return set()
    return filter_to_set(a) - filter_to_set(b)


def _deny(inner: CollectionFilter) -> CollectionFilter:
    # DenyList(False) matches everything; collapse it so later checks can use `is True`.
    if inner is False or (isinstance(inner, (set, frozenset)) and not inner):
        return True
    if isinstance(inner, DenyList):
        return inner.deny
    return DenyList(inner)


def group_collections(
    xs: Mapping[str, Any], col_filters: Sequence[CollectionFilter]
) -> tuple[dict[str, Any], ...]:
    """Splits ``xs`` by filter: each collection goes to the *first* filter that matches it.

    Collections matched by no filter are left out. Returns one dict per filter.

    >>> group_collections({'params': 1, 'stats': 2, 'cache': 3}, [['params'], True])
    ({'params': 1}, {'stats': 2, 'cache': 3})
    """
    remaining = list(xs.keys())
    groups = []
    for col_filter in col_filters:
        group = {}
        rest = []
        for col in remaining:
            if in_filter(col_filter, col):
                group[col] = xs[col]
            else:
                rest.append(col)
        remaining = rest
        groups.append(group)
    return tuple(groups)


def filter_names(filter_like: CollectionFilter, names: Iterable[str]) -> list[str]:
    """The names among ``names`` that ``filter_like`` matches, in order."""
    return [name for name in names if in_filter(filter_like, name)]
