"""Filters: which Variables a split, state, grad or transform applies to.

A filter is any of: a Variable type (``nnx.Param``), a string (matches a path part such as an
attribute name, or an RNG stream's tag), a callable ``(path, value) -> bool``, ``...`` or
``True`` (everything), ``False`` or ``None`` (nothing), a list/tuple (any of them), or one of
the combinators below. :func:`to_predicate` turns a filter into a ``(path, value) -> bool``.

>>> from flaxen import nnx
>>> is_param = nnx.filterlib.to_predicate(nnx.Param)
>>> is_param(('kernel',), nnx.Param(1.0)), is_param(('mean',), nnx.BatchStat(0.0))
(True, False)
>>> nnx.filterlib.to_predicate(nnx.Not('bias'))(('layer', 'bias'), nnx.Param(0.0))
False

As in Flax, filters accept attributes (``f.__doc__ = '...'`` on a combinator) and
``OfType``, ``WithTag`` and ``PathContains`` are frozen dataclasses.
"""

from __future__ import annotations

import builtins
import dataclasses
import typing as tp
from types import EllipsisType

from flaxen.errors import InvalidFilterError, NNXFilterError

Path = tuple[tp.Any, ...]
Predicate = tp.Callable[[Path, tp.Any], bool]
Filter = tp.Union[type, str, Predicate, EllipsisType, bool, None, tp.Sequence[tp.Any]]  # noqa: UP007


def _value_type(value: tp.Any) -> type:
    # a VariableState (or any class marked `_stands_for_type`) stands for its `.type`
    if getattr(type(value), "_stands_for_type", False):
        return value.type
    return type(value)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class OfType:
    """Matches Variables (or VariableStates) of ``type`` or a subclass of it."""

    type: builtins.type

    def __call__(self, path: Path, value: tp.Any) -> bool:
        t = _value_type(value)
        return isinstance(t, type) and issubclass(t, self.type)

    def __repr__(self) -> str:
        return f"OfType({self.type!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OfType) and other.type is self.type

    def __hash__(self) -> int:
        return hash((OfType, self.type))


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WithTag:
    """Matches values whose ``tag`` attribute (RNG streams) equals ``tag``."""

    tag: str

    def __call__(self, path: Path, value: tp.Any) -> bool:
        return getattr(value, "tag", None) == self.tag

    def __repr__(self) -> str:
        return f"WithTag({self.tag!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WithTag) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash((WithTag, self.tag))


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class PathContains:
    """Matches values whose path has ``key`` as one of its parts, or whose tag is ``key``.

    With ``exact=False`` a path part matches when it contains ``key`` as a substring
    (``PathContains('backbone', exact=False)`` picks ``backbone1`` and ``backbone2``).
    """

    key: tp.Any
    exact: bool = True

    def __call__(self, path: Path, value: tp.Any) -> bool:
        if getattr(_value_type(value), "_string_filter_exempt", False):
            return False  # RNG counters: picked by nnx.RngCount, not by the stream's name
        if self.exact:
            return self.key in path or getattr(value, "tag", None) == self.key
        key = str(self.key)
        return any(key in str(part) for part in path)

    def __repr__(self) -> str:
        return f"PathContains({self.key!r}, exact={self.exact})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PathContains) and other.key == self.key
                and other.exact == self.exact)

    def __hash__(self) -> int:
        return hash((PathContains, self.key, self.exact))


class PathIn:
    """Matches values whose path is one of ``paths`` (tuples of keys)."""

    def __init__(self, *paths: Path) -> None:
        self.paths = frozenset(tuple(p) for p in paths)

    def __call__(self, path: Path, value: tp.Any) -> bool:
        return tuple(path) in self.paths

    def __repr__(self) -> str:
        return f"PathIn({','.join(map(repr, sorted(self.paths, key=str)))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PathIn) and other.paths == self.paths

    def __hash__(self) -> int:
        return hash((PathIn, self.paths))


class Any:
    """Matches when any of ``filters`` matches."""

    def __init__(self, *filters: Filter) -> None:
        self.predicates = tuple(to_predicate(f) for f in filters)

    def __call__(self, path: Path, value: tp.Any) -> bool:
        return any(p(path, value) for p in self.predicates)

    def __repr__(self) -> str:
        return f"Any({', '.join(map(repr, self.predicates))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Any) and other.predicates == self.predicates

    def __hash__(self) -> int:
        return hash((Any, self.predicates))


class All:
    """Matches when every one of ``filters`` matches."""

    def __init__(self, *filters: Filter) -> None:
        self.predicates = tuple(to_predicate(f) for f in filters)

    def __call__(self, path: Path, value: tp.Any) -> bool:
        return all(p(path, value) for p in self.predicates)

    def __repr__(self) -> str:
        return f"All({', '.join(map(repr, self.predicates))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, All) and other.predicates == self.predicates

    def __hash__(self) -> int:
        return hash((All, self.predicates))


class Not:
    """Matches when ``filter`` does not."""

    def __init__(self, filter: Filter) -> None:  # noqa: A002
        self.predicate = to_predicate(filter)

    def __call__(self, path: Path, value: tp.Any) -> bool:
        return not self.predicate(path, value)

    def __repr__(self) -> str:
        return f"Not({self.predicate!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Not) and other.predicate == self.predicate

    def __hash__(self) -> int:
        return hash((Not, self.predicate))


class Everything:
    """Matches everything."""

    def __call__(self, path: Path, value: tp.Any) -> bool:
        return True

    def __repr__(self) -> str:
        return "Everything()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Everything)

    def __hash__(self) -> int:
        return hash(Everything)


class Nothing:
    """Matches nothing."""

    def __call__(self, path: Path, value: tp.Any) -> bool:
        return False

    def __repr__(self) -> str:
        return "Nothing()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Nothing)

    def __hash__(self) -> int:
        return hash(Nothing)


_EVERYTHING = Everything()
_NOTHING = Nothing()


def to_predicate(filter: Filter) -> Predicate:  # noqa: A002
    """Turns any filter form into a ``(path, value) -> bool`` predicate."""
    if isinstance(filter, (Everything, Nothing, OfType, WithTag, PathContains, PathIn, Any,
                           All, Not)):
        return filter
    if filter is Ellipsis or filter is True:
        return _EVERYTHING
    if filter is None or filter is False:
        return _NOTHING
    if isinstance(filter, str):
        return PathContains(filter)
    if isinstance(filter, type):
        return OfType(filter)
    if isinstance(filter, (list, tuple)):
        if len(filter) == 1:
            return to_predicate(filter[0])
        return Any(*filter)
    if callable(filter):
        return filter
    raise InvalidFilterError(filter)


if tp.TYPE_CHECKING:
    ellipsis = EllipsisType
else:
    ellipsis = tp.Any  # Flax's name for the type of ``...`` in FilterLiteral
FilterLiteral = tp.Union[type, str, Predicate, bool, EllipsisType, None]  # noqa: UP007


class HasTag(tp.Protocol):
    """The static type of objects a :class:`WithTag` filter can match (they have ``tag``).

    >>> from flaxen import nnx
    >>> def tag_of(x: HasTag) -> str:
    ...     return x.tag
    >>> tag_of(nnx.Param(0, tag="w"))
    'w'
    """

    tag: str


def filters_to_predicates(filters: tp.Sequence[Filter]) -> tuple[Predicate, ...]:
    """Predicates for a split: ``...``/``True`` may only come last (it takes the rest)."""
    preds = tuple(to_predicate(f) for f in filters)
    for i, p in enumerate(preds[:-1]):
        if isinstance(p, Everything):
            raise NNXFilterError(
                "", f"`...` or `True` can only be used as the last filters: filter number {i} "
                f"of {list(filters)!r} matches everything, so the filters after it would get "
                "nothing", "Put `...` (or True) last.")
    return preds
