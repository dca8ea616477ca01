"""``dataclass``/``field`` with keyword-only fields moved to the end, as Flax's module does.

A field marked keyword-only (``field(kw_only=True)``, or declared after a ``_: KW_ONLY``
pseudo-field) is listed *after* every other field: in ``dataclasses.fields``, the repr and
``__init__``'s parameters. That lets a base class give such a field a default while a
subclass adds required fields. As in Flax, the field stays positional-or-keyword in the
signature and ``__match_args__``, but ``__init__`` refuses more positional arguments than
there are fields not marked keyword-only. A subclass that redeclares an inherited
keyword-only field keeps it at the end.

>>> from flaxen.linen import kw_only_dataclasses as kwd
>>> @kwd.dataclass
... class Base:
...     x: int = kwd.field(default=1, kw_only=True)
>>> @kwd.dataclass
... class Child(Base):
...     size: float
...     x: int = 2
>>> Child(4.0)
Child(size=4.0, x=2)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
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
    """``dataclasses.field``; ``kw_only=True`` marks the field (in its metadata) to be moved
    after the other fields by :func:`dataclass`. Such a field needs a default.

    >>> f = field(default=1, kw_only=True)
    >>> f.default, f.metadata[KW_ONLY]
    (1, True)
    """
    if kw_only is not dataclasses.MISSING and kw_only:
        if (kwargs.get("default", dataclasses.MISSING) is dataclasses.MISSING
                and kwargs.get("default_factory", dataclasses.MISSING) is dataclasses.MISSING):
            raise ValueError(
                "Keyword-only fields with no default are not supported: a field moved after "
                "the others needs a default (default=... or default_factory=...).")
        metadata = {**(metadata or {}), KW_ONLY: True}
    return dataclasses.field(metadata=metadata, **kwargs)


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


def _mark(value: Any) -> Any:
    """A field (default or ``Field``) declared after the marker, marked keyword-only."""
    if isinstance(value, dataclasses.Field):
        value.metadata = MappingProxyType({**value.metadata, KW_ONLY: True})
        return value
    return field(default=value, kw_only=True)


def _is_marked(value: Any) -> bool:
    return isinstance(value, dataclasses.Field) and bool(value.metadata.get(KW_ONLY))


def _apply_marker(cls: type, own: dict) -> None:
    """Marks the fields after a ``_: KW_ONLY`` pseudo-field and drops the pseudo-field."""
    markers = [name for name, annotation in own.items() if _is_marker(annotation, cls)]
    if len(markers) > 1:
        raise TypeError(
            f"{cls.__name__} has {len(markers)} KW_ONLY markers ({', '.join(markers)}); "
            "keep one: every field after it is keyword-only.")
    if not markers:
        return
    names = list(own)
    for name in names[names.index(markers[0]) + 1:]:
        if name not in cls.__dict__:
            raise ValueError(
                f"Keyword-only fields with no default are not supported: {cls.__name__}.{name} "
                "follows the KW_ONLY marker without a default; give it one or move it above.")
        setattr(cls, name, _mark(cls.__dict__[name]))
    del own[markers[0]]


def dataclass(cls: type | None = None, extra_fields: Any = None, **kwargs: Any) -> Any:
    """``dataclasses.dataclass`` that moves keyword-only fields (inherited ones included)
    after the others.

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
        if "__annotations__" not in klass.__dict__:
            klass.__annotations__ = {}
        own: dict = klass.__dict__["__annotations__"]
        _apply_marker(klass, own)
        for entry in extra_fields or ():
            name, annotation, default = entry
            if not (isinstance(name, str) and isinstance(default, dataclasses.Field)):
                raise ValueError(
                    f"Expected extra_fields to a be a list of (name, type, Field) tuples; "
                    f"got {entry!r}. Build the third item with field(...)."
                )
            setattr(klass, name, default)
            own[name] = annotation

        # dataclasses takes inherited fields from each base's __dataclass_fields__: the
        # keyword-only ones are taken out there for the duration (and put back after) so
        # that they are declared again here, after this class's own fields.
        moved: dict[str, tuple[Any, Any]] = {}
        saved: dict[type, dict] = {}
        for base in reversed(klass.__mro__[1:]):
            fields = base.__dict__.get("__dataclass_fields__")
            if fields is None:
                continue
            saved[base] = dict(fields)
            base_own = base.__dict__.get("__annotations__", {})
            for name, f in list(fields.items()):
                if f._field_type is not dataclasses._FIELD:  # type: ignore[attr-defined]
                    continue
                if _is_marked(f) or name in moved:
                    moved[name] = (base_own.get(name, f.type), f)
                    del fields[name]
        for name, annotation in list(own.items()):
            value = klass.__dict__.get(name)
            if _is_marked(value) or name in moved:
                del own[name]
                moved[name] = (annotation, value)
        for name, (annotation, value) in moved.items():
            setattr(klass, name, value)
            own.pop(name, None)
            own[name] = annotation

        makes_init = "__init__" not in klass.__dict__ and kwargs.get("init", True)
        try:
            out: Any = dataclasses.dataclass(klass, **kwargs)
        finally:
            for base, fields in saved.items():
                base.__dict__["__dataclass_fields__"].clear()
                base.__dict__["__dataclass_fields__"].update(fields)
        if makes_init:
            out.__init__ = _limit_positional(out)  # type: ignore[misc]
        return out

    return wrap if cls is None else wrap(cls)


def _limit_positional(cls: type) -> Any:
    """``cls.__init__`` refusing positional values for the fields moved to the end."""
    init = cls.__init__  # type: ignore[misc]
    allowed = sum(1 for f in dataclasses.fields(cls) if f.init and not _is_marked(f))

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > allowed:
            # Python's own wording, counting self
            raise TypeError(f"__init__() takes {allowed + 1} positional arguments but "
                            f"{len(args) + 1} were given")
        init(self, *args, **kwargs)

    __init__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    return __init__
