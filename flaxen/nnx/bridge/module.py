"""``bridge.Module``: NNX modules written Linen-style (dataclass fields, ``setup``, ``@compact``,
``self.param``, ``init``/``apply``), so Linen code ports to NNX a piece at a time.

A bridge Module is an ``nnx.Module`` and a dataclass. Outside ``init``/``apply`` it is a plain
NNX object; ``apply(variables, ...)`` works on a copy: it loads the Linen-style
``{collection: {path: value}}`` variables as Variables, gives every module a :class:`Scope`
(the ``Rngs`` and the ``mutable`` filter), runs ``setup`` where defined, calls the method and
returns its output (with the variables when ``mutable``). Submodules created inside a
``@compact`` method are named ``<Class>_<n>`` (or by ``name=``) and attached to the parent;
``self.param`` / ``self.variable`` return the stored Variable or create it.
:data:`MODULE_CONTEXT` holds the stack of running modules (``current_module()``).

>>> import jax, jax.numpy as jnp
>>> from flaxen.nnx import bridge
>>> class Dense(bridge.Module):
...     features: int
...     @bridge.compact
...     def __call__(self, x):
...         w = self.param('w', jax.nn.initializers.ones, (x.shape[-1], self.features))
...         return x @ w
>>> variables = Dense(3).init(0, jnp.ones((1, 2)))
>>> variables['params']['w'].shape
(2, 3)
>>> Dense(3).apply(variables, jnp.ones((1, 2))).tolist()
[[2.0, 2.0, 2.0]]
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import threading
import typing as tp
import weakref
from collections import defaultdict

import jax
import numpy as np

from flaxen import errors
from flaxen.core import meta
from flaxen.core.frozen_dict import FrozenDict
from flaxen.nnx import _graph_ops as graphlib
from flaxen.nnx import module as nnx_module
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._variable_names import variable_name_from_type, variable_type_from_name
from flaxen.nnx.bridge import variables as bv
from flaxen.nnx.pytreelib import Pytree
from flaxen.nnx.rnglib import Rngs, RngState
from flaxen.nnx.statelib import State
from flaxen.nnx.variablelib import Param, Variable, VariableMetadata

A = tp.TypeVar("A")
M = tp.TypeVar("M", bound="Module")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])


@dataclasses.dataclass
class ModuleStackEntry:
    """One running module: whether it is inside a ``@compact`` method, and how many
    submodules of each type it has auto-named in that call."""

    module: Module
    in_compact: bool
    type_counter: defaultdict = dataclasses.field(default_factory=lambda: defaultdict(int))


@dataclasses.dataclass
class ModuleContext(threading.local):
    """Per thread: the stack of running bridge modules (``None`` at the bottom).

    A dataclass over ``threading.local``: each thread that touches it runs ``__init__`` again,
    so each gets its own fresh stack.
    """

    module_stack: list[ModuleStackEntry | None] = dataclasses.field(
        default_factory=lambda: [None])

    def __post_init__(self) -> None:
        # whether each running apply() initializes (not a field: not part of equality)
        self.initializing: list[bool] = []


MODULE_CONTEXT = ModuleContext()


class AttrPriority(enum.IntEnum):
    """Order hint for attributes naming the same submodule (lower first)."""

    HIGH = 0
    INIT_PARENT = 20
    DEFAULT = 50
    LOW = 100


class Scope(Pytree, pytree=False):
    """What a bound bridge module draws on: its ``rngs`` and the ``mutable`` collections."""

    def __init__(self, rngs: Rngs, mutable: tp.Any) -> None:
        self.rngs = rngs
        self.mutable = mutable

    def copy(self) -> Scope:
        return Scope(self.rngs, self.mutable)


class ModuleState(State):
    """The Linen-style variables ``apply`` loads into a bridge module, as an ``nnx.State``
    (``{attribute: {...: Variable}}``); parts for submodules not created yet wait until
    ``setup`` or a ``@compact`` method attaches them."""


class _HasSetup(tp.Protocol):
    def setup(self) -> None: ...


def has_setup(x: tp.Any) -> tp.TypeGuard[_HasSetup]:
    """Whether ``x`` has a ``setup`` method (bridge modules with one run it when bound).

    >>> class WithSetup:
    ...     def setup(self): ...
    >>> has_setup(WithSetup()), has_setup(object())
    (True, False)
    """
    return hasattr(x, "setup")


# state kept beside the modules (not graph attributes, so split/merge never see it)
_SETUP_DONE: weakref.WeakSet = weakref.WeakSet()
_PENDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PRIORITIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def current_context() -> ModuleStackEntry | None:
    """The innermost running bridge module's stack entry (None outside any)."""
    return MODULE_CONTEXT.module_stack[-1]


def current_module() -> Module | None:
    """The innermost running bridge module (None outside any)."""
    ctx = current_context()
    return None if ctx is None else ctx.module


def _maybe_call_setup(module: tp.Any) -> None:
    if not isinstance(module, Module) or module in _SETUP_DONE:
        return
    setup = getattr(type(module), "setup", None)
    if setup is None:
        return
    _SETUP_DONE.add(module)
    MODULE_CONTEXT.module_stack.append(ModuleStackEntry(module, in_compact=False))
    try:
        setup(module)
    finally:
        MODULE_CONTEXT.module_stack.pop()
    # submodules a transform wrote back (not through setattr on this object) take their
    # waiting variables now
    pending = _PENDING.get(module)
    if pending:
        for name in list(pending):
            value = module.__dict__.get(name)
            if isinstance(value, GraphNode):
                _bind(module, value, name)


def _load(module: GraphNode, state: tp.Mapping) -> None:
    """Puts ``state`` (nested dicts of Variables) into ``module``: existing Variables take the
    values, missing leaves become attributes, sub-states of submodules not created yet wait
    until the submodule is attached."""
    for key, value in state.items():
        current = module.__dict__.get(key)
        if isinstance(value, Variable):
            if isinstance(current, Variable):
                current.copy_from(value)
            else:
                setattr(module, key, value)
        elif isinstance(value, tp.Mapping):
            if isinstance(current, GraphNode):
                _load(current, value)
            elif isinstance(current, (list, tuple)):
                for k, sub in value.items():
                    idx = int(k) if isinstance(k, str) and k.isdigit() else k
                    if isinstance(idx, int) and idx < len(current) \
                            and isinstance(current[idx], GraphNode):
                        _load(current[idx], sub)
            else:
                pending = _PENDING.setdefault(module, {})
                pending[key] = _merge(pending.get(key), value)


def _merge(old: tp.Any, new: tp.Any) -> tp.Any:
    if isinstance(old, dict) and isinstance(new, tp.Mapping):
        out = dict(old)
        for k, v in new.items():
            out[k] = _merge(out.get(k), v)
        return out
    return dict(new) if isinstance(new, tp.Mapping) else new


def _bind(parent: Module, value: tp.Any, name: str) -> None:
    """Gives the modules in ``value`` (just assigned to ``parent.<name>``) the parent's scope,
    any variables waiting for them, and runs their setup."""
    pending = _PENDING.get(parent, {}).pop(name, None)
    if isinstance(value, GraphNode) and pending:
        if hasattr(value, "to_nnx__module"):  # a ToNNX keeps its variables as attributes
            for key, sub in pending.items():
                setattr(value, key, sub)
        else:
            _load(value, pending)
    modules = [leaf for leaf in jax.tree_util.tree_leaves(
        value, is_leaf=lambda x: isinstance(x, GraphNode)) if isinstance(leaf, Module)]
    scope = parent.scope
    if scope is None:  # only bound parents bind what is assigned to them
        return
    for m in modules:
        for _, sub in reversed(list(graphlib.iter_graph(m))):
            if isinstance(sub, Module) and sub.__dict__.get("scope") is None:
                sub.scope = scope.copy()
        for _, sub in reversed(list(graphlib.iter_graph(m))):
            _maybe_call_setup(sub)


class ModuleMeta(nnx_module.ModuleMeta):
    """The bridge Module's metaclass: Linen-style construction, which auto-names and attaches
    submodules made inside a ``@compact`` method (or given ``name=``) to the running module."""

    def __call__(cls, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        ctx = MODULE_CONTEXT.module_stack[-1]
        parent = None
        name = None
        if ctx is not None:
            if "parent" in kwargs:
                parent = kwargs.pop("parent")
                if ctx.in_compact and parent is not None:
                    raise ValueError(
                        f"'parent' can only be set to None inside a compact method, got "
                        f"{type(parent).__name__}; leave it out to attach the submodule to "
                        "the running module.")
            else:
                parent = ctx.module
            if "name" in kwargs:
                name = kwargs["name"]
                if "name" not in _field_names(cls):
                    kwargs.pop("name")
                if not isinstance(name, str):
                    raise ValueError(f"'name' must be a 'str', got {type(name).__name__}")
            elif ctx.in_compact:
                index = ctx.type_counter[cls]
                ctx.type_counter[cls] += 1
                name = f"{cls.__name__}_{index}"
        else:
            kwargs.pop("parent", None)
            if "name" in kwargs and "name" not in _field_names(cls):
                kwargs.pop("name")
        module = super().__call__(*args, **kwargs)
        if parent is not None and name is not None and parent.scope is not None:
            setattr(parent, name, module)
            parent.set_attr_priority(name, AttrPriority.INIT_PARENT)
        return module


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


class ModuleBase:
    """The part of the bridge Module's interface typing tools see: its ``scope`` (a
    :class:`Scope` while bound by ``init``/``apply``, else ``None``)."""

    if tp.TYPE_CHECKING:
        scope: Scope | None


_NO_PYTREE: dict[str, bool] = (
    {"pytree": False} if hasattr(nnx_module.Module, "_pytree__is_pytree") else {})


class Module(nnx_module.Module, ModuleBase, metaclass=ModuleMeta,  # type: ignore[misc]
             **_NO_PYTREE):
    """A Linen-style NNX module (see the module docstring)."""

    if not tp.TYPE_CHECKING:
        # the unbound default; not a dataclass field (ModuleBase declares its type)
        scope = None

    def __init_subclass__(cls, **kwargs: tp.Any) -> None:
        super().__init_subclass__(**{**_NO_PYTREE, **kwargs})
        dataclasses.dataclass(repr=False, eq=False)(cls)
        cls.__hash__ = object.__hash__  # type: ignore[method-assign]

    def __post_init__(self) -> None:
        pass  # setup runs when the module is bound (in apply, or attached to a bound parent)

    def __setattr__(self, name: str, value: tp.Any) -> None:
        bound = self.__dict__.get("scope") is not None and name != "scope"
        super().__setattr__(name, value)
        if bound:
            _bind(self, value, name)

    def set_attr_priority(self, name: str, value: AttrPriority) -> None:
        """Records which attribute is the submodule's own name when several refer to it."""
        _PRIORITIES.setdefault(self, {})[name] = value

    # -- variables -----------------------------------------------------------------------------

    def make_rng(self, name: str = "default") -> jax.Array:
        """A fresh key from the bound ``Rngs`` stream ``name`` (falling back to ``default``)."""
        scope = self.__dict__.get("scope")
        if scope is None:
            raise ValueError(
                f"Can't use RNGs on an unbound {type(self).__name__}: call it through "
                "init/apply (or from a bound parent).")
        return scope.rngs[name]()

    def _existing(self, name: str, init_fn: tp.Callable[..., tp.Any], make_abs: tp.Callable,
                  what: type | None) -> tp.Any:
        value = self.__dict__.get(name)
        if isinstance(value, Variable):
            if what is not None and not isinstance(value, what):
                raise ValueError(
                    f"Expected '{name}' of {type(self).__name__} to be a {what.__name__}, got "
                    f"a {type(value).__name__}; use another name for one of them.")
            return value
        return None

    def param(self, name: str, init_fn: tp.Callable[..., A], *init_args: tp.Any,
              unbox: bool = True, **init_kwargs: tp.Any) -> tp.Any:
        """The ``Param`` called ``name``: the stored one, else ``init_fn(key, *init_args)``."""
        if self.__dict__.get("scope") is None:
            raise ValueError(
                "Parameters must be initialized in `setup()` or in a method wrapped in "
                f"`@compact` of a bound module ({type(self).__name__} is unbound).")
        existing = self.__dict__.get(name)
        if isinstance(existing, Variable):
            if not isinstance(existing, Param):
                raise ValueError(
                    f"Expected '{name}' of {type(self).__name__} to be a Param, got a "
                    f"{type(existing).__name__}; use another name for one of them.")
            self._check_shape(name, existing, lambda: init_fn(jax.random.key(0), *init_args,
                                                              **init_kwargs))
            return existing
        value = init_fn(self.make_rng("params"), *init_args, **init_kwargs)
        variable = Param(value)
        setattr(self, name, variable)
        return variable

    def variable(self, col: str, name: str, init_fn: tp.Callable[..., A] | None = None,
                 *init_args: tp.Any, unbox: bool = True, **init_kwargs: tp.Any) -> tp.Any:
        """The Variable ``name`` of collection ``col``: stored, else ``init_fn(*init_args)``."""
        vtype = variable_type_from_name(col, allow_register=True)
        if self.__dict__.get("scope") is None:
            raise ValueError(
                "Variables must be initialized in `setup()` or in a method wrapped in "
                f"`@compact` of a bound module ({type(self).__name__} is unbound).")
        existing = self.__dict__.get(name)
        if isinstance(existing, Variable):
            return existing
        if init_fn is None:
            raise ValueError(f"variable {col}/{name}: expected 'init_fn' to be a callable, "
                             "got None (it is needed the first time).")
        variable = vtype(init_fn(*init_args, **init_kwargs))
        setattr(self, name, variable)
        return variable

    def _check_shape(self, name: str, variable: Variable, make: tp.Callable) -> None:
        try:
            abstract = jax.eval_shape(make)
        except Exception:  # noqa: BLE001 - the initializer needs more than a key: no check
            return
        if isinstance(abstract, VariableMetadata):
            abstract = abstract.raw_value
        if isinstance(abstract, meta.AxisMetadata):
            abstract = abstract.unbox()
        stored = bv._var_value(variable)
        for got, want in zip(jax.tree_util.tree_leaves(stored),
                             jax.tree_util.tree_leaves(abstract)):
            if np.shape(got) != tuple(want.shape):
                raise errors.ScopeParamShapeError(name, type(self).__name__,
                                                  tuple(want.shape), np.shape(got))

    def _get_variables(self) -> dict:
        out: dict[str, dict] = {}
        for path, var in _variables_by_priority(self):
            if isinstance(var, RngState):
                continue
            col = variable_name_from_type(type(var), allow_register=True)
            leaf = bv._var_value(var) if bv.is_vanilla_variable(var) else bv.to_linen_var(var)
            node = out.setdefault(col, {})
            for k in path[:-1]:
                node = node.setdefault(k if isinstance(k, str) else str(k), {})
            node[path[-1] if isinstance(path[-1], str) else str(path[-1])] = leaf
        return out

    @property
    def variables(self) -> FrozenDict:
        """The module's variables, Linen-style ``{collection: {path: value}}``."""
        return FrozenDict(self._get_variables())

    def is_initializing(self) -> bool:
        stack = MODULE_CONTEXT.initializing
        return bool(stack and stack[-1])

    # -- init / apply --------------------------------------------------------------------------

    def apply(self, variables: tp.Mapping[str, tp.Mapping], *args: tp.Any, rngs: tp.Any = None,
              method: tp.Callable[..., tp.Any] | str = "__call__", mutable: tp.Any = False,
              _initialize: bool = False, **kwargs: tp.Any) -> tp.Any:
        """Calls ``method`` on a copy bound to ``variables`` (see the module docstring)."""
        module = graphlib.clone(self)
        merged: dict = {}
        for col, tree in variables.items():
            converted = jax.tree_util.tree_map(
                lambda leaf, col=col: bv.to_nnx_var(col, leaf), dict(tree),
                is_leaf=lambda x: isinstance(x, meta.AxisMetadata))
            merged = _merge(merged, converted)
        _load(module, merged)  # plain dicts: ToNNX keeps each collection part as a dict attribute
        rngs = _as_rngs(rngs)
        fn = _resolve_method(module, method)
        MODULE_CONTEXT.initializing.append(_initialize)
        try:
            for _, node in graphlib.iter_graph(module):
                if isinstance(node, Module):
                    node.scope = Scope(rngs, mutable)
            for _, node in reversed(list(graphlib.iter_graph(module))):
                _maybe_call_setup(node)
            MODULE_CONTEXT.module_stack.append(ModuleStackEntry(module, in_compact=False))
            try:
                out = fn(module, *args, **kwargs)
            finally:
                MODULE_CONTEXT.module_stack.pop()
        finally:
            MODULE_CONTEXT.initializing.pop()
            for _, node in list(graphlib.iter_graph(module)):
                if isinstance(node, Module) and node.__dict__.get("scope") is not None:
                    node.scope = None
        if mutable is False:
            return out
        return out, module._get_variables()

    def init(self, rngs: tp.Any = None, *args: tp.Any,  # type: ignore[override]
             method: tp.Callable[..., tp.Any] | str = "__call__", **kwargs: tp.Any) -> dict:
        """The variables made by calling ``method`` once with initialization on."""
        _, variables = self.apply({}, *args, rngs=rngs, method=method, mutable=True,
                                  _initialize=True, **kwargs)
        return variables

    def init_with_output(self, rngs: tp.Any = None, *args: tp.Any,
                         method: tp.Callable[..., tp.Any] | str = "__call__",
                         mutable: tp.Any = False, **kwargs: tp.Any) -> tuple[tp.Any, dict]:
        """``(output, variables)`` of :meth:`init`."""
        return self.apply({}, *args, rngs=rngs, method=method, mutable=True, _initialize=True,
                          **kwargs)


def _variables_by_priority(root: Module) -> list[tuple[tuple, Variable]]:
    """``(path, Variable)`` once per Variable, first path first, where a module's attributes
    are visited in :class:`AttrPriority` order (then by name): a submodule reachable under
    several names is listed under its own name. ``scope`` is skipped."""
    seen: set[int] = set()
    found: list[tuple[tuple, Variable]] = []

    def visit(x: tp.Any, path: tuple) -> None:
        if isinstance(x, Variable):
            if id(x) not in seen:
                seen.add(id(x))
                found.append((path, x))
            return
        if isinstance(x, GraphNode):
            if id(x) in seen:
                return
            seen.add(id(x))
            attrs = {k: v for k, v in vars(x).items() if k != "scope" or not isinstance(x, Module)}
            prio = _PRIORITIES.get(x, {}) if isinstance(x, Module) else {}
            for k in sorted(attrs, key=lambda k: (prio.get(k, AttrPriority.DEFAULT), str(k))):
                visit(attrs[k], (*path, k))
        elif isinstance(x, tp.Mapping):
            for k in sorted(x, key=str):
                visit(x[k], (*path, k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                visit(v, (*path, i))

    visit(root, ())
    return found


def _as_rngs(rngs: tp.Any) -> Rngs:
    if rngs is None:
        return Rngs()
    if isinstance(rngs, Rngs):
        return rngs
    if isinstance(rngs, tp.Mapping):
        return Rngs(**rngs)
    return Rngs(rngs)


def _resolve_method(module: Module, method: tp.Any) -> tp.Callable[..., tp.Any]:
    if isinstance(method, str):
        name = method
        attr = getattr(module, name, None)
        if isinstance(attr, Module):
            return lambda m, *a, **k: getattr(m, name)(*a, **k)
        if not callable(attr):
            raise TypeError(f"'{type(module).__name__}.{name}' must be a callable, got "
                            f"{type(attr).__name__}.")
        method = attr
    if inspect.ismethod(method) and isinstance(method.__self__, Module):
        method = method.__func__
    if not callable(method) or len(inspect.signature(method).parameters) < 1:
        raise errors.ApplyModuleInvalidMethodError(method)
    return method


def compact(f: F) -> F:
    """Marks a method whose submodules and variables are defined inline (Linen's compact)."""

    @functools.wraps(f)
    def compact_wrapper(self: tp.Any, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        if not isinstance(self, Module):
            raise ValueError(
                f"Expected 'self' to be a nnx.bridge.Module, got {type(self).__name__}")
        MODULE_CONTEXT.module_stack.append(ModuleStackEntry(self, in_compact=True))
        try:
            return f(self, *args, **kwargs)
        finally:
            MODULE_CONTEXT.module_stack.pop()

    return compact_wrapper  # type: ignore[return-value]


__all__ = ["MODULE_CONTEXT", "AttrPriority", "Module", "ModuleBase", "ModuleContext", "ModuleMeta",
           "ModuleStackEntry", "ModuleState", "Scope", "compact", "current_context",
           "current_module", "has_setup"]
