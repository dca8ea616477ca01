"""Process-wide defaults of the NNX transforms' ``graph=`` and ``graph_updates=`` arguments.

``set_graph_mode(v)`` / ``set_graph_updates(v)`` push a default that transforms read when
their argument is ``None``. Each works three ways: called alone it changes the default for
the rest of the program, as a ``with`` block it changes it for the block, and as a decorator
it changes it while the decorated function runs.

>>> from flaxen import nnx
>>> with nnx.set_graph_mode(False):
...   nnx.set_graph_mode.current_value()
False
>>> nnx.set_graph_mode.current_value()
True
"""

from __future__ import annotations

import functools
import threading
import typing as tp

from flaxen.configurations import config


class _Stacks(threading.local):
    def __init__(self) -> None:
        self.stacks: dict[str, list[bool]] = {}


_STACKS = _Stacks()


class _ModeSetting:
    """A boolean default held on a per-thread stack (see the module docstring)."""

    _key: tp.ClassVar[str]
    _default: tp.ClassVar[bool] = True

    def __init__(self, value: bool) -> None:
        self.value = bool(value)
        self._stack().append(self.value)

    @classmethod
    def _stack(cls) -> list[bool]:
        return _STACKS.stacks.setdefault(cls._key, [])

    @classmethod
    def current_value(cls) -> bool:
        stack = cls._stack()
        if stack:
            return stack[-1]
        try:  # the process-wide default: config flag nnx_<key>
            return bool(config._read("nnx_" + cls._key))
        except LookupError:
            return cls._default

    def __enter__(self) -> _ModeSetting:
        return self

    def __exit__(self, *exc: object) -> None:
        stack = self._stack()
        if stack:
            stack.pop()

    def __call__(self, fn: tp.Callable[..., tp.Any]) -> tp.Callable[..., tp.Any]:
        # used as a decorator: the push made by __init__ only applies while ``fn`` runs
        stack = self._stack()
        if stack:
            stack.pop()
        value = self.value

        @functools.wraps(fn)
        def with_setting(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
            stack = self._stack()
            stack.append(value)
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()

        return with_setting


class set_graph_mode(_ModeSetting):  # noqa: N801 (Flax's public name)
    """Default of ``graph=``: True treats Modules as graphs (shared references kept)."""

    _key = "graph_mode"


class set_graph_updates(_ModeSetting):  # noqa: N801 (Flax's public name)
    """Default of ``graph_updates=``: True propagates structural changes made inside."""

    _key = "graph_updates"


def resolve_modes(graph: bool | None, graph_updates: bool | None) -> tuple[bool, bool]:
    """The ``(graph, graph_updates)`` a transform uses, filling ``None`` from the defaults."""
    if graph is None:
        graph = set_graph_mode.current_value()
    if graph_updates is None:
        graph_updates = set_graph_updates.current_value()
    return bool(graph), bool(graph_updates)
