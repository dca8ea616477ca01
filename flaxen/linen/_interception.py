"""Method wrapping, method interceptors, intermediate capture and profiling names.

Every method of a Module subclass is wrapped once, at class creation. On a bound Module
the wrapper runs ``setup`` (once), pushes the Module on the thread's module stack (so
submodules built inside know their parent) and, for the ``@compact`` method, tracks the
auto-name counters and releases the scope's names when the method is called again.

Interceptors (:func:`intercept_methods`), ``capture_intermediates`` and
``jax.named_scope`` profiling labels cost nothing unless switched on: the wrapper checks one
global flag and one config flag and takes the slow path only then.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax

from flaxen import errors
from flaxen.configurations import config
from flaxen.linen._naming import try_setup
from flaxen.linen._state import (
    SETUP_DONE,
    InterceptorContext,
    context,
    hooks,
    run_intercepted,
)

try:  # JAX internals: are we inside a trace (jit/grad/eval_shape/...)?
    from jax._src import core as _jax_core

    _trace_ctx = _jax_core.trace_ctx
    _EvalTrace = _jax_core.EvalTrace

    def _tracing() -> bool:
        return not isinstance(_trace_ctx.trace, _EvalTrace)

    _tracing()
except Exception:  # pragma: no cover - future JAX layouts: label every call instead
    def _tracing() -> bool:
        return True


@contextlib.contextmanager
def intercept_methods(
    interceptor: Callable[[Callable[..., Any], tuple, dict, InterceptorContext], Any],
) -> Iterator[None]:
    """Intercepts every wrapped Module method call made inside the ``with`` block.

    ``interceptor(next_fun, args, kwargs, context)`` replaces the call; it usually calls
    ``next_fun(*args, **kwargs)`` (the next interceptor, then the method). Interceptors
    nest: the innermost ``with`` runs first.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     def __call__(self, x):
    ...         return x + 1
    >>> def double_output(next_fun, args, kwargs, context):
    ...     return 2 * next_fun(*args, **kwargs)
    >>> with nn.intercept_methods(double_output):
    ...     y = Foo().apply({}, jnp.ones(()))
    >>> float(y)
    4.0
    """
    stack = context.interceptors
    stack.append(interceptor)
    hooks.interceptor_depth += 1
    hooks.refresh()
    try:
        yield
    finally:
        stack.pop()
        hooks.interceptor_depth -= 1
        hooks.refresh()


def _profile_name(module: Any, method_name: str) -> str:
    base = module.name or type(module).__name__
    return base if method_name == "__call__" else f"{base}.{method_name}"


def _derive_profiling_name(module: Any, fn: Callable[..., Any]) -> str:
    """The ``jax.named_scope`` label of ``fn`` run on ``module`` (Flax's private name, with its
    signature): the Module's name (its class name if it has none), then ``.method`` unless
    the method is ``__call__``.

    >>> import flaxen.linen as nn
    >>> _derive_profiling_name(nn.Dense(2, name='proj'), nn.Dense.__call__)
    'proj'
    >>> _derive_profiling_name(nn.Dense(2), functools.partial(lambda m: m))
    'Dense.<lambda>'
    """
    while isinstance(fn, functools.partial):  # partial(Foo.method, ...): the method's name
        fn = fn.func
    return _profile_name(module, getattr(fn, "__name__", "unnamed_function"))


def _enter_compact(module: Any, st: Any) -> None:
    if st.compact_done:
        # A new call of the compact method: release the names the last call reserved
        # (RNG counters are kept, so fresh keys keep coming).
        module.__dict__["scope"] = module.scope.rewound()
        st.autoname_cursor = None
        st.compact_done = False
    st.in_compact = True


def _call_with_hooks(module: Any, fun: Callable, method_name: str, is_compact: bool,
                     args: tuple, kwargs: dict) -> Any:
    """The slow path: interceptors, intermediate capture or profiling labels are on."""
    st = module._state
    if module.scope is None:  # unbound: only interceptors apply
        if is_compact:
            raise errors.CallCompactUnboundModuleError()
        return run_intercepted(module, fun, method_name, args, kwargs)
    if st.setup_called != SETUP_DONE:
        try_setup(module)
    enter = is_compact and not st.in_compact
    if enter:
        _enter_compact(module, st)
    stack = context.module_stack
    stack.append(module)
    try:
        if _profiling() and _tracing():
            with jax.named_scope(_profile_name(module, method_name)):
                y = run_intercepted(module, fun, method_name, args, kwargs)
        else:
            y = run_intercepted(module, fun, method_name, args, kwargs)
        captures = context.capture_stack
        if captures:
            keep = captures[-1]
            if keep is not None and keep(module, method_name):
                module.sow("intermediates", method_name, y)
        return y
    finally:
        stack.pop()
        if enter:
            st.in_compact = False
            st.compact_done = True


def is_wrapped(fun: Any) -> bool:
    """Whether ``fun`` already carries the Module method wrapper (flaxen's or one marked the
    way Flax marks it: libraries set ``method_handler_wrapped`` to opt a method out)."""
    return getattr(fun, "_flaxen_wrapped", False) is True or hasattr(
        fun, "method_handler_wrapped")


def mark_wrapped(fun: Callable[..., Any]) -> None:
    """Marks ``fun`` as wrapped, under flaxen's name and Flax's ``method_handler_wrapped``
    (which interception libraries test for to find and unwrap Module methods)."""
    fun.__dict__["_flaxen_wrapped"] = True
    fun.__dict__["method_handler_wrapped"] = True


def wrap_method(fun: Callable[..., Any], is_compact: bool) -> Callable[..., Any]:
    """The wrapper every Module method gets (see the module docstring)."""
    inner = fun
    while isinstance(inner, functools.partial):  # partial(Foo.method): name of the method
        inner = inner.func
    method_name = getattr(inner, "__name__", type(inner).__name__)

    def wrapped(self, *args: Any, **kwargs: Any) -> Any:
        if hooks.active:
            return _call_with_hooks(self, fun, method_name, is_compact, args, kwargs)
        scope = self.scope
        if scope is None:
            if is_compact:
                raise errors.CallCompactUnboundModuleError()
            return fun(self, *args, **kwargs)
        st = self._state
        if st.setup_called != SETUP_DONE:
            try_setup(self)
        if _profiling() and _tracing():
            return _call_with_hooks(self, fun, method_name, is_compact, args, kwargs)
        stack = context.module_stack
        if is_compact and not st.in_compact:
            if st.compact_done:
                _enter_compact(self, st)
            st.in_compact = True
            stack.append(self)
            try:
                return fun(self, *args, **kwargs)
            finally:
                stack.pop()
                st.in_compact = False
                st.compact_done = True
        stack.append(self)
        try:
            return fun(self, *args, **kwargs)
        finally:
            stack.pop()

    functools.update_wrapper(wrapped, fun)
    mark_wrapped(wrapped)
    wrapped.__dict__["_flaxen_raw"] = fun
    if is_compact:
        wrapped.__dict__["compact"] = True
    return wrapped


def wrap_setup(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``setup`` runs lazily, once; calling it by hand only works on a bound Module."""

    def setup(self) -> None:
        if self.scope is None:
            raise errors.CallSetupUnboundModuleError()
        if self._state.in_setup:  # super().setup() from a subclass's setup
            return fun(self)
        try_setup(self)

    functools.update_wrapper(setup, fun)
    mark_wrapped(setup)
    setup.__dict__["_flaxen_raw"] = fun
    return setup


def wrap_descriptor(prop: property) -> property:
    """A property whose body hits a missing attribute raises DescriptorAttributeError.

    Without this, Python would swallow that AttributeError and retry the lookup through
    ``__getattr__``, reporting the property itself as missing.
    """
    fget = prop.fget
    if fget is None or getattr(fget, "_flaxen_wrapped", False):
        return prop

    def getter(self):
        try:
            return fget(self)
        except AttributeError as e:
            raise errors.DescriptorAttributeError() from e

    functools.update_wrapper(getter, fget)
    getter.__dict__["_flaxen_wrapped"] = True
    return property(getter, prop.fset, prop.fdel, prop.__doc__)


# --- profiling ---------------------------------------------------------------------------


# Set by enable/disable/override_named_call, which (as Flax's) leave config.flax_profile
# alone; None follows config.flax_profile, read at each call (Flax reads it at import only).
_NAMED_CALL: list[bool | None] = [None]


def _profiling() -> bool:
    forced = _NAMED_CALL[0]
    return config.flax_profile if forced is None else forced


def enable_named_call() -> None:
    """Runs every Module method under ``jax.named_scope(<module name>)`` (profiles).

    Labels only show in compiled (jit/pmap) programs; flaxen adds them only while
    tracing, so eager calls pay nothing. ``config.flax_profile`` is left as it is.
    """
    _NAMED_CALL[0] = True


def disable_named_call() -> None:
    """Stops labelling Module methods with ``jax.named_scope`` (``config.flax_profile`` is
    left as it is)."""
    _NAMED_CALL[0] = False


@contextlib.contextmanager
def override_named_call(enable: bool = True) -> Iterator[None]:
    """Enables (or disables) named-call labels inside the ``with`` block only.

    >>> import flaxen.linen as nn
    >>> from flaxen.linen import _interception
    >>> with nn.override_named_call(False):
    ...     _interception._profiling()
    False
    """
    old = _NAMED_CALL[0]
    _NAMED_CALL[0] = enable
    try:
        yield
    finally:
        _NAMED_CALL[0] = old


def named_call(class_fn: Callable[..., Any], force: bool = True) -> Callable[..., Any]:
    """Labels a Module method with ``jax.named_scope`` for profiles.

    Active while named calls are on (``config.flax_profile``, or
    ``enable_named_call``), or always with ``force=True``.
    """

    @functools.wraps(class_fn)
    def wrapped(self, *args: Any, **kwargs: Any) -> Any:
        if force or _profiling():
            with jax.named_scope(_profile_name(self, class_fn.__name__)):
                return class_fn(self, *args, **kwargs)
        return class_fn(self, *args, **kwargs)

    return wrapped
