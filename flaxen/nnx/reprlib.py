"""``nnx.reprlib``: the text-repr protocol of NNX objects, for user classes that join it.

A class inherits :class:`Representable` and defines ``__nnx_repr__``, a generator that first
yields an :class:`Object` (the type name, brackets, separators) and then one :class:`Attr`
per field; ``repr()`` and ``str()`` then lay the fields out one per line, nested values
indented. ``str()`` uses the terminal colours of :data:`COLOR` when the terminal supports
them, ``repr()`` never does. ``flaxen.config.flax_max_repr_depth`` cuts deep nesting to
``...``.

>>> from flaxen.nnx import reprlib
>>> class Point(reprlib.Representable):
...     def __init__(self, x, y):
...         self.x, self.y = x, y
...     def __nnx_repr__(self):
...         yield reprlib.Object(type=type(self))
...         yield reprlib.Attr("x", self.x)
...         yield reprlib.Attr("y", self.y)
>>> print(repr(Point(1, "a")))
Point(
  x=1,
  y='a'
)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import typing as tp

A = tp.TypeVar("A")
B = tp.TypeVar("B")


def supports_color() -> bool:
    """Whether output may use ANSI colours: a TTY on a colour-capable platform, or IPython.

    >>> isinstance(supports_color(), bool)
    True
    """
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]

        in_ipython = get_ipython() is not None
    except ImportError:
        in_ipython = False
    platform_ok = sys.platform != "win32" or "ANSICON" in os.environ
    tty = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    return (platform_ok and tty) or in_ipython


class Color(tp.NamedTuple):
    """The escape sequence put before each kind of token (``END`` resets).

    >>> NO_COLOR.TYPE == ""
    True
    """

    TYPE: str
    ATTRIBUTE: str
    SEP: str
    PAREN: str
    COMMENT: str
    INT: str
    STRING: str
    FLOAT: str
    BOOL: str
    NONE: str
    END: str


NO_COLOR = Color(*([""] * len(Color._fields)))


def _rgb(r: int, g: int, b: int) -> str:
    return f"\x1b[38;2;{r};{g};{b}m"


# A dark-theme palette (types teal, keys light blue, literals green/orange/blue).
COLOR = Color(
    TYPE=_rgb(79, 201, 177), ATTRIBUTE=_rgb(156, 220, 254), SEP=_rgb(212, 212, 212),
    PAREN=_rgb(255, 213, 3), COMMENT=_rgb(105, 105, 105), INT=_rgb(182, 207, 169),
    STRING=_rgb(207, 144, 120), FLOAT=_rgb(182, 207, 169), BOOL=_rgb(86, 156, 214),
    NONE=_rgb(86, 156, 214), END="\x1b[0m",
) if supports_color() else NO_COLOR


@dataclasses.dataclass
class ReprContext(threading.local):
    """Per-thread repr state: the active palette and how deep the current repr is nested.

    >>> ReprContext().depth
    0
    """

    current_color: Color = COLOR
    depth: int = 0


REPR_CONTEXT = ReprContext()


def colorized(x: tp.Any, /) -> str:
    """``x`` as text, containers and literals wrapped in the active palette's colours.

    >>> colorized([1, "a", None]) if REPR_CONTEXT.current_color is NO_COLOR else "[1, 'a', None]"
    "[1, 'a', None]"
    """
    c = REPR_CONTEXT.current_color

    def wrap(open_: str, body: str, close: str) -> str:
        return f"{c.PAREN}{open_}{c.END}{body}{c.PAREN}{close}{c.END}"

    if isinstance(x, list):
        return wrap("[", ", ".join(colorized(i) for i in x), "]")
    if isinstance(x, tuple):
        body = ", ".join(colorized(i) for i in x)
        return wrap("(", body + ("," if len(x) == 1 else ""), ")")
    if isinstance(x, dict):
        body = ", ".join(f"{c.STRING}{k!r}{c.END}: {colorized(v)}" for k, v in x.items())
        return wrap("{", body, "}")
    if isinstance(x, set):
        return wrap("{", ", ".join(colorized(i) for i in x), "}")
    if isinstance(x, type):
        return f"{c.TYPE}{x.__name__}{c.END}"
    if isinstance(x, bool):  # before int: bool is an int subclass
        return f"{c.BOOL}{x}{c.END}"
    if isinstance(x, int):
        return f"{c.INT}{x}{c.END}"
    if isinstance(x, str):
        return f"{c.STRING}{x!r}{c.END}"
    if isinstance(x, float):
        return f"{c.FLOAT}{x}{c.END}"
    if x is None:
        return f"{c.NONE}None{c.END}"
    if isinstance(x, Representable):
        return get_repr(x)
    return repr(x)


@dataclasses.dataclass
class Object:
    """The header an ``__nnx_repr__`` yields first: type (name or class) and layout.

    >>> Object("T", same_line=True).elem_sep
    ', '
    """

    type: str | type
    start: str = "("
    end: str = ")"
    kv_sep: str = "="
    indent: str = "  "
    empty_repr: str = ""
    comment: str = ""
    same_line: bool = False

    @property
    def elem_sep(self) -> str:
        return ", " if self.same_line else ",\n"


@dataclasses.dataclass
class Attr:
    """One field of an ``__nnx_repr__``: key and value (raw text when the flags say so).

    >>> Attr("x", 1).use_raw_value
    False
    """

    key: str
    value: str | tp.Any
    start: str = ""
    end: str = ""
    use_raw_value: bool = False
    use_raw_key: bool = False


class Representable:
    """Base of classes whose repr comes from ``__nnx_repr__`` (see the module docstring).

    >>> class Empty(Representable):
    ...     def __nnx_repr__(self):
    ...         yield Object(type="Empty")
    >>> repr(Empty())
    'Empty()'
    """

    __slots__ = ()

    def __nnx_repr__(self) -> tp.Iterator[Object | Attr]:
        raise NotImplementedError

    def __repr__(self) -> str:
        # repr() is for logs and doctests: never colour it, whatever the terminal
        saved = REPR_CONTEXT.current_color
        REPR_CONTEXT.current_color = NO_COLOR
        try:
            return get_repr(self)
        finally:
            REPR_CONTEXT.current_color = saved

    def __str__(self) -> str:
        return get_repr(self)


def _max_depth() -> int | None:
    from flaxen import config

    return config.flax_max_repr_depth


def get_repr(obj: Representable) -> str:
    """The text of ``obj`` from its ``__nnx_repr__`` (in the active palette).

    >>> print(get_repr(PrettyMapping({"a": 1})))
    PrettyMapping({
      'a': 1
    })
    """
    if not isinstance(obj, Representable):
        raise TypeError(f"Object {obj!r} is not representable: get_repr expects an instance "
                        "of reprlib.Representable; call repr() on other objects instead.")
    REPR_CONTEXT.depth += 1
    try:
        c = REPR_CONTEXT.current_color
        items = obj.__nnx_repr__()
        head = next(items)
        if not isinstance(head, Object):
            raise TypeError(f"__nnx_repr__ of {type(obj).__name__} must yield a reprlib.Object "
                            f"first, got {type(head).__name__}; yield Object(type=...) first.")
        sep = f"{c.SEP}{head.kv_sep}{c.END}"
        limit = _max_depth()
        too_deep = limit is not None and REPR_CONTEXT.depth > limit

        def field(attr: tp.Any) -> str:
            if not isinstance(attr, Attr):
                raise TypeError(f"__nnx_repr__ of {type(obj).__name__} must yield reprlib.Attr "
                                f"after the Object, got {type(attr).__name__}.")
            value = attr.value if attr.use_raw_value else colorized(attr.value)
            value = value.replace("\n", "\n" + head.indent)
            key = attr.key if attr.use_raw_key else f"{c.ATTRIBUTE}{attr.key}{c.END}"
            pad = "" if head.same_line else head.indent
            return f"{pad}{attr.start}{key}{sep}{value}{attr.end}"

        body = "..." if too_deep else head.elem_sep.join(field(a) for a in items)
        comment = ""
        if not body:
            body = head.empty_repr
        elif not (head.same_line or too_deep):
            body = f"\n{body}\n"
            comment = f"{c.COMMENT}{head.comment}{c.END}"
        name = head.type if isinstance(head.type, str) else head.type.__name__
        name = f"{c.TYPE}{name}{c.END}" if name else ""
        start = f"{c.PAREN}{head.start}{c.END}" if head.start else ""
        end = f"{c.PAREN}{head.end}{c.END}" if head.end else ""
        return f"{name}{start}{comment}{body}{end}"
    finally:
        REPR_CONTEXT.depth -= 1


class MappingReprMixin(Representable):
    """An ``__nnx_repr__`` for Mapping subclasses: ``Name({key: value, ...})``.

    >>> class Row(MappingReprMixin, dict):
    ...     pass
    >>> print(repr(Row(a=1)))
    Row({
      'a': 1
    })
    """

    def __nnx_repr__(self) -> tp.Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep=": ", start="({", end="})")
        for key, value in self.items():  # type: ignore[attr-defined]
            yield Attr(colorized(key), value, use_raw_key=True)


@dataclasses.dataclass(repr=False)
class PrettyMapping(Representable):
    """Wraps a mapping to print it in the NNX layout.

    >>> print(repr(PrettyMapping({})))
    PrettyMapping({})
    """

    mapping: tp.Mapping

    def __nnx_repr__(self) -> tp.Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep=": ", start="({", end="})")
        for key, value in self.mapping.items():
            yield Attr(colorized(key), value, use_raw_key=True)


@dataclasses.dataclass(repr=False)
class SequenceReprMixin(Representable):
    """An ``__nnx_repr__`` for Sequence subclasses: ``Name([item, ...])``.

    >>> class Items(SequenceReprMixin):
    ...     def __iter__(self):
    ...         return iter([1])
    >>> print(repr(Items()))
    Items([
      1
    ])
    """

    def __nnx_repr__(self) -> tp.Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep="", start="([", end="])")
        for value in self:  # type: ignore[attr-defined]
            yield Attr("", value, use_raw_key=True)


@dataclasses.dataclass(repr=False)
class PrettySequence(Representable):
    """Wraps a sequence to print it in the NNX layout.

    >>> print(repr(PrettySequence([1, 2])))
    PrettySequence([
      1,
      2
    ])
    """

    sequence: tp.Sequence

    def __nnx_repr__(self) -> tp.Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep="", start="([", end="])")
        for value in self.sequence:
            yield Attr("", value, use_raw_key=True)


__all__ = [
    "COLOR", "NO_COLOR", "REPR_CONTEXT", "Attr", "Color", "MappingReprMixin", "Object",
    "PrettyMapping", "PrettySequence", "ReprContext", "Representable", "SequenceReprMixin",
    "colorized", "get_repr", "supports_color",
]
