"""``nn.jit``: a lifted ``jax.jit`` whose traces are reused across calls.

A lifted function is built once per transformed method (not per call), and the Module is
passed to it as a static argument that compares by configuration: class, field values,
name, and the bookkeeping that affects tracing (compact state, auto-name counters). A
second ``apply`` of the same model therefore hits ``jax.jit``'s cache instead of tracing
again; changing a field re-traces.

When a trace is reused, the method body does not run, so the Module-side effects of the
first run (auto-name counters advanced by submodules created inside) are replayed from a
record kept per configuration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from flaxen.core import lift
from flaxen.linen._interception import mark_wrapped
from flaxen.linen._state import ModuleState
from flaxen.linen._transform_wrap import (
    _PUBLIC_MODULE,
    InstancePlaceholder,
    _fn_name,
    _scopes_list,
    base_instance,
    check_return_value,
    clone_onto,
    collect_scopes,
    export_state,
    is_module_class,
    method_trafo_args,
    module_fingerprint,
    plan_key,
    prewrap,
    reimport_state,
    restore_args,
    unbound_fn,
)

# Module state after a traced call, per configuration key (replayed on cache hits).
_STATE_AFTER: dict[Any, ModuleState] = {}
_MAX_RECORDS = 4096


def _state_fingerprint(st: ModuleState) -> tuple:
    cursor = st.autoname_cursor
    return (st.in_compact, st.in_setup, st.compact_done,
            None if cursor is None else tuple(sorted(cursor.items())))


class _JitModule:
    """The static argument standing for the Module: equal when the configuration is."""

    __slots__ = ("template", "snapshot", "owner_state", "fields", "key", "_hash")

    def __init__(self, template: Any, snapshot: ModuleState, owner_state: ModuleState,
                 args: tuple, kwargs: dict, fields: dict | None = None) -> None:
        self.template = template
        self.fields = fields
        self.snapshot = snapshot
        self.owner_state = owner_state
        arg_fps = tuple(
            module_fingerprint(leaf.module)
            for leaf in jax.tree_util.tree_leaves(
                (args, kwargs), is_leaf=lambda x: isinstance(x, InstancePlaceholder))
            if isinstance(leaf, InstancePlaceholder))
        self.key = (module_fingerprint(template, names=False), _state_fingerprint(snapshot),
                    arg_fps, plan_key(fields))
        self._hash = hash(self.key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _JitModule) and self.key == other.key


def _core_kwargs(kw: dict) -> dict:
    """Linen jit arguments -> core ``lift.jit`` ones (a static Module argument goes first).

    Linen counts ``self`` as argument 0; the core counts arguments after the scope, where
    the static Module stand-in is argument 0, so the user's argument ``i`` keeps index ``i``.
    """
    kw = dict(kw)
    static = kw.pop("static_argnums", ())
    donate = kw.pop("donate_argnums", ())
    static = (static,) if isinstance(static, int) else tuple(static)
    donate = (donate,) if isinstance(donate, int) else tuple(donate)
    kw["static_argnums"] = (0,) + tuple(i for i in static if i > 0)
    kw["donate_argnums"] = tuple(i for i in donate if i > 0)
    names = kw.get("static_argnames", ())
    kw["static_argnames"] = (names,) if isinstance(names, str) else tuple(names)
    return kw


def _lifted(fn: Callable[..., Any], name: str, core_kw: dict,
            transform: Callable[..., Any] = lift.jit) -> Callable[..., Any]:
    """``transform`` (``lift.jit``) of a function running ``fn`` on a clone of the static
    Module."""

    def core_fn(scopes: Any, module: _JitModule, *args: Any, **kwargs: Any) -> Any:
        scopes = _scopes_list(scopes)
        cache: dict = {}
        clone = clone_onto(module.template, scopes[0], module.snapshot, module.fields, scopes,
                           cache)
        args, kwargs = restore_args(args, kwargs, scopes, cache)
        res = fn(clone, *args, **kwargs)
        if len(_STATE_AFTER) >= _MAX_RECORDS:
            _STATE_AFTER.clear()
        _STATE_AFTER[module.key] = export_state(clone._state)
        reimport_state(module.owner_state, clone._state)
        check_return_value(res, name)
        return res

    core_fn.__name__ = name
    return transform(core_fn, **core_kw)


def _call(trafo_fn: Callable[..., Any], self: Any, template: Any, name: str,
          args: tuple, kwargs: dict) -> Any:
    fields: dict = {}
    scopes, args, kwargs = collect_scopes(self, args, kwargs, name, fields)
    owner_state = self._state
    module = _JitModule(template, export_state(owner_state), owner_state, args, kwargs,
                        fields)
    out = trafo_fn(scopes, module, *args, **kwargs)
    after = _STATE_AFTER.get(module.key)
    if after is not None:
        reimport_state(owner_state, after)
    return out


def jit_lift_transform(target: Any, methods: Any = None,
                       transform: Callable[..., Any] = lift.jit, **jit_kwargs: Any) -> Any:
    """``nn.jit`` for a Module class (subclass ``Jit<Name>``) or a method/function.

    ``transform`` is the core transform (``lift.jit``, or one taking the same
    ``static_argnums``/``static_argnames``/``donate_argnums``): the Module travels as its
    first static argument, so equal configurations share one trace.
    """
    if isinstance(target, functools.partial) and is_module_class(target.func):
        cls = jit_lift_transform(target.func, methods, transform, **jit_kwargs)
        return functools.partial(cls, *target.args, **target.keywords)
    if is_module_class(target):
        module_class = target
        per_method = method_trafo_args(methods, (), jit_kwargs)

        def create(fn_name: str, kw: dict) -> Callable[..., Any]:
            fn = getattr(module_class, fn_name, None)
            if fn is None or not callable(fn):
                raise AttributeError(
                    f"Can't jit method {fn_name!r} of {module_class.__name__}: the class has "
                    "no such method. Methods listed in methods= must exist on the class."
                )
            fn = prewrap(fn)
            trafo_fn = _lifted(fn, fn_name, _core_kwargs({**jit_kwargs, **kw}), transform)

            def wrapped_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
                return _call(trafo_fn, self, base_instance(self, module_class), fn_name,
                             args, kwargs)

            functools.update_wrapper(wrapped_fn, fn)
            mark_wrapped(wrapped_fn)
            return wrapped_fn

        namespace: dict[str, Any] = {n: create(n, kw) for n, (_, kw) in per_method.items()}
        namespace["__module__"] = _PUBLIC_MODULE
        cls = type("Jit" + module_class.__name__, (module_class,), namespace)
        cls.__qualname__ = cls.__name__
        return cls

    fn = prewrap(unbound_fn(target))
    name = _fn_name(target)
    trafo_fn = _lifted(fn, name, _core_kwargs(jit_kwargs), transform)

    def wrapped_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _call(trafo_fn, self, self, name, args, kwargs)

    functools.update_wrapper(wrapped_fn, fn)
    mark_wrapped(wrapped_fn)
    return wrapped_fn
