"""Binding Modules to variables: ``clone``, ``bind``/``unbind`` and the init/apply functions.

``init`` and ``apply`` never touch the Module they are called on: they clone it onto a
fresh root Scope that holds the variables and RNG streams, call the requested method on the
clone, and drop the clone when the call returns. ``bind`` does the same but returns the
clone for interactive use.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from flaxen import errors, traceback_util
from flaxen.core import scope as core_scope
from flaxen.core._rng import is_valid_rng
from flaxen.core.scope import DenyList, union_filters
from flaxen.linen._naming import adopt_fields, try_setup
from flaxen.linen._state import ModuleBase, context, hooks

INIT_MUTABLE = DenyList("intermediates")


# --- cloning -----------------------------------------------------------------------------


def clone(module: Any, parent: Any = None, deep: Any = False, reset_names: bool = False,
          updates: dict | None = None) -> Any:
    """A new instance with the same fields (and ``updates``), attached to ``parent``."""
    cls = type(module)
    d = module.__dict__
    attrs = {f: d[f] for f in cls._flaxen_fields if f in d}
    if deep is not False:
        cache = deep if isinstance(deep, dict) else {}
        attrs = {k: _deep_clone_value(v, cache, reset_names) for k, v in attrs.items()}
    attrs["name"] = d["name"]
    if updates:
        attrs.update(updates)
    attrs["parent"] = parent
    return cls(**attrs)


def _deep_clone_value(v: Any, cache: dict, reset_names: bool) -> Any:
    if isinstance(v, ModuleBase):
        hit = cache.get(id(v))
        if hit is None:
            updates = {"name": None} if reset_names else None
            hit = clone(v, None, cache, reset_names, updates)
            cache[id(v)] = hit
        return hit
    t = type(v)
    if t is list or t is tuple:
        return t(_deep_clone_value(x, cache, reset_names) for x in v)
    if isinstance(v, Mapping):
        rebuilt = {k: _deep_clone_value(x, cache, reset_names) for k, x in v.items()}
        return type(v)(rebuilt)  # type: ignore[call-arg]
    return v


# --- method resolution ---------------------------------------------------------------------


def check_instance(module: Any) -> None:
    if not isinstance(module, ModuleBase):
        raise errors.InvalidInstanceModuleError()
    if "_state" not in module.__dict__:
        raise errors.IncorrectPostInitOverrideError()


def check_rngs(module: Any, rngs: Any) -> None:
    """A single (non-dict) ``rngs`` given to init/apply must be a PRNG key."""
    if rngs is not None and not isinstance(rngs, Mapping) and not is_valid_rng(rngs):
        raise errors.InvalidRngError(
            f"RNGs should be of shape (2,) or PRNGKey in Module {type(module).__name__}, "
            f"but rngs are: {rngs}. Pass jax.random.key(0) (or jax.random.PRNGKey(0)), or a "
            "dict of them such as {'params': key, 'dropout': key2}."
        )


def _takes_an_argument(fn: Callable) -> bool:
    code = getattr(fn, "__code__", None)
    if code is not None:
        return code.co_argcount > 0 or bool(code.co_flags & inspect.CO_VARARGS)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # builtins and C callables: let the call itself complain
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


def resolve_method(module: Any, method: Any) -> Callable[..., Any]:
    """``method=`` of init/apply as a function ``fn(module, *args, **kwargs)``."""
    if method is None:
        cls = type(module)
        for klass in cls.__mro__:
            fn = klass.__dict__.get("__call__")
            if fn is not None:
                return fn
        raise AttributeError(
            f'"{cls.__name__}" object has no attribute "__call__": define __call__ on the '
            "Module, or pass the method to run with method=..."
        )
    if isinstance(method, str):
        name = method
        attr = getattr(module, name)  # missing -> the Module's AttributeError
        if not callable(attr):
            raise TypeError(
                f"'{type(module).__name__}.{name}' must be a callable, got "
                f"{type(attr).__name__}. Pass the name of a method (or of a submodule)."
            )
        if isinstance(attr, ModuleBase):  # a submodule (field or setup attribute): call it
            def call_submodule(m: Any, *args: Any, **kwargs: Any) -> Any:
                return getattr(m, name)(*args, **kwargs)

            return call_submodule
        method = attr
    if inspect.ismethod(method):
        method = method.__func__
    if not callable(method) or not _takes_an_argument(method):
        raise errors.ApplyModuleInvalidMethodError(method)
    return method


def _get_unbound_fn(method_or_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``module.method`` -> ``Class.method``; other callables are returned as they are.

    Flax's private helper, with its rule (narrower than :func:`resolve_method`'s): only a
    method bound to a Module is unbound, and the result must be callable with at least one
    parameter of any kind (the Module), or ``ApplyModuleInvalidMethodError`` is raised.

    >>> import flaxen.linen as nn
    >>> _get_unbound_fn(nn.Dense(2).__call__) is nn.Dense.__call__
    True
    """
    if inspect.ismethod(method_or_fn) and isinstance(method_or_fn.__self__, ModuleBase):
        method_or_fn = method_or_fn.__func__
    if not callable(method_or_fn) or len(inspect.signature(method_or_fn).parameters) < 1:
        raise errors.ApplyModuleInvalidMethodError(method_or_fn)
    return method_or_fn


def capture_filter(capture_intermediates: Any) -> Callable[[Any, str], bool] | None:
    if capture_intermediates is True:
        return _capture_call
    if capture_intermediates is False or capture_intermediates is None:
        return None
    if not callable(capture_intermediates):
        raise TypeError(
            "capture_intermediates must be a bool or a function "
            f"fn(module, method_name) -> bool, got {capture_intermediates!r}."
        )
    return capture_intermediates


def _capture_call(module: Any, method_name: str) -> bool:
    return method_name == "__call__"


# --- init / apply ----------------------------------------------------------------------


def _scope_fn(fn: Callable, module: Any, keep: Any) -> Callable[..., Any]:
    # A bound Module's submodule fields are bound too: copy them unbound, so that they are
    # adopted into the new variables instead of writing into the old ones.
    deep = module.__dict__.get("scope") is not None
    if keep is None:
        def scope_fn(scope: Any, *args: Any, **kwargs: Any) -> Any:
            bound = clone(module, scope, deep)
            try:
                adopt_fields(bound)
                if context.capture_stack:  # shadow an outer apply's capture filter
                    return _with_capture(fn, bound, None, args, kwargs)
                return fn(bound, *args, **kwargs)
            finally:
                _release(bound)
    else:
        def scope_fn(scope: Any, *args: Any, **kwargs: Any) -> Any:
            bound = clone(module, scope, deep)
            try:
                adopt_fields(bound)
                return _with_capture(fn, bound, keep, args, kwargs)
            finally:
                _release(bound)
    return scope_fn


def _release(root: Any) -> None:
    """Unbinds the Modules of a finished init/apply from their (now invalid) scopes.

    Parents and children reference each other, so the tree lives until a garbage
    collection; without its scopes it no longer keeps the run's arrays (or the tracers of
    an enclosing ``jax.jit``/``vmap``) alive meanwhile.
    """
    stack = [root]
    while stack:
        d = stack.pop().__dict__
        if d.get("scope") is None:
            continue
        d["scope"] = None
        if not isinstance(d.get("parent"), ModuleBase):  # the root: its parent is the Scope
            d["parent"] = None
        for child in d["_state"].children.values():
            if isinstance(child, ModuleBase):
                stack.append(child)


def _with_capture(fn: Callable, bound: Any, keep: Any, args: tuple, kwargs: dict) -> Any:
    stack = context.capture_stack
    stack.append(keep)
    if keep is not None:
        hooks.capture_depth += 1
        hooks.refresh()
    try:
        return fn(bound, *args, **kwargs)
    finally:
        stack.pop()
        if keep is not None:
            hooks.capture_depth -= 1
            hooks.refresh()


def apply(fn: Callable[..., Any], module: Any, mutable: Any = False,
          capture_intermediates: Any = False) -> Callable[..., Any]:
    """``(variables, *args, rngs=None, **kwargs) -> fn(bound_clone, *args, **kwargs)``.

    With anything mutable the result is ``(output, mutated_collections)``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Scale(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         return x * self.param('s', nn.initializers.ones, ())
    >>> variables = Scale().init(jax.random.PRNGKey(0), 1.0)
    >>> float(nn.apply(lambda m, x: m(x) + 1, Scale())(variables, 2.0))
    3.0
    """
    check_instance(module)
    keep = capture_filter(capture_intermediates)
    if keep is not None:
        mutable = union_filters(mutable, "intermediates")
    return core_scope.apply(_scope_fn(fn, module, keep), mutable=mutable)


def init_with_output(fn: Callable[..., Any], module: Any, mutable: Any = INIT_MUTABLE,
                     capture_intermediates: Any = False) -> Callable[..., Any]:
    """``(rngs, *args, **kwargs) -> (fn(bound_clone, *args, **kwargs), variables)``.

    ``rngs`` is a PRNG key (the ``'params'`` stream) or a dict of named keys.
    """
    check_instance(module)
    keep = capture_filter(capture_intermediates)
    if keep is not None:
        mutable = union_filters(mutable, "intermediates")
    return core_scope.init(_scope_fn(fn, module, keep), mutable=mutable)


def init(fn: Callable[..., Any], module: Any, mutable: Any = INIT_MUTABLE,
         capture_intermediates: Any = False) -> Callable[..., Any]:
    """``(rngs, *args, **kwargs) -> variables``: like :func:`init_with_output`, no output.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Scale(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         return x * self.param('s', nn.initializers.ones, ())
    >>> variables = nn.init(lambda m, x: m(x), Scale())(jax.random.PRNGKey(0), 1.0)
    >>> list(variables['params'])
    ['s']
    """
    wrapped = init_with_output(fn, module, mutable, capture_intermediates)

    @traceback_util.api_boundary
    def init_fn(rngs: Any, *args: Any, **kwargs: Any) -> Any:
        return wrapped(rngs, *args, **kwargs)[1]

    return init_fn


def lazy_init(fn: Callable[..., Any], module: Any, mutable: Any = INIT_MUTABLE
              ) -> Callable[..., Any]:
    """Like :func:`init`, but inputs may be ``jax.ShapeDtypeStruct`` (nothing computed)."""
    check_instance(module)
    return core_scope.lazy_init(_scope_fn(fn, module, None), mutable=mutable)


def bind(module: Any, variables: Any, rngs: Any = None, mutable: Any = False) -> Any:
    check_instance(module)
    if rngs is not None and not isinstance(rngs, Mapping):
        rngs = {"params": rngs}
    scope = core_scope.bind(variables, rngs=rngs, mutable=mutable)
    bound = clone(module, scope)
    try_setup(bound, shallow=True)
    return bound


def unbind(module: Any) -> tuple[Any, Any]:
    if module.scope is None:
        raise errors.CallUnbindOnUnboundModuleError()
    unbound = clone(module, None, deep=True, reset_names=True, updates={"name": None})
    return unbound, module.variables
