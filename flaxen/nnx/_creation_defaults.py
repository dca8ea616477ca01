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

from flaxen.configurations import config
from flaxen.typing import BaseConfigContext

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
_KEYS = ("hijax", "ref")


@dataclasses.dataclass
class VariableContext(threading.local):
    """Per-thread stacks of the Variable defaults (innermost last; empty: the default)."""

    variable_hijax_stack: list[bool] = dataclasses.field(default_factory=list)
    variable_ref_stack: list[bool] = dataclasses.field(default_factory=list)
    eager_shard_stack: list[bool] = dataclasses.field(default_factory=list)


VARIABLE_CONTEXT = VariableContext()


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


def _stack(key: str) -> list[bool]:
    ctx = VARIABLE_CONTEXT
    return ctx.variable_hijax_stack if key == "hijax" else ctx.variable_ref_stack


def _current(key: str) -> bool:
    stack = _stack(key)
    if stack:
        return stack[-1]
    # with nothing set, hijax follows the flax_hijax_variable flag as in Flax (read per call, so
    # config.update applies at once); ref has no flag: Flax 0.12.8's flax_array_ref is inert
    return bool(config.flax_hijax_variable) if key == "hijax" else False


class VarDefaultsContext:
    """What ``var_defaults(...)`` returns: already applied; a context manager or decorator.

    ``*_new`` is the value set (None: that default is untouched), ``*_prev`` the value it
    replaced on top of the stack (None: the stack was empty).

    >>> from flaxen import nnx
    >>> ctx = nnx.var_defaults(ref=True)
    >>> ctx.ref_new, ctx.ref_prev, ctx.hijax_new
    (True, None, None)
    >>> with ctx:
    ...     nnx.var_defaults().ref
    True
    """

    def __init__(self, *, hijax_prev: bool | None, hijax_new: bool | None,
                 ref_prev: bool | None, ref_new: bool | None) -> None:
        self.hijax_prev = hijax_prev
        self.hijax_new = hijax_new
        self.ref_prev = ref_prev
        self.ref_new = ref_new

    def _changes(self) -> list[tuple[list[bool], bool, bool | None]]:
        return [(_stack(key), new, prev) for key, new, prev in (
            ("hijax", self.hijax_new, self.hijax_prev), ("ref", self.ref_new, self.ref_prev))
            if new is not None]

    def __enter__(self) -> VarDefaultsContext:
        # the change is already on top of the stack: remember the value under it so that
        # __exit__ can pop back to it
        for stack, _, prev in self._changes():
            if prev is not None:
                stack.insert(-1, prev)
        return self

    def __exit__(self, *exc: tp.Any) -> None:
        for stack, _, _ in self._changes():
            stack.pop()

    def __call__(self, f: F) -> F:
        # used as a decorator: undo the eager change, apply it around each call instead
        for stack, _, prev in self._changes():
            stack.pop()
            if prev is not None:
                stack.append(prev)
        new = [(key, value) for key, value in (("hijax", self.hijax_new),
                                               ("ref", self.ref_new)) if value is not None]

        @functools.wraps(f)
        def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
            for key, value in new:
                _stack(key).append(value)
            try:
                return f(*args, **kwargs)
            finally:
                for key, _ in new:
                    _stack(key).pop()

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
    prev: dict[str, bool | None] = {"hijax": None, "ref": None}
    for key, value in (("hijax", hijax), ("ref", ref)):
        if value is None:
            continue
        stack = _stack(key)
        if stack:
            prev[key] = stack[-1]
            stack[-1] = value
        else:
            stack.append(value)
    return VarDefaultsContext(hijax_prev=prev["hijax"], hijax_new=hijax,
                              ref_prev=prev["ref"], ref_new=ref)


class use_eager_sharding(BaseConfigContext):  # noqa: N801 - Flax's name
    """Sets whether new Variables with ``out_sharding`` metadata are sharded on creation.

    Applies at once; as a context manager it restores the previous value on exit, as a
    decorator it applies only while the function runs.

    >>> from flaxen import nnx
    >>> with nnx.use_eager_sharding(False):
    ...     nnx.using_eager_sharding()
    False
    >>> nnx.use_eager_sharding.get_default()
    True
    """

    @classmethod
    def get_default(cls) -> bool:
        return bool(config.flax_always_shard_variable)

    @classmethod
    def get_stack(cls) -> list[bool]:
        return VARIABLE_CONTEXT.eager_shard_stack

    def __repr__(self) -> str:
        return f"use_eager_sharding({using_eager_sharding()})"


def using_eager_sharding() -> bool:
    """Whether new Variables are sharded eagerly (True unless changed)."""
    stack = VARIABLE_CONTEXT.eager_shard_stack
    return stack[-1] if stack else use_eager_sharding.get_default()
