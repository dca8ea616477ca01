"""Defaults for new Variables: ``nnx.var_defaults`` (hijax / ref mode) and eager sharding.

``var_defaults()`` with no argument reads the current defaults (a read-only mapping);
with ``hijax=`` and/or ``ref=`` it changes them at once and returns an object that also
works as a context manager (restoring the previous value on exit) or as a decorator (the
change then applies only while the decorated function runs).

>>> from flaxen import nnx
>>> nnx.var_defaults().hijax
False
>>> with nnx.var_defaults(ref=True):
...     nnx.var_defaults().ref
True
>>> nnx.var_defaults().ref
False
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import typing as tp

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
_KEYS = ("hijax", "ref")


class _Context(threading.local):
    def __init__(self) -> None:
        self.stacks: dict[str, list[bool]] = {k: [] for k in _KEYS}
        self.eager_sharding: list[bool] = []


_CTX = _Context()


@dataclasses.dataclass(frozen=True)
class VarDefaults(tp.Mapping[str, tp.Any]):
    """The defaults a new Variable takes when its constructor does not say."""

    hijax: bool
    ref: bool

    def __getitem__(self, key: str) -> tp.Any:
        if key not in _KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> tp.Iterator[str]:
        return iter(_KEYS)

    def __len__(self) -> int:
        return len(_KEYS)


def _current(key: str) -> bool:
    stack = _CTX.stacks[key]
    return stack[-1] if stack else False


class VarDefaultsContext:
    """What ``var_defaults(...)`` returns: already applied; a context manager or decorator."""

    def __init__(self, new: dict[str, bool], prev: dict[str, bool | None]) -> None:
        self._new = new
        self._prev = prev

    def __enter__(self) -> VarDefaultsContext:
        # the change is already on top of the stack: remember the value under it so that
        # __exit__ can pop back to it
        for key in self._new:
            prev = self._prev[key]
            if prev is not None:
                _CTX.stacks[key].insert(-1, prev)
        return self

    def __exit__(self, *exc: tp.Any) -> None:
        for key in self._new:
            _CTX.stacks[key].pop()

    def __call__(self, f: F) -> F:
        # used as a decorator: undo the eager change, apply it around each call instead
        for key in self._new:
            _CTX.stacks[key].pop()
            prev = self._prev[key]
            if prev is not None:
                _CTX.stacks[key].append(prev)
        new = dict(self._new)

        @functools.wraps(f)
        def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
            for key, value in new.items():
                _CTX.stacks[key].append(value)
            try:
                return f(*args, **kwargs)
            finally:
                for key in new:
                    _CTX.stacks[key].pop()

        return wrapper  # type: ignore[return-value]


@tp.overload
def var_defaults() -> VarDefaults: ...


@tp.overload
def var_defaults(*, hijax: bool | None = None, ref: bool | None = None
                 ) -> VarDefaultsContext: ...


def var_defaults(*, hijax: bool | None = None, ref: bool | None = None
                 ) -> VarDefaults | VarDefaultsContext:
    """Reads (no arguments) or sets the ``hijax`` / ``ref`` defaults of new Variables.

    >>> from flaxen import nnx
    >>> @nnx.var_defaults(ref=True)
    ... def make():
    ...     return nnx.Variable(1.0)
    >>> make().ref, nnx.Variable(1.0).ref
    (True, False)
    """
    if hijax is None and ref is None:
        return VarDefaults(hijax=_current("hijax"), ref=_current("ref"))
    new = {k: v for k, v in (("hijax", hijax), ("ref", ref)) if v is not None}
    prev: dict[str, bool | None] = {}
    for key, value in new.items():
        stack = _CTX.stacks[key]
        if stack:
            prev[key] = stack[-1]
            stack[-1] = value
        else:
            prev[key] = None
            stack.append(value)
    return VarDefaultsContext(new, prev)


class use_eager_sharding:  # noqa: N801 - Flax's name
    """Sets whether new Variables with ``out_sharding`` metadata are sharded on creation.

    Applies at once; as a context manager it restores the previous value on exit.

    >>> from flaxen import nnx
    >>> with nnx.use_eager_sharding(False):
    ...     nnx.using_eager_sharding()
    False
    """

    def __init__(self, value: bool) -> None:
        self._prev = using_eager_sharding()
        _CTX.eager_sharding.append(bool(value))

    def __enter__(self) -> use_eager_sharding:
        return self

    def __exit__(self, *exc: tp.Any) -> None:
        if _CTX.eager_sharding:
            _CTX.eager_sharding.pop()

    def __repr__(self) -> str:
        return f"use_eager_sharding({using_eager_sharding()})"


def using_eager_sharding() -> bool:
    """Whether new Variables are sharded eagerly (True unless changed)."""
    return _CTX.eager_sharding[-1] if _CTX.eager_sharding else True
