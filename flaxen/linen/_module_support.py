"""Public helpers Flax defines next to ``Module`` (``flax.linen.module``'s other names).

``wrap_method_once`` gives a function the Module method wrapper (lazy ``setup``, module
stack, ``@compact`` bookkeeping, interceptors) unless it already has it; wrapped functions
carry ``method_handler_wrapped``, the mark interception libraries look for to unwrap a
method (``while hasattr(m, 'method_handler_wrapped'): m = m.__wrapped__``), replace it and
wrap it again. Also: the descriptor wrapper, the interceptor runner, the thread-local stack
and the ``sow`` defaults.

>>> import flaxen.linen as nn
>>> def double(self, x):
...     return 2 * x
>>> wrapped = wrap_method_once(double)
>>> wrapped.method_handler_wrapped, wrapped.__wrapped__ is double
(True, True)
>>> wrap_method_once(wrapped) is wrapped
True
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from typing_extensions import Protocol  # Flax's Protocols are typing_extensions' ones

from flaxen import errors
from flaxen.linen._interception import is_wrapped, mark_wrapped, wrap_method
from flaxen.linen._module import Module, _sow_append, _sow_init, compact
from flaxen.linen._state import InterceptorContext, ModuleBase, run_intercepted

T = TypeVar("T")
K = TypeVar("K")
M = TypeVar("M", bound="Module")

Args = tuple[Any]
Kwargs = dict[str, Any]
NextGetter = Callable[..., Any]
Interceptor = Callable[[NextGetter, Args, Kwargs, InterceptorContext], Any]

# the defaults of Module.sow: collect every sown value into a tuple
tuple_reduce = _sow_append
tuple_init = _sow_init


def capture_call_intermediates(_: Any, method_name: str) -> bool:
    """The ``capture_intermediates=True`` filter: keep the outputs of ``__call__`` only.

    >>> capture_call_intermediates(None, '__call__'), capture_call_intermediates(None, 'f')
    (True, False)
    """
    return method_name == "__call__"


def wrap_method_once(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``fun`` with the Module method wrapper, unless it already has one.

    The result runs ``setup`` lazily, tracks the module stack and ``@compact`` naming, and
    goes through :func:`~flaxen.linen.intercept_methods` interceptors when called with a
    Module as first argument; called otherwise, it is ``fun`` itself. Its ``__wrapped__``
    is ``fun`` and it carries ``method_handler_wrapped = True``, so a Module subclass that
    defines it as a method uses it as is.
    """
    if is_wrapped(fun):
        return fun
    method = wrap_method(fun, getattr(fun, "compact", False) is True)

    @functools.wraps(fun)
    def wrapped_module_method(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], ModuleBase):
            return method(*args, **kwargs)
        return fun(*args, **kwargs)

    mark_wrapped(wrapped_module_method)
    wrapped_module_method.__dict__["_flaxen_raw"] = fun
    return wrapped_module_method


def run_interceptors(orig_method: Callable[..., Any], module: Any, *args: Any,
                     **kwargs: Any) -> Any:
    """Calls ``orig_method(module, *args, **kwargs)`` through the active interceptors.

    >>> import jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     def __call__(self, x):
    ...         return x
    >>> def add_one(next_fun, args, kwargs, context):
    ...     return next_fun(*args, **kwargs) + 1
    >>> with nn.intercept_methods(add_one):
    ...     int(run_interceptors(lambda self, x: x, Foo(), jnp.int32(1)))
    2
    """
    inner = orig_method
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__name__", type(inner).__name__)
    return run_intercepted(module, orig_method, name, args, kwargs)


class ThreadLocalStack(threading.local):
    """A stack per thread; iterating yields the top first.

    >>> s = ThreadLocalStack()
    >>> s.push(1); s.push(2)
    >>> list(s), len(s), s.pop()
    ([2, 1], 2, 2)
    """

    def __init__(self) -> None:
        self._storage: list[Any] = []

    def push(self, elem: Any) -> None:
        self._storage.append(elem)

    def pop(self) -> Any:
        return self._storage.pop()

    def __iter__(self) -> Iterator[Any]:
        return iter(reversed(self._storage))

    def __len__(self) -> int:
        return len(self._storage)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._storage})"


class ParentDescriptor:
    """Stores a parent Module as a weak reference (no reference cycles through parents);
    other values (None, a Scope, the unspecified-parent marker) are stored as they are.

    >>> import flaxen.linen as nn
    >>> class Holder:
    ...     parent = ParentDescriptor()
    >>> h, m = Holder(), nn.Dense(2)
    >>> h.parent = m
    >>> h.parent is m, type(h._parent_ref).__name__
    (True, 'ReferenceType')
    """

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return None
        ref = object.__getattribute__(obj, "_parent_ref")
        return ref() if isinstance(ref, weakref.ReferenceType) else ref

    def __set__(self, obj: Any, value: Any) -> None:
        stored = weakref.ref(value) if isinstance(value, ModuleBase) else value
        object.__setattr__(obj, "_parent_ref", stored)


class Descriptor(Protocol):
    """The descriptor protocol (what :func:`create_descriptor_wrapper` accepts)."""

    __isabstractmethod__: bool

    def __get__(self, obj: Any, objtype: Any = None) -> Any: ...

    def __set__(self, obj: Any, value: Any) -> None: ...

    def __delete__(self, obj: Any) -> None: ...

    def __set_name__(self, owner: Any, name: str) -> None: ...


class DescriptorWrapper:
    """Base class of the wrappers :func:`create_descriptor_wrapper` builds."""


def create_descriptor_wrapper(descriptor: Descriptor) -> DescriptorWrapper:
    """Wraps a descriptor so that an AttributeError raised inside its ``__get__`` surfaces
    as :class:`~flaxen.errors.DescriptorAttributeError` (Python would otherwise retry the
    lookup through ``__getattr__`` and report the descriptor itself as missing).

    The wrapper has exactly the descriptor methods ``descriptor`` has.

    >>> class Broken:
    ...     @property
    ...     def value(self):
    ...         return self.missing
    >>> Broken.value = create_descriptor_wrapper(Broken.__dict__['value'])
    >>> try:
    ...     Broken().value
    ... except Exception as e:
    ...     type(e).__name__
    'DescriptorAttributeError'
    """
    namespace: dict[str, Any] = {"__doc__": "Wraps one descriptor (see create_descriptor_wrapper)."}
    if hasattr(descriptor, "__isabstractmethod__"):
        namespace["__isabstractmethod__"] = descriptor.__isabstractmethod__

    def __init__(self: Any, wrapped: Any) -> None:
        self.wrapped = wrapped

    def __getattr__(self: Any, name: str) -> Any:
        if "wrapped" not in vars(self):
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    namespace["__init__"] = __init__
    namespace["__getattr__"] = __getattr__
    if hasattr(descriptor, "__get__"):
        def __get__(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return self.wrapped.__get__(*args, **kwargs)
            except AttributeError as e:
                raise errors.DescriptorAttributeError() from e

        namespace["__get__"] = __get__
    for hook in ("__set__", "__delete__", "__set_name__"):
        if hasattr(descriptor, hook):
            namespace[hook] = _forward(hook)
    cls = type("_DescriptorWrapper", (DescriptorWrapper,), namespace)
    return cls(descriptor)


def _forward(hook: str) -> Callable[..., Any]:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.wrapped, hook)(*args, **kwargs)

    forward.__name__ = hook
    return forward


def wrap_descriptor_once(descriptor: Any) -> DescriptorWrapper:
    """``descriptor`` wrapped by :func:`create_descriptor_wrapper`, unless it already is.

    >>> w = wrap_descriptor_once(property(lambda self: 1))
    >>> wrap_descriptor_once(w) is w
    True
    """
    if isinstance(descriptor, DescriptorWrapper):
        return descriptor
    return create_descriptor_wrapper(descriptor)


def module_field(*, kw_only: bool = False, default: Any | None = ...) -> Any:
    """A field specifier for type checkers only (Module subclasses use dataclass fields)."""
    ...


class CompactNameScope(Module):
    """Calls ``fn(module_fn(), *args, **kwargs)`` in its own named scope.

    ``module_fn`` builds the Module ``fn`` receives; everything ``fn`` creates lives under
    this Module's name.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> scoped = CompactNameScope(lambda m, x: m(x), lambda: nn.Dense(2), name='block')
    >>> v = scoped.init(jax.random.key(0), jnp.ones((1, 3)))
    >>> list(v['params'])
    ['Dense_0']
    """

    fn: Callable[..., Any]
    module_fn: Callable[[], Module]

    @compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(self.module_fn(), *args, **kwargs)


__all__ = [
    "Args", "CompactNameScope", "Descriptor", "DescriptorWrapper", "Interceptor", "K",
    "Kwargs", "M", "NextGetter", "ParentDescriptor", "T", "ThreadLocalStack",
    "capture_call_intermediates", "create_descriptor_wrapper", "module_field",
    "run_interceptors", "tuple_init", "tuple_reduce", "wrap_descriptor_once",
    "wrap_method_once",
]
