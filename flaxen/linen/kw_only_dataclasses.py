"""``dataclass``/``field`` with keyword-only fields that stay keyword-only in subclasses.

Python's own ``dataclasses`` already moves keyword-only fields (``field(kw_only=True)`` or
those after a ``KW_ONLY`` marker) to the end of ``__init__``. What it does not do is keep a
field keyword-only when a subclass re-declares it with a plain default: the redeclared
field becomes positional again, which usually breaks ("non-default argument follows default
argument"). The :func:`dataclass` here carries the keyword-only flag of an inherited field
over to the subclass's redeclaration, as ``flax.linen.kw_only_dataclasses`` does.

>>> from flaxen.linen import kw_only_dataclasses as kwd
>>> @kwd.dataclass
... class Base:
...     x: int = kwd.field(default=1, kw_only=True)
>>> @kwd.dataclass
... class Child(Base):
...     size: float
...     x: int = 2
>>> Child(4.0)
Child(x=2, size=4.0)
"""

from __future__ import annotations

import dataclasses
import re
import sys
from types import MappingProxyType
from typing import Any, TypeVar

__all__ = ["KW_ONLY", "Annotation", "Default", "FieldName", "M", "dataclass", "field"]



class _KwOnlyType:
    """The type of :data:`KW_ONLY`, Flax's keyword-only marker."""

    def __repr__(self) -> str:
        return "KW_ONLY"


# Flax's marker: the annotation of a pseudo-field (``_: KW_ONLY``) after which this module's
# dataclass() makes every field keyword-only, and the key field(kw_only=True) sets in a
# field's metadata. Python's own dataclasses.KW_ONLY works in the annotation too.
KW_ONLY = _KwOnlyType()
M = TypeVar("M", bound="Any")  # a Module class in Flax's annotations
FieldName = str
Annotation = Any
Default = Any


def field(*, metadata: Any = None, kw_only: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """``dataclasses.field``; ``kw_only=True`` makes the field keyword-only in ``__init__``.

    >>> f = field(default=1, kw_only=True)
    >>> f.default, f.kw_only
    (1, True)
    """
    if kw_only is not dataclasses.MISSING and kw_only:
        metadata = MappingProxyType({**(metadata or {}), KW_ONLY: True})
    return dataclasses.field(metadata=metadata, kw_only=kw_only, **kwargs)


_DOTTED = re.compile(r"^\s*(?:(\w+)\s*\.)?\s*(\w+)\s*$")


def _is_marker(annotation: Any, cls: type) -> bool:
    """Whether ``annotation`` is :data:`KW_ONLY`, also as a string annotation
    (``from __future__ import annotations``) naming it in ``cls``'s module."""
    if annotation is KW_ONLY:
        return True
    if not isinstance(annotation, str):
        return False
    match = _DOTTED.match(annotation)
    module = sys.modules.get(cls.__module__)
    if match is None or module is None:
        return False
    owner, name = match.groups()
    namespace = vars(module)
    if owner is not None:
        owner_value = namespace.get(owner)
        return owner_value is not None and getattr(owner_value, name, None) is KW_ONLY
    return namespace.get(name) is KW_ONLY


def _replace_markers(cls: type) -> None:
    """Turns a ``_: KW_ONLY`` pseudo-field of ``cls`` into Python's ``dataclasses.KW_ONLY``,
    which ``dataclasses`` then applies to the fields after it."""
    own = cls.__dict__.get("__annotations__", {})
    markers = [name for name, annotation in own.items() if _is_marker(annotation, cls)]
    if len(markers) > 1:
        raise TypeError(
            f"{cls.__name__} has {len(markers)} KW_ONLY markers ({', '.join(markers)}); "
            "keep one: every field after it is keyword-only.")
    for name in markers:
        own[name] = dataclasses.KW_ONLY


def _inherited_kw_only(cls: type) -> set[str]:
    """Names of fields a dataclass base of ``cls`` declares keyword-only."""
    names: set[str] = set()
    for base in reversed(cls.__mro__[1:]):
        for f in getattr(base, "__dataclass_fields__", {}).values():
            if f._field_type is dataclasses._FIELD:  # type: ignore[attr-defined]
                if f.kw_only is True:
                    names.add(f.name)
                else:
                    names.discard(f.name)
    return names


def _keep_kw_only(cls: type) -> None:
    """Marks ``cls``'s own redeclarations of inherited keyword-only fields keyword-only."""
    own = cls.__dict__.get("__annotations__", {})
    for name in _inherited_kw_only(cls) & set(own):
        value = cls.__dict__.get(name, dataclasses.MISSING)
        if isinstance(value, dataclasses.Field):
            if value.kw_only is dataclasses.MISSING:
                value.kw_only = True
        elif value is dataclasses.MISSING:
            setattr(cls, name, dataclasses.field(kw_only=True))
        else:
            setattr(cls, name, dataclasses.field(default=value, kw_only=True))


def dataclass(cls: type | None = None, extra_fields: Any = None, **kwargs: Any) -> Any:
    """``dataclasses.dataclass`` that keeps inherited keyword-only fields keyword-only.

    Takes the same keyword arguments as ``dataclasses.dataclass`` and can be used with or
    without them (``@dataclass`` or ``@dataclass(frozen=True)``). ``extra_fields`` is a list
    of ``(name, annotation, dataclasses.Field)`` triples added to the class first.

    >>> import inspect
    >>> @dataclass
    ... class A:
    ...     a: int = 1
    ...     b: int = field(default=2, kw_only=True)
    ...     c: int = 3
    >>> list(inspect.signature(A.__init__).parameters)
    ['self', 'a', 'c', 'b']
    """

    def wrap(klass: type) -> type:
        for entry in extra_fields or ():
            name, annotation, default = entry
            if not (isinstance(name, str) and isinstance(default, dataclasses.Field)):
                raise ValueError(
                    f"Expected extra_fields to a be a list of (name, type, Field) tuples; "
                    f"got {entry!r}. Build the third item with field(...)."
                )
            if "__annotations__" not in klass.__dict__:
                klass.__annotations__ = {}
            klass.__annotations__[name] = annotation
            setattr(klass, name, default)
        _replace_markers(klass)
        _keep_kw_only(klass)
        return dataclasses.dataclass(klass, **kwargs)

    return wrap if cls is None else wrap(cls)
