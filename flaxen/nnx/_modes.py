"""Process-wide defaults of the NNX transforms' ``graph=`` and ``graph_updates=`` arguments.

``set_graph_mode(v)`` / ``set_graph_updates(v)`` set a default that transforms read when
their argument is ``None``. Each is a :class:`flaxen.typing.BaseConfigContext` and works three
ways: called alone it changes the default for the rest of the program, as a ``with`` block it
changes it for the block, and as a decorator it changes it while the decorated function runs.

>>> from flaxen import nnx
>>> with nnx.set_graph_mode(False):
...   nnx.set_graph_mode.current_value()
False
>>> nnx.set_graph_mode.current_value()
True
"""

from __future__ import annotations

import threading

from flaxen.configurations import config
from flaxen.typing import BaseConfigContext


class _Stacks(threading.local):
    def __init__(self) -> None:
        self.graph_mode: list[bool] = []
        self.graph_updates: list[bool] = []


_STACKS = _Stacks()


def _config_default(key: str) -> bool:
    try:  # the process-wide default: config flag nnx_<key>
        return bool(config._read("nnx_" + key))
    except LookupError:
        return True


class set_graph_mode(BaseConfigContext):  # noqa: N801 (Flax's public name)
    """Default of ``graph=``: True treats Modules as graphs (shared references kept).

    >>> from flaxen import nnx
    >>> @nnx.set_graph_mode(False)
    ... def inside():
    ...     return nnx.set_graph_mode.current_value()
    >>> inside(), nnx.set_graph_mode.get_default()
    (False, True)
    """

    @classmethod
    def get_default(cls) -> bool:
        return _config_default("graph_mode")

    @classmethod
    def get_stack(cls) -> list[bool]:
        return _STACKS.graph_mode


class set_graph_updates(BaseConfigContext):  # noqa: N801 (Flax's public name)
    """Default of ``graph_updates=``: True propagates structural changes made inside.

    >>> from flaxen import nnx
    >>> with nnx.set_graph_updates(False):
    ...     nnx.set_graph_updates.get_stack()
    [False]
    """

    @classmethod
    def get_default(cls) -> bool:
        return _config_default("graph_updates")

    @classmethod
    def get_stack(cls) -> list[bool]:
        return _STACKS.graph_updates


def resolve_modes(graph: bool | None, graph_updates: bool | None) -> tuple[bool, bool]:
    """The ``(graph, graph_updates)`` a transform uses, filling ``None`` from the defaults."""
    if graph is None:
        graph = set_graph_mode.current_value()
    if graph_updates is None:
        graph_updates = set_graph_updates.current_value()
    return bool(graph), bool(graph_updates)
