"""Filters: which Variables a split, state, grad or transform applies to.

A filter is any of: a Variable type (``nnx.Param``), a string (``WithTag``: matches values
whose ``tag`` is that string, such as an RNG stream's key and count), a callable
``(path, value) -> bool``, ``...`` or ``True`` (everything), ``False`` or ``None`` (nothing), a
list/tuple (any of them), or one of the combinators below. :func:`to_predicate` turns a filter
into a ``(path, value) -> bool``. To match a path part (an attribute name) use
``PathContains``. (The Flax 0.8.3 face, ``flaxen.experimental.nnx``, keeps its own string rule.)

>>> from flaxen import nnx
>>> is_param = nnx.filterlib.to_predicate(nnx.Param)
>>> is_param(('kernel',), nnx.Param(1.0)), is_param(('mean',), nnx.BatchStat(0.0))
(True, False)
>>> nnx.filterlib.to_predicate(nnx.Not(nnx.PathContains('bias')))(('l', 'bias'), nnx.Param(0))
False
>>> nnx.filterlib.to_predicate('params')((), nnx.Rngs(params=0).params.count)
True

As in Flax, filters accept attributes (``f.__doc__ = '...'`` on a combinator) and
``OfType``, ``WithTag`` and ``PathContains`` are frozen dataclasses.
"""

from __future__ import annotations

import builtins
import dataclasses
import typing as tp
from types import EllipsisType

from flaxen.errors import InvalidFilterError, NNXFilterError
from flaxen.typing import PathParts as PathParts  # Flax imports it here from flax.typing

Path = tuple[tp.Any, ...]
Predicate = tp.Callable[[Path, tp.Any], bool]
Filter = tp.Union[type, str, Predicate, EllipsisType, bool, None, tp.Sequence[tp.Any]]  # noqa: UP007


def _value_type(value: tp.Any) -> type:
    # a snapshot (any class marked `_stands_for_type`, as 0.8.3's VariableState) stands for
    # its `.type`
    if getattr(type(value), "_stands_for_type", False):
        return value.type
    return type(value)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class OfType:
    """Matches Variables (or snapshots of them) of ``type`` or a subclass of it."""

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


_NO_TAG = object()


def _tag_of(value: tp.Any) -> tp.Any:
    # a Variable's metadata is read directly: its attribute lookup of a missing name builds
    # an error message, and a split asks this of every Variable
    meta = getattr(value, "_var_metadata", None)
    if type(meta) is dict:
        return meta.get("tag", _NO_TAG)
    return getattr(value, "tag", _NO_TAG)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WithTag:
    """Matches values that have a ``tag`` attribute equal to ``tag`` (an RNG stream, its
    key and count, a Variable created with ``tag=``)."""

    tag: str

    def __call__(self, path: Path, value: tp.Any) -> bool:
        found = _tag_of(value)
        return found is not _NO_TAG and found == self.tag

    def __repr__(self) -> str:
        return f"WithTag({self.tag!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WithTag) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash((WithTag, self.tag))


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class PathContains:
    """Matches values whose path has ``key`` as one of its parts (equal, not a substring).

    With ``exact=False`` a path part matches when it contains ``key`` as a substring
    (``PathContains('backbone', exact=False)`` picks ``backbone1`` and ``backbone2``).
    """

    key: tp.Any
    exact: bool = True

    def __call__(self, path: Path, value: tp.Any) -> bool:
        if self.exact:
            return self.key in path
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


class _InvalidFilter(InvalidFilterError, TypeError, ValueError):
    """Raised by :func:`to_predicate`: flaxen's filter error, the ``TypeError`` Flax's NNX
    means to raise for the same mistake and the ``ValueError`` its message formatting
    raises instead (Flax 0.12.8), so any of those ``except`` clauses catches it."""


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
        return WithTag(filter)
    if isinstance(filter, type):
        return OfType(filter)
    if isinstance(filter, (list, tuple)):
        return Any(*filter)
    if callable(filter):
        return filter
    raise _InvalidFilter(filter)


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


def _takes_all(f: tp.Any) -> bool:
    return f is Ellipsis or f is True


def filters_to_predicates(filters: tp.Sequence[Filter]) -> tuple[Predicate, ...]:
    """Predicates for a split: ``...``/``True`` may only be followed by more of themselves
    (the first takes the rest, as in Flax)."""
    for i, f in enumerate(filters):
        if _takes_all(f) and not all(_takes_all(g) for g in filters[i + 1:]):
            raise NNXFilterError(
                "", f"`...` or `True` can only be used as the last filters: filter number {i} "
                f"of {list(filters)!r} matches everything, so the filters after it would get "
                "nothing", "Put `...` (or True) last.")
    return tuple(to_predicate(f) for f in filters)
