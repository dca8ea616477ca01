"""Per-thread Module context and per-instance Module state.

The bottom of the Linen Module system: nothing here imports another ``flaxen.linen`` file.
It holds

* the thread-local context: the stack of Modules whose methods are running (a new
  submodule's parent is the top of that stack), the capture-intermediates filters of the
  running ``apply`` calls, and the installed method interceptors;
* :class:`ModuleState`, the mutable bookkeeping every Module instance carries (is setup
  running or done, is the compact method running, the per-class auto-name counters);
* the ``_unspecified_parent`` sentinel, the default of every Module's ``parent`` field.

Wrapped Module methods read :data:`hooks` (a plain attribute read) to decide whether any
optional per-call work (interceptors, intermediate capture, profiling scopes) is needed.
"""

from __future__ import annotations

import threading
from typing import Any


class _Sentinel:
    """Marks "no parent given": the parent is then the Module whose method is running."""

    def __copy__(self):
        return self  # a sentinel must survive copy.copy / deepcopy as itself

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (_get_unspecified_parent, ())

    def __repr__(self) -> str:
        return "<flaxen.linen.module._Sentinel object>"


_unspecified_parent = _Sentinel()


def _get_unspecified_parent() -> _Sentinel:
    return _unspecified_parent


# Setup progress of a Module instance.
SETUP_NONE = 0  # nothing done yet
SETUP_FIELDS = 1  # submodules passed as fields adopted, setup() not run
SETUP_DONE = 2  # setup() has run (or the Module has none)


class ModuleState:
    """Mutable bookkeeping of one Module instance (kept off the dataclass fields)."""

    __slots__ = (
        "in_setup",
        "setup_called",
        "in_compact",
        "compact_done",
        "autoname_cursor",
        "children",
        "adopt_cache",
    )

    def __init__(self) -> None:
        self.in_setup = False
        self.setup_called = SETUP_NONE
        self.in_compact = False
        # The compact method finished at least once: its scope must be rewound (names
        # released) before the next call, so that call can re-create the same names.
        self.compact_done = False
        self.autoname_cursor: dict[str, int] | None = None
        # name -> submodule, or the collection name for variables; used by repr and
        # module_paths.
        self.children: dict[str, Any] = {}
        # Root Modules only: id(outside module) -> (module, its adopted clone), so one
        # instance passed to several Modules becomes one shared submodule.
        self.adopt_cache: dict[int, tuple[Any, Any]] | None = None


class _Context(threading.local):
    """What is running in this thread: the module stack and the optional hooks."""

    def __init__(self) -> None:
        self.module_stack: list[Any] = [None]
        # One entry per running apply/init: a filter fn(module, method_name) or None.
        self.capture_stack: list[Any] = []
        # Installed method interceptors, outermost first.
        self.interceptors: list[Any] = []


context = _Context()


class _Hooks:
    """Process-wide counters that send wrapped method calls down the slow path.

    ``active`` is true while any thread has an interceptor installed or is capturing
    intermediates, so the common path costs one attribute read. The slow path then
    consults this thread's own :data:`context`.
    """

    __slots__ = ("interceptor_depth", "capture_depth", "active")

    def __init__(self) -> None:
        self.interceptor_depth = 0
        self.capture_depth = 0
        self.active = False

    def refresh(self) -> None:
        self.active = self.interceptor_depth > 0 or self.capture_depth > 0


hooks = _Hooks()


class ModuleBase:
    """Marker base class of :class:`flaxen.linen.Module`.

    Files below ``_module.py`` test ``isinstance(x, ModuleBase)`` instead of importing
    Module, which keeps the imports one-way.
    """

    __slots__ = ()
