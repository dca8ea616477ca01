"""Filters of the Flax 0.8.3 face (``flaxen.experimental.nnx.filterlib``).

Today's ``flaxen.nnx`` reads a string filter as Flax 0.12.8 does, ``WithTag``: it picks an RNG
stream's key *and* count. In Flax 0.8.3 a stream's counter carried no tag, so a string named
the stream's key alone (``nnx.split(m, 'dropout', 'params', nnx.RngCount)`` leaves the counts
to ``RngCount``), and the spec of this face says a string matches a path part. This module is
today's ``filterlib`` with that rule for strings (:class:`PathPart`), used by the face's own
entry points (``split``, ``state``, ``pop``, ``UpdateContext.split``, ``Module.split``,
``set_attributes``, ``fork``, ``Vmap``/``Scan``, ``grad(wrt=)``, ``Optimizer(wrt=)``) and by
its ``Any``, ``All`` and ``Not``.

>>> from flaxen.experimental import nnx
>>> rngs = nnx.Rngs(params=0)
>>> pred = nnx.filterlib.to_predicate('params')
>>> pred(('params', 'key'), rngs.params.key), pred(('params', 'count'), rngs.params.count)
(True, False)
>>> pred(('params', 'w'), nnx.Param(0.0))
True
"""

from __future__ import annotations

import typing as tp

from flaxen.errors import NNXFilterError
from flaxen.nnx import filterlib
from flaxen.nnx.filterlib import (
    Everything,
    Filter,
    FilterLiteral,
    HasTag,
    Nothing,
    OfType,
    Path,
    PathContains,
    PathIn,
    Predicate,
    WithTag,
    _value_type,
    ellipsis,
)
from flaxen.nnx.rnglib import RngCount

__all__ = [
    "All", "Any", "Everything", "Filter", "FilterLiteral", "HasTag", "Not", "Nothing",
    "OfType", "Path", "PathContains", "PathIn", "PathPart", "Predicate", "WithTag", "convert",
    "convert_all", "ellipsis", "filters_to_predicates", "to_predicate",
]


class PathPart(PathContains):
    """0.8.3's string filter: the path has ``key`` as a part, or the value's tag is ``key``;
    never an RNG counter (select counters with ``nnx.RngCount``). It is a ``PathContains``
    (equal to ``PathContains(key)``, with its repr), as this face has always shown it."""

    def __init__(self, key: str) -> None:
        super().__init__(key)

    def __call__(self, path: Path, value: tp.Any) -> bool:
        t = _value_type(value)
        if isinstance(t, type) and issubclass(t, RngCount):
            return False
        return self.key in path or filterlib._tag_of(value) == self.key


def to_predicate(filter: Filter) -> Predicate:  # noqa: A002 - Flax's parameter name
    """Turns any filter form into a ``(path, value) -> bool`` predicate; a string by this
    face's rule (see :class:`PathPart`)."""
    if isinstance(filter, str):
        return PathPart(filter)
    if isinstance(filter, (list, tuple)):
        return to_predicate(filter[0]) if len(filter) == 1 else Any(*filter)
    return filterlib.to_predicate(filter)


def filters_to_predicates(filters: tp.Sequence[Filter]) -> tuple[Predicate, ...]:
    """Predicates for a split: a filter matching everything may only come last (it takes
    the rest)."""
    preds = tuple(to_predicate(f) for f in filters)
    for i, p in enumerate(preds[:-1]):
        if isinstance(p, Everything):
            raise NNXFilterError(
                "", f"`...` or `True` can only be used as the last filters: filter number {i} "
                f"of {list(filters)!r} matches everything, so the filters after it would get "
                "nothing", "Put `...` (or True) last.")
    return preds


def convert(filter: Filter) -> Filter:  # noqa: A002
    """The filter with its strings (also inside lists and tuples) made :class:`PathPart`;
    any other filter is returned as it is, so ``...`` and ``True`` keep their meaning
    ("the rest") for the split they are passed to."""
    if isinstance(filter, (str, list, tuple)):
        return to_predicate(filter)
    return filter


def convert_all(filters: tp.Iterable[Filter]) -> tuple[Filter, ...]:
    """:func:`convert` of each filter."""
    return tuple(convert(f) for f in filters)


class Any(filterlib.Any):
    """Matches when any of ``filters`` matches (strings by the 0.8.3 rule)."""

    def __init__(self, *filters: Filter) -> None:
        self.predicates = tuple(to_predicate(f) for f in filters)


class All(filterlib.All):
    """Matches when every one of ``filters`` matches (strings by the 0.8.3 rule)."""

    def __init__(self, *filters: Filter) -> None:
        self.predicates = tuple(to_predicate(f) for f in filters)


class Not(filterlib.Not):
    """Matches when ``filter`` does not (a string by the 0.8.3 rule)."""

    def __init__(self, filter: Filter) -> None:  # noqa: A002
        self.predicate = to_predicate(filter)
