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

import dataclasses
import enum
import functools
import threading
from collections.abc import Callable
from typing import Any, ClassVar, dataclass_transform


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


class SetupState(enum.IntEnum):
    """Setup progress of a Module instance (``module._state.setup_called``).

    >>> SetupState.NEW < SetupState.TRANSFORMED < SetupState.DONE
    True
    """

    NEW = 0  # nothing done yet
    TRANSFORMED = 1  # submodules passed as fields adopted, setup() not run
    DONE = 2  # setup() has run (or the Module has none)


# Plain ints (compare equal to the SetupState members): the hot path compares these.
SETUP_NONE = 0
SETUP_FIELDS = 1
SETUP_DONE = 2


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
        "reuse_scopes",
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
        # A clone made inside a transform of a Module that was already set up: its setup
        # runs again on the inner scope, where the submodule scopes may already exist.
        self.reuse_scopes = False


class _Context(threading.local):
    """What is running in this thread: the module stack and the optional hooks."""

    def __init__(self) -> None:
        self.module_stack: list[Any] = [None]
        # One entry per running apply/init: a filter fn(module, method_name) or None.
        self.capture_stack: list[Any] = []
        # Installed method interceptors, outermost first.
        self.interceptors: list[Any] = []
        # One entry per running _tabulate_context (flaxen.linen._call_info): the calls it
        # records. Flax's name, which code written for Flax reads.
        self.call_info_stack: list[Any] = []


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


@dataclasses.dataclass(frozen=True)
class InterceptorContext:
    """What an interceptor is told about the intercepted call.

    Attributes:
      module: the Module whose method is called.
      method_name: the method's name, e.g. ``'__call__'``.
      orig_method: the undecorated method, already bound to ``module``.
    """

    module: Any
    method_name: str
    orig_method: Callable[..., Any]


def run_intercepted(module: Any, fun: Callable[..., Any], method_name: str, args: tuple,
                    kwargs: dict) -> Any:
    """Calls ``fun(module, *args, **kwargs)`` through this thread's interceptors.

    The interceptor installed last sits closest to the method (runs its ``next_fun`` first).
    """
    interceptors = context.interceptors
    if not interceptors:
        return fun(module, *args, **kwargs)
    ctx = InterceptorContext(module, method_name, functools.partial(fun, module))

    def run(*a: Any, **k: Any) -> Any:
        return fun(module, *a, **k)

    for icpt in reversed(interceptors):
        run = _chain(icpt, run, ctx)
    return run(*args, **kwargs)


def _chain(icpt: Callable, nxt: Callable, ctx: InterceptorContext) -> Callable:
    def run(*a: Any, **k: Any) -> Any:
        return icpt(nxt, a, k, ctx)

    return run


# Tells type checkers that subclasses are dataclasses (``_dataclass.transform_subclass`` makes
# them so at runtime), so ``Dense(features=3, name='d')`` is checked against the fields.
@dataclass_transform(field_specifiers=(dataclasses.field,))
class ModuleBase:
    """Marker base class of :class:`flaxen.linen.Module`.

    Files below ``_module.py`` test ``isinstance(x, ModuleBase)`` instead of importing
    Module, which keeps the imports one-way.
    """

    # Set on each subclass by _dataclass.make_dataclass / transform_subclass.
    _flaxen_fields: ClassVar[tuple[str, ...]]
    _flaxen_setup: ClassVar[Any]
    _flaxen_custom_post_init: ClassVar[bool]
    _compact_name_scope_methods: ClassVar[tuple[str, ...]]
