"""How a Linen transform carries Modules across a core lifted transform.

A core transform (``flaxen.core.lift``) works on functions of Scopes. To lift a Module
method, the Module (and every bound Module or Variable found in the arguments) is swapped
for its Scope on the way in (:func:`get_module_scopes`); inside the transform, a clone of
each Module is bound to the matching inner Scope (:func:`set_module_scopes`) and the method
runs on the clone. The per-instance bookkeeping that must survive the boundary (is the
compact method running, the auto-name counters) is copied onto the clone and back, so
submodules created inside get the names they would get without the transform.

Three entry points build on this:

* :func:`module_class_lift_transform`: ``nn.vmap(MLP, ...)`` returns a subclass ``VmapMLP``
  whose listed methods are lifted (the class name gives the auto-name ``VmapMLP_0``);
* :func:`decorator_lift_transform`: a method or a function ``fn(module, *args)``;
* :func:`lift_direct_transform`: call-site transforms (``nn.vjp``, ``nn.cond``, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax

from flaxen import errors, serialization
from flaxen._hashing import Identity, hashable
from flaxen.core.frozen_dict import FrozenDict
from flaxen.core.scope import Scope, Variable
from flaxen.linen._interception import is_wrapped, mark_wrapped, wrap_method
from flaxen.linen._naming import try_setup
from flaxen.linen._state import SETUP_DONE, SETUP_NONE, ModuleBase, ModuleState

# Transformed classes report this module, as Flax's report ``flax.linen.transforms``.
_PUBLIC_MODULE = "flaxen.linen.transforms"


# --- placeholders for Modules and Variables passed as arguments --------------------------


@dataclasses.dataclass(frozen=True)
class InstancePlaceholder:
    """Stands for a bound Module of the arguments while they cross a transform.

    Flax's fields: the Module's class ``cls``, its constructor field values ``attrs`` and
    ``id``, here the index of the crossing scope the Module is bound to. A pytree without
    leaves, so JAX transforms pass it through untouched; it compares by ``cls`` and ``id``.
    The Module it stands for rides along (``module``) for :func:`restore_args`.
    """

    cls: type
    attrs: Mapping[str, Any] = dataclasses.field(compare=False)
    id: int
    module: Any = dataclasses.field(default=None, compare=False, repr=False)

    def replace(self, **updates: Any) -> InstancePlaceholder:
        """A copy with the given fields changed (as Flax's struct dataclasses have)."""
        return dataclasses.replace(self, **updates)


@dataclasses.dataclass(frozen=True)
class VariablePlaceholder:
    """Stands for a Variable of the arguments (rebuilt on the inner scope number ``id``)."""

    collection: str
    name: str
    unbox: bool
    id: int  # the index of the crossing scope the Variable is rebuilt on

    def replace(self, **updates: Any) -> VariablePlaceholder:
        """A copy with the given fields changed (as Flax's struct dataclasses have)."""
        return dataclasses.replace(self, **updates)


def _init_attrs(module: Any) -> Mapping[str, Any]:
    """The constructor field values of ``module`` (without ``parent`` and ``name``)."""
    return {f.name: getattr(module, f.name) for f in dataclasses.fields(module)
            if f.init and f.name not in ("parent", "name")}


def _flatten_placeholder(p: Any) -> tuple[tuple, Any]:
    return (), p


jax.tree_util.register_pytree_node(
    InstancePlaceholder, _flatten_placeholder, lambda aux, _: aux)
jax.tree_util.register_pytree_node(
    VariablePlaceholder, _flatten_placeholder, lambda aux, _: aux)


def _is_special(x: Any) -> bool:
    return isinstance(x, (ModuleBase, Variable))


def _check_bound(module: Any, what: str) -> Scope:
    if not isinstance(module, ModuleBase):
        raise errors.TransformTargetError(module)
    scope = module.__dict__.get("scope")
    if scope is None:
        raise ValueError(
            f"Can't call the lifted {what} of {type(module).__name__}: the Module is unbound "
            "(it has no variables). Lifted transforms run inside init/apply: call it from "
            "a parent's @compact method or setup, or through module.init(...)/apply(...)."
        )
    return scope


class _ScopeIndex:
    """The de-duplicated list of scopes crossing one transform."""

    __slots__ = ("scopes", "_pos")

    def __init__(self) -> None:
        self.scopes: list[Scope] = []
        self._pos: dict[int, int] = {}

    def add(self, scope: Scope) -> int:
        i = self._pos.get(id(scope))
        if i is None:
            i = self._pos[id(scope)] = len(self.scopes)
            self.scopes.append(scope)
        return i


def collect_scopes(module: Any, args: tuple, kwargs: dict, what: str,
                   fields_out: dict | None = None) -> tuple[list[Scope], tuple, dict]:
    """Scopes of ``module`` and of the bound Modules/Variables in ``args``/``kwargs``.

    Returns ``(scopes, args, kwargs)`` with placeholders in place of those Modules and
    Variables; ``scopes[0]`` is ``module``'s scope. With ``fields_out`` (a dict), the bound
    Modules and Variables held in ``module``'s fields (at any depth) cross too: their
    scopes are added and ``fields_out`` gets the plan :func:`rebuild_fields` reverses.
    """
    scope = _check_bound(module, what)
    try_setup(module, shallow=True)
    if module._state.setup_called != SETUP_DONE and type(module)._flaxen_setup is not None:
        validate_setup(module)
    index = _ScopeIndex()
    index.add(scope)
    if fields_out is not None:
        fields_out.update(_field_plans(module, index))
    if not args and not kwargs:
        return index.scopes, args, kwargs
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_special)
    if not any(isinstance(x, (ModuleBase, Variable)) for x in leaves):
        return index.scopes, args, kwargs
    new_leaves: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, ModuleBase) and leaf.__dict__.get("scope") is not None:
            try_setup(leaf, shallow=True)
            scope_id = index.add(leaf.__dict__["scope"])
            new_leaves.append(InstancePlaceholder(type(leaf), _init_attrs(leaf), scope_id, leaf))
        elif isinstance(leaf, Variable):
            new_leaves.append(VariablePlaceholder(
                leaf.collection, leaf.name, leaf.unbox, index.add(leaf.scope)))
        else:
            new_leaves.append(leaf)
    args, kwargs = jax.tree_util.tree_unflatten(treedef, new_leaves)
    return index.scopes, args, kwargs


@dataclasses.dataclass(frozen=True)
class _ModulePlan:
    """A bound Module found in a field: cloned onto inner scope ``scope_idx``."""

    module: Any
    scope_idx: int
    fields: dict


@dataclasses.dataclass(frozen=True)
class _VariablePlan:
    variable: Any
    scope_idx: int


@dataclasses.dataclass(frozen=True)
class _TreePlan:
    """A list/tuple/dict field holding bound Modules: ``items`` pairs (plan or None, value)."""

    kind: type
    keys: tuple
    items: tuple


def _value_plan(v: Any, index: _ScopeIndex, depth: int) -> Any:
    if isinstance(v, ModuleBase):
        if v.__dict__.get("scope") is None or depth > 32:
            return None
        try_setup(v, shallow=True)
        fields = _field_plans(v, index, depth + 1)
        return _ModulePlan(v, index.add(v.__dict__["scope"]), fields)
    if isinstance(v, Variable):
        return _VariablePlan(v, index.add(v.scope))
    if isinstance(v, (list, tuple)):
        keys = tuple(range(len(v)))
    elif isinstance(v, Mapping):
        keys = tuple(v)
    else:
        return None
    plans = tuple(_value_plan(v[k], index, depth + 1) for k in keys)
    if all(p is None for p in plans):
        return None
    return _TreePlan(type(v), keys, tuple(zip(plans, (v[k] for k in keys))))


def _field_plans(module: Any, index: _ScopeIndex, depth: int = 0) -> dict:
    d = module.__dict__
    out = {}
    for f in type(module)._flaxen_fields:
        v = d.get(f)
        if isinstance(v, (ModuleBase, Variable, list, tuple, Mapping)):
            p = _value_plan(v, index, depth)
            if p is not None:
                out[f] = p
    return out


def _rebuild(p: Any, scopes: Any, cache: dict) -> Any:
    if isinstance(p, _ModulePlan):
        m = p.module
        clone = cache.get(id(m))  # one Module held twice stays one clone
        if clone is None:
            clone = m.clone(parent=scopes[p.scope_idx],
                            **rebuild_fields(p.fields, scopes, cache))
            clone.__dict__["_state"] = export_state(m._state)
            cache[id(m)] = clone
        return clone
    if isinstance(p, _VariablePlan):
        v = p.variable
        return Variable(scopes[p.scope_idx], v.collection, v.name, unbox=v.unbox)
    values = [x if sub is None else _rebuild(sub, scopes, cache) for sub, x in p.items]
    if issubclass(p.kind, Mapping):
        return p.kind(dict(zip(p.keys, values)))
    if hasattr(p.kind, "_fields"):  # namedtuple
        return p.kind(*values)
    return p.kind(values)


def rebuild_fields(plans: dict | None, scopes: list[Scope] | None, cache: dict | None = None
                   ) -> dict:
    """Field updates putting the Modules/Variables of ``plans`` onto the inner ``scopes``.

    ``cache`` (original Module id -> clone) is shared with :func:`restore_args`, so a
    Module passed both as a field and as an argument becomes one clone.
    """
    if not plans:
        return {}
    cache = {} if cache is None else cache
    return {f: _rebuild(p, scopes, cache) for f, p in plans.items()}


def plan_key(plans: dict | None) -> Any:
    """A hashable summary of a field plan (which field goes to which scope)."""
    if not plans:
        return ()

    def key(p: Any) -> Any:
        if isinstance(p, _ModulePlan):
            return ("m", p.scope_idx, plan_key(p.fields))
        if isinstance(p, _VariablePlan):
            return ("v", p.scope_idx)
        if p is None:
            return None
        return ("t", p.kind, p.keys, tuple(key(sub) for sub, _ in p.items))

    return tuple((f, key(p)) for f, p in plans.items())


class TestScope(Scope):
    """The root scope of a dry run of ``setup``: every ``make_rng`` gives the same key.

    ``setup`` code can tell it is being validated by this class (as under Flax).
    """

    __test__ = False  # not a pytest test class, despite the name

    def make_rng(self, name: str = "params") -> Any:
        return jax.random.key(0)


def validate_setup(module: Any) -> None:
    """Runs ``module``'s ``setup`` abstractly on a throwaway scope before a transform.

    Mistakes in ``setup`` (a name used twice, a bad attribute) then surface outside the
    transform, where the traceback is plain. Nothing is computed (``jax.eval_shape``).
    """

    def run(_: Any) -> int:
        root = TestScope({}, rngs={}, mutable=True)
        try:
            try_setup(module.clone(parent=root))
        finally:
            root.invalidate()
        return 0

    jax.eval_shape(run, 0)


def _is_placeholder(x: Any) -> bool:
    return isinstance(x, (InstancePlaceholder, VariablePlaceholder))


def restore_args(args: tuple, kwargs: dict, scopes: list[Scope], cache: dict | None = None
                 ) -> tuple[tuple, dict]:
    """Replaces placeholders by clones of the Modules (Variables) on the inner scopes."""
    if not args and not kwargs:
        return args, kwargs
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_placeholder)
    if not any(_is_placeholder(x) for x in leaves):
        return args, kwargs
    new_leaves = []
    for leaf in leaves:
        if isinstance(leaf, InstancePlaceholder):
            mod = leaf.module
            clone = None if cache is None else cache.get(id(mod))
            if clone is None:
                clone = mod.clone(parent=scopes[leaf.id], _deep_clone=True)
                clone.__dict__["_state"] = export_state(mod._state)
                if cache is not None:
                    cache[id(mod)] = clone
            new_leaves.append(clone)
        elif isinstance(leaf, VariablePlaceholder):
            new_leaves.append(Variable(scopes[leaf.id], leaf.collection, leaf.name,
                                       unbox=leaf.unbox))
        else:
            new_leaves.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, new_leaves)


# --- Module state across the boundary ----------------------------------------------------


def export_state(st: ModuleState) -> ModuleState:
    """The bookkeeping a clone inherits: compact/setup flags and auto-name counters.

    The clone sets itself up again on its own (inner) scope, so ``setup_called`` starts
    over; its children are its own.
    """
    new = ModuleState()
    new.in_compact = st.in_compact
    new.in_setup = st.in_setup
    new.compact_done = st.compact_done
    cursor = st.autoname_cursor
    new.autoname_cursor = None if cursor is None else dict(cursor)
    new.setup_called = SETUP_NONE
    new.reuse_scopes = st.setup_called == SETUP_DONE or st.reuse_scopes
    return new


def clone_onto(module: Any, scope: Scope, state: ModuleState,
               fields: dict | None = None, scopes: list[Scope] | None = None,
               cache: dict | None = None) -> Any:
    """A deep clone of ``module`` bound to ``scope`` (inside a transform), inheriting the
    bookkeeping of ``state`` (see :func:`export_state`); the field Modules/Variables of
    the plan ``fields`` are bound to their inner ``scopes``."""
    clone = module.clone(parent=scope, _deep_clone=True,
                         **rebuild_fields(fields, scopes, cache))
    clone.__dict__["_state"] = export_state(state)
    return clone


def reimport_state(st: ModuleState, other: ModuleState) -> None:
    """Copies the transform-preserved bookkeeping of a clone back onto the original."""
    st.in_compact = other.in_compact
    st.in_setup = other.in_setup
    st.compact_done = other.compact_done
    cursor = other.autoname_cursor
    st.autoname_cursor = None if cursor is None else dict(cursor)


def check_return_value(value: Any, name: str | None) -> None:
    """Modules and Variables are bound to inner scopes: they must not leave a transform."""
    if isinstance(value, (ModuleBase, Variable)):
        raise errors.TransformedMethodReturnValueError(name)
    if isinstance(value, (jax.Array, int, float)) or value is None:
        return
    for leaf in jax.tree_util.tree_leaves(value, is_leaf=_is_special):
        if isinstance(leaf, (ModuleBase, Variable)):
            raise errors.TransformedMethodReturnValueError(name)


# --- public helpers with Flax's names ------------------------------------------------------


def get_module_scopes(module: Any, args: tuple | None = None, kwargs: dict | None = None
                      ) -> tuple[list[Scope], Any, Any]:
    """``(scopes, args, kwargs)``: the scopes of ``module`` and of Modules in the arguments.

    Modules and Variables in ``args``/``kwargs`` are replaced by placeholders that
    :func:`set_module_scopes` turns back into Modules bound to (inner) scopes.
    """
    scopes, new_args, new_kwargs = collect_scopes(
        module, tuple(args or ()), dict(kwargs or {}), "method")
    return (scopes, new_args if args is not None else None,
            new_kwargs if kwargs is not None else None)


def set_module_scopes(module: Any, args: Any, kwargs: Any, scopes: Any
                      ) -> tuple[Any, Any, Any]:
    """A clone of ``module`` bound to ``scopes[0]``, with placeholders in the arguments
    replaced by clones bound to their scopes (the inverse of :func:`get_module_scopes`)."""
    scopes = _scopes_list(scopes)
    clone = clone_onto(module, scopes[0], module._state)
    new_args, new_kwargs = restore_args(tuple(args or ()), dict(kwargs or {}), scopes)
    return (clone, new_args if args is not None else None,
            new_kwargs if kwargs is not None else None)


# --- building the lifted functions ----------------------------------------------------------


def is_module_class(target: Any) -> bool:
    return isinstance(target, type) and issubclass(target, ModuleBase)


def _positional_arity_ok(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # C callables: let the call itself complain
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


def unbound_fn(method_or_fn: Any) -> Callable[..., Any]:
    """``self.foo`` -> ``Class.foo``; anything that cannot take a Module first raises."""
    if inspect.ismethod(method_or_fn) and isinstance(method_or_fn.__self__, ModuleBase):
        method_or_fn = method_or_fn.__func__
    if (not callable(method_or_fn) or isinstance(method_or_fn, (type, ModuleBase))
            or not _positional_arity_ok(method_or_fn)):
        raise errors.TransformTargetError(method_or_fn)
    return method_or_fn


def prewrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with the Module method wrapper (setup, module stack, compact tracking)."""
    if is_wrapped(fn):
        return fn
    return wrap_method(fn, getattr(fn, "compact", False) is True)


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def run_on_clone(fn: Callable, template: Any, state: ModuleState, owner_state: ModuleState,
                 scopes: list[Scope], args: tuple, kwargs: dict, name: str | None,
                 fields: dict | None = None) -> Any:
    """Inside a transform: binds a clone of ``template`` to ``scopes[0]`` and runs ``fn``."""
    cache: dict = {}
    clone = clone_onto(template, scopes[0], state, fields, scopes, cache)
    args, kwargs = restore_args(args, kwargs, scopes, cache)
    res = fn(clone, *args, **kwargs)
    reimport_state(owner_state, clone._state)
    check_return_value(res, name)
    return res


def _scopes_list(scopes: Any) -> list[Scope]:
    return scopes if isinstance(scopes, list) else list(scopes) if isinstance(
        scopes, tuple) else [scopes]


def decorator_lift_transform(transform: Callable[..., Any], class_fn: Any, *trafo_args: Any,
                             multi_scope: bool = True, **trafo_kwargs: Any
                             ) -> Callable[..., Any]:
    """Lifts a method (or functions) ``fn(module, *args)`` with a core ``transform``.

    ``class_fn`` may be a tuple of functions (e.g. ``cond``'s two branches); ``transform``
    is then called with one scope function per entry. With ``multi_scope=False`` the core
    transform gets a single scope, and Modules passed as arguments are not supported.
    """
    class_fns = class_fn if isinstance(class_fn, tuple) else (class_fn,)
    prewrapped = tuple(prewrap(f) for f in class_fns)
    names = tuple(_fn_name(f) for f in class_fns)

    def wrapped_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Single-scope core transforms (vjp, jvp, ...) take field Modules unbound, as before.
        fields: dict | None = {} if multi_scope else None
        scopes, args, kwargs = collect_scopes(self, args, kwargs, names[0], fields)
        owner_state = self._state
        snapshot = export_state(owner_state)

        def make_core(fn: Callable, name: str) -> Callable[..., Any]:
            def core_fn(scopes: Any, *args: Any, **kwargs: Any) -> Any:
                return run_on_clone(fn, self, snapshot, owner_state, _scopes_list(scopes),
                                    args, kwargs, name, fields)
            core_fn.__name__ = name
            return core_fn

        core_fns = [make_core(f, n) for f, n in zip(prewrapped, names)]
        trafo_fn = transform(*core_fns, *trafo_args, **trafo_kwargs)
        if not multi_scope:
            if len(scopes) != 1:
                raise NotImplementedError(
                    f"This transform does not support Modules or Variables passed as "
                    f"arguments of {names[0]!r} (found {len(scopes) - 1}); call them "
                    "through the Module given as the first argument instead."
                )
            return trafo_fn(scopes[0], *args, **kwargs)
        return trafo_fn(scopes, *args, **kwargs)

    functools.update_wrapper(wrapped_fn, prewrapped[0])
    mark_wrapped(wrapped_fn)
    return wrapped_fn


def method_trafo_args(methods: Any, trafo_args: tuple, trafo_kwargs: dict
                      ) -> dict[str, tuple[tuple, dict]]:
    """Per-method transform arguments from a transform's ``methods=`` argument."""
    if methods is None:
        return {"__call__": (trafo_args, trafo_kwargs)}
    if isinstance(methods, (list, tuple)):
        return {m: (trafo_args, trafo_kwargs) for m in methods}
    if isinstance(methods, (dict, FrozenDict)):
        return {m: ((), dict(kw)) for m, kw in methods.items()}
    raise ValueError(
        "transform methods argument must be None, tuple, list, or dict. Got "
        f"{methods!r}: pass e.g. methods=['__call__', 'encode'], or a dict mapping method "
        "names to per-method transform keyword arguments."
    )


def base_instance(module: Any, module_class: Any) -> Any:
    """An unbound instance of ``module_class`` with the fields (and name) of ``module``."""
    d = module.__dict__
    attrs = {f: d[f] for f in module_class._flaxen_fields if f in d}
    return module_class(**attrs, name=d.get("name"), parent=None)


def module_class_lift_transform(transform: Callable[..., Any], module_class: Any,
                                *trafo_args: Any, methods: Any = None,
                                class_prefix: str | None = None, **trafo_kwargs: Any) -> type:
    """A subclass of ``module_class`` whose methods (default ``__call__``) are lifted.

    The subclass is named ``{Prefix}{ClassName}`` (``VmapMLP``), so its auto-names are
    ``VmapMLP_0``, ... . Inside the transform, the original class's method runs on a clone
    bound to the lifted scope.
    """
    per_method = method_trafo_args(methods, trafo_args, trafo_kwargs)
    prefix = class_prefix or _fn_name(transform).capitalize()

    def create(fn_name: str, args: tuple, kwargs: dict) -> Callable[..., Any]:
        fn = getattr(module_class, fn_name, None)
        if fn is None or not callable(fn):
            raise AttributeError(
                f"Can't transform method {fn_name!r} of {module_class.__name__}: the class "
                f"has no such method. Methods listed in methods= must exist on the class."
            )
        fn = prewrap(fn)

        def wrapped_fn(self: Any, *call_args: Any, **call_kwargs: Any) -> Any:
            fields: dict = {}
            scopes, call_args, call_kwargs = collect_scopes(
                self, call_args, call_kwargs, fn_name, fields)
            owner_state = self._state
            snapshot = export_state(owner_state)
            template = base_instance(self, module_class)

            def core_fn(scopes: Any, *a: Any, **k: Any) -> Any:
                return run_on_clone(fn, template, snapshot, owner_state,
                                    _scopes_list(scopes), a, k, fn_name, fields)

            core_fn.__name__ = fn_name
            trafo_fn = transform(core_fn, *args, **kwargs)
            return trafo_fn(scopes, *call_args, **call_kwargs)

        functools.update_wrapper(wrapped_fn, fn)
        mark_wrapped(wrapped_fn)
        return wrapped_fn

    namespace: dict[str, Any] = {
        name: create(name, a, kw) for name, (a, kw) in per_method.items()}
    namespace["__module__"] = _PUBLIC_MODULE
    cls = type(prefix + module_class.__name__, (module_class,), namespace)
    cls.__qualname__ = cls.__name__
    return cls


def lift_transform(transform: Callable[..., Any], target: Any, *trafo_args: Any,
                   methods: Any = None, class_prefix: str | None = None,
                   **trafo_kwargs: Any) -> Any:
    """Applies a core ``transform`` to a Module class or to a method/function."""
    if isinstance(target, functools.partial) and is_module_class(target.func):
        # partial(Dense, use_bias=False): transform the class, keep the bound arguments
        cls = module_class_lift_transform(transform, target.func, *trafo_args,
                                          methods=methods, class_prefix=class_prefix,
                                          **trafo_kwargs)
        return functools.partial(cls, *target.args, **target.keywords)
    if is_module_class(target):
        return module_class_lift_transform(transform, target, *trafo_args, methods=methods,
                                           class_prefix=class_prefix, **trafo_kwargs)
    fn = unbound_fn(target)
    return decorator_lift_transform(transform, fn, *trafo_args, **trafo_kwargs)


class DirectTransformTargetError(errors.TransformTargetError, ValueError):
    """A call-site transform (``nn.vjp``, ``nn.cond``, ...) got a bad function argument.

    Also a ``ValueError``, which is what Flax raises here.
    """

    def __init__(self, target: Any, transform_name: str) -> None:
        errors.FlaxError.__init__(
            self,
            f"nn.{transform_name} needs functions taking a Module instance as their first "
            f"argument (e.g. lambda mdl, x: mdl(x)), but got {target!r}. To use a Module "
            "class, instantiate it and pass the instance after the function(s).",
        )
        self.target = target


def lift_direct_transform(transform: Callable[..., Any], targets: tuple, mdl: Any,
                          *args: Any, multi_scope: bool = True, **kwargs: Any) -> Any:
    """Applies ``transform`` to ``targets`` (functions of a Module) and calls it on ``mdl``.

    Used by the call-site transforms (``vjp``, ``jvp``, ``cond``, ``while_loop``, ...).
    """
    name = _fn_name(transform)
    for target in targets:
        if is_module_class(target) or not callable(target):
            raise DirectTransformTargetError(target, name)
    fns = tuple(unbound_fn(t) for t in targets)
    if not isinstance(mdl, ModuleBase):
        raise TypeError(
            f"{_fn_name(transform)} expects a Module instance after its function "
            f"argument(s), got {mdl!r} of type {type(mdl).__name__}. Pass the Module the "
            "function should run on, e.g. nn.vjp(fn, self, x)."
        )

    def aug_transform(*core_fns: Callable[..., Any]) -> Callable[..., Any]:
        return functools.partial(transform, *core_fns)

    return decorator_lift_transform(aug_transform, fns, multi_scope=multi_scope)(
        mdl, *args, **kwargs)


def module_fingerprint(x: Any, _depth: int = 0, names: bool = True) -> Any:
    """A hashable summary of a value's configuration (Modules: class + fields + name).

    ``names=False`` leaves Module names out (as Flax's ``nn.jit`` cache key does: sibling
    Modules configured alike share one trace; the scope they run in is an argument).
    """
    if isinstance(x, ModuleBase):
        if _depth > 32:
            return Identity(x)
        cls = type(x)
        d = x.__dict__
        return (cls, d.get("name") if names else None, tuple(
            module_fingerprint(d.get(f), _depth + 1, names) for f in cls._flaxen_fields))
    if isinstance(x, (list, tuple)):
        return (type(x), tuple(module_fingerprint(v, _depth + 1, names) for v in x))
    if isinstance(x, Mapping):
        return (type(x), tuple((k, module_fingerprint(v, _depth + 1, names))
                               for k, v in x.items()))
    if _depth < 32 and serialization.is_serializable(x) and not isinstance(x, jax.Array):
        # A type with a registered state dict is compared by that dict, not by its
        # __hash__/__eq__ (which it may not support).
        return (type(x), module_fingerprint(serialization.to_state_dict(x), _depth + 1, names))
    return hashable(x)
