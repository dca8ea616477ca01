"""The ``Module`` class: the public face of Linen, a thin view of a core Scope.

A Module is a dataclass of hyperparameters. Bound to a Scope (by ``init``/``apply``/
``bind``, or by being built inside a bound parent) it reads and creates variables there.
The machinery lives in the sibling files: ``_dataclass`` (the class transform),
``_naming`` (names, submodule registration, lazy setup), ``_interception`` (method
wrapping and hooks) and ``_binding`` (clone, bind, init/apply).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any, Optional, TypeVar, Union, cast

import jax
import jax.numpy as jnp

from flaxen import errors, traceback_util
from flaxen.core.frozen_dict import FrozenDict
from flaxen.core.scope import Scope, Variable, static_key
from flaxen.linen import _binding, _dataclass
from flaxen.linen._naming import bind_new_module, register_submodules, try_setup
from flaxen.linen._state import SETUP_DONE, ModuleBase, _Sentinel, _unspecified_parent

M = TypeVar("M", bound="Module")
T = TypeVar("T")

_INIT_MUTABLE = _binding.INIT_MUTABLE
_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


def _sow_init() -> tuple:
    return ()


def _sow_append(xs: tuple, x: Any) -> tuple:
    return (*xs, x)


def _unbound(what: str) -> ValueError:
    return ValueError(
        f"Can't {what} on an unbound module: it has no variables. Run it through "
        "module.init(...)/module.apply(...), or bind it with module.bind(variables)."
    )


class Module(ModuleBase):
    """Base class of every neural-network Module.

    Subclasses are dataclasses: annotated attributes are hyperparameters, set at
    construction. Define submodules and variables in ``setup()`` or inline in the one
    method decorated with :func:`compact`, then run the Module with :meth:`init` and
    :meth:`apply`.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Affine(nn.Module):
    ...     features: int
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         w = self.param('w', nn.initializers.lecun_normal(),
    ...                        (x.shape[-1], self.features))
    ...         b = self.param('b', nn.initializers.zeros_init(), (self.features,))
    ...         return x @ w + b
    >>> model = Affine(features=3)
    >>> variables = model.init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
    >>> model.apply(variables, jnp.ones((1, 2))).shape
    (1, 3)
    """

    parent: Module | Scope | _Sentinel | None = _dataclass.dataclasses.field(
        default=_unspecified_parent, repr=False, kw_only=True)
    name: str | None = _dataclass.dataclasses.field(default=None, kw_only=True)
    # Instance attribute (not a field): the Scope this Module is bound to, or None.

    # -- class creation -------------------------------------------------------------

    def __init_subclass__(cls, kw_only: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _dataclass.transform_subclass(cls, kw_only, _BASE_NAMES)

    def __post_init__(self) -> None:
        bind_new_module(self)

    def _flaxen_static_key(self, depth: int = 0) -> tuple:
        """The class and field values (not parent/name): what an initializer closing over
        this Module can depend on. Keys the param shape-check cache (``core.scope``)."""
        d = self.__dict__
        return (type(self), tuple(static_key(d.get(f), depth) for f in type(self)._flaxen_fields))

    # -- attributes -----------------------------------------------------------------

    def __setattr__(self, name: str, val: Any) -> None:
        d = self.__dict__
        st = d.get("_state")
        if st is None or (not st.in_setup and d.get("scope") is None):
            object.__setattr__(self, name, val)
            return
        if not st.in_setup:
            raise errors.SetAttributeFrozenModuleError(type(self).__name__, name, val)
        field = type(self).__dataclass_fields__.get(name)
        if field is not None and field.init:
            raise errors.SetAttributeInModuleSetupError()
        object.__setattr__(self, name, register_submodules(self, name, val))

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: maybe setup() defines it.
        d = self.__dict__
        st = d.get("_state")
        if (st is not None and not name.startswith("__") and d.get("scope") is not None
                and st.setup_called != SETUP_DONE and not st.in_setup):
            try_setup(self)
            if name in d:
                return d[name]
        if not name.startswith("__"):
            for klass in type(self).__mro__:
                if name in klass.__dict__:  # a class descriptor whose __get__ failed
                    raise errors.DescriptorAttributeError()
        raise AttributeError(
            f'"{type(self).__name__}" object has no attribute "{name}". If "{name}" is '
            "defined in '.setup()', remember these fields are only accessible from "
            "inside 'init' or 'apply'."
        )

    def __repr__(self) -> str:
        return _module_repr(self)

    def __dir__(self) -> list[str]:
        # Attributes defined in setup() are listed too (setup runs on a bound Module).
        d = self.__dict__
        st = d.get("_state")
        if st is not None and d.get("scope") is not None and st.setup_called != SETUP_DONE:
            try_setup(self)
        return list(object.__dir__(self))

    # -- setup ----------------------------------------------------------------------

    def setup(self) -> None:
        """Defines submodules and variables lazily, once, when the Module is bound.

        Override it (instead of ``__init__``) to assign submodules and variables to
        ``self``. It runs right before the first method call or setup-attribute access of
        a bound Module.
        """

    # -- cloning and binding --------------------------------------------------------

    def clone(self: M, *, parent: Any = None, _deep_clone: Any = False,
              _reset_names: bool = False, **updates: Any) -> M:
        """A copy of this Module with optionally updated fields, attached to ``parent``.

        >>> import flaxen.linen as nn
        >>> class Foo(nn.Module):
        ...     n: int = 1
        >>> Foo(n=1).clone(n=2).n
        2
        """
        return _binding.clone(self, parent, _deep_clone, _reset_names, updates)

    def copy(self: M, *, parent: Any = _unspecified_parent, name: str | None = None,
             **updates: Any) -> M:
        """A copy attached to the running Module (by default), auto-named unless ``name``."""
        return _binding.clone(self, parent, True, False, {"name": name, **updates})

    @traceback_util.api_boundary
    def bind(self: M, variables: Mapping[str, Mapping[str, Any]], *args: Any,
             rngs: Any = None, mutable: Any = False) -> M:
        """A copy of this Module bound to ``variables`` (and ``rngs``), for interactive use.

        >>> import jax, jax.numpy as jnp
        >>> import flaxen.linen as nn
        >>> class Foo(nn.Module):
        ...     def setup(self):
        ...         self.scale = self.param('scale', nn.initializers.ones, ())
        ...     def __call__(self, x):
        ...         return x * self.scale
        >>> variables = Foo().init(jax.random.PRNGKey(0), 1.0)
        >>> float(Foo().bind(variables).scale)
        1.0
        """
        return _binding.bind(self, variables, rngs=rngs, mutable=mutable)

    def unbind(self: M) -> tuple[M, Any]:
        """``(unbound_copy, variables)`` of a bound Module, e.g. a setup-defined submodule."""
        return _binding.unbind(self)

    # -- init / apply ---------------------------------------------------------------

    @traceback_util.api_boundary
    def init_with_output(self, rngs: Any, *args: Any, method: Any = None,
                         mutable: Any = _INIT_MUTABLE, capture_intermediates: Any = False,
                         **kwargs: Any) -> tuple[Any, Any]:
        """Like :meth:`init` but returns ``(output, variables)``."""
        _binding.check_instance(self)
        _binding.check_rngs(self, rngs)
        fn = _binding.resolve_method(self, method)
        return _binding.init_with_output(fn, self, mutable, capture_intermediates)(
            rngs, *args, **kwargs)

    @traceback_util.api_boundary
    def init(self, rngs: Any, *args: Any, method: Any = None, mutable: Any = _INIT_MUTABLE,
             capture_intermediates: Any = False, **kwargs: Any) -> Any:
        """Initializes the variables by running ``method`` (default ``__call__``).

        ``rngs`` is a PRNG key (seeding the ``'params'`` stream) or a dict of named keys.
        Every collection except ``'intermediates'`` is mutable by default.

        >>> import jax, jax.numpy as jnp
        >>> import flaxen.linen as nn
        >>> class Bias(nn.Module):
        ...     @nn.compact
        ...     def __call__(self, x):
        ...         return x + self.param('b', nn.initializers.zeros_init(), x.shape[-1:])
        >>> variables = Bias().init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
        >>> variables['params']['b'].shape
        (3,)
        """
        _binding.check_instance(self)
        _binding.check_rngs(self, rngs)
        fn = _binding.resolve_method(self, method)
        return _binding.init_with_output(fn, self, mutable, capture_intermediates)(
            rngs, *args, **kwargs)[1]

    @traceback_util.api_boundary
    def lazy_init(self, rngs: Any, *args: Any, method: Any = None,
                  mutable: Any = _INIT_MUTABLE, **kwargs: Any) -> Any:
        """Initializes from input shapes only (``jax.ShapeDtypeStruct`` inputs allowed)."""
        _binding.check_instance(self)
        _binding.check_rngs(self, rngs)
        fn = _binding.resolve_method(self, method)
        return _binding.lazy_init(fn, self, mutable)(rngs, *args, **kwargs)

    @traceback_util.api_boundary
    def apply(self, variables: Mapping[str, Mapping[str, Any]], *args: Any, rngs: Any = None,
              method: Any = None, mutable: Any = False, capture_intermediates: Any = False,
              **kwargs: Any) -> Any:
        """Runs ``method`` (default ``__call__``) with ``variables`` bound.

        Returns the output, or ``(output, mutated_collections)`` when any collection is
        mutable. ``method`` may be a function, an (un)bound method, a method name or any
        ``fn(module, *args)``.
        """
        _binding.check_instance(self)
        _binding.check_rngs(self, rngs)
        fn = _binding.resolve_method(self, method)
        return _binding.apply(fn, self, mutable, capture_intermediates)(
            variables, *args, rngs=rngs, **kwargs)

    # -- variables ------------------------------------------------------------------

    @property
    def variables(self) -> Any:
        """The variables of this Module (all collections), as seen from its scope."""
        scope = self.scope
        if scope is None:
            raise ValueError("Can't access variables on unbound modules")
        return scope.variables()

    def param(self, name: str, init_fn: Callable[..., T], *init_args: Any,
              unbox: bool = True, **init_kwargs: Any) -> T:
        """The parameter ``name`` of collection ``'params'``, created if missing.

        ``init_fn(key, *init_args, **init_kwargs)`` gets a key of the ``'params'`` stream
        and runs only when the parameter does not exist yet; an existing one is checked
        against the shape ``init_fn`` would give (``ScopeParamShapeError``).
        """
        scope = self.scope
        if scope is None:
            raise _unbound("create or read params")
        st = self._state
        if not (st.in_compact or st.in_setup):
            raise ValueError(
                "Parameters must be initialized in `setup()` or in a method wrapped in "
                f"`@compact` (param {name!r} of {type(self).__name__})."
            )
        try:
            return scope.param(name, init_fn, *init_args, unbox=unbox, **init_kwargs)
        except errors.NameInUseError as e:
            if type(e) is errors.NameInUseError:
                raise
            raise errors.NameInUseError("param", name, type(self).__name__) from None

    def variable(self, col: str, name: str, init_fn: Callable[..., T] | None = None,
                 *init_args: Any, unbox: bool = True, **init_kwargs: Any) -> Variable[T]:
        """The variable ``col/name`` (read/write via ``.value``), created if missing.

        ``init_fn(*init_args)`` gets no RNG key; pass one explicitly if needed.
        """
        scope = self.scope
        if scope is None:
            raise _unbound("create or read variables")
        st = self._state
        if not (st.in_compact or st.in_setup):
            raise ValueError(
                "Variables must be initialized in `setup()` or in a method wrapped in "
                f"`@compact` (variable {col}/{name} of {type(self).__name__})."
            )
        try:
            v = scope.variable(col, name, init_fn, *init_args, unbox=unbox, **init_kwargs)
        except errors.NameInUseError as e:
            if type(e) is errors.NameInUseError:
                raise
            raise errors.NameInUseError("variable", name, type(self).__name__) from None
        st.children[name] = col
        return v

    def has_variable(self, col: str, name: str) -> bool:
        """Whether variable ``col/name`` exists in this Module."""
        scope = self.scope
        if scope is None:
            raise _unbound("check variables")
        return scope.has_variable(col, name)

    def get_variable(self, col: str, name: str, default: T | None = None) -> T:
        """The value of variable ``col/name``, or ``default`` when it does not exist."""
        scope = self.scope
        if scope is None:
            raise _unbound("read variables")
        return scope.get_variable(col, name, default)

    def put_variable(self, col: str, name: str, value: Any) -> None:
        """Sets variable ``col/name`` (its collection must be mutable)."""
        scope = self.scope
        if scope is None:
            raise _unbound("write variables")
        scope.put_variable(col, name, value)

    def is_mutable_collection(self, col: str) -> bool:
        """Whether collection ``col`` may be written in this run."""
        scope = self.scope
        if scope is None:
            raise _unbound("check collections")
        return scope.is_mutable_collection(col)

    def is_initializing(self) -> bool:
        """True inside ``init`` / ``nn.init`` (not inside ``apply``)."""
        scope = self.scope
        if scope is None:
            raise _unbound("check is_initializing()")
        return bool(scope.get_flag("initializing", False))

    def make_rng(self, name: str = "params") -> Any:
        """A new PRNG key from stream ``name``: unique per call, reproducible per run.

        A stream that was not given falls back to ``'params'`` (as Flax 0.12); with
        neither, :class:`~flaxen.errors.InvalidRngError`.
        """
        scope = self.scope
        if scope is None:
            raise _unbound("make RNGs with make_rng()")
        return scope.make_rng(name)

    def has_rng(self, name: str) -> bool:
        """Whether PRNG stream ``name`` was given to init/apply/bind."""
        scope = self.scope
        if scope is None:
            raise _unbound("check RNGs")
        return scope.has_rng(name)

    def sow(self, col: str, name: str, value: Any,
            reduce_fn: Callable[[Any, Any], Any] = _sow_append,
            init_fn: Callable[[], Any] = _sow_init) -> bool:
        """Stores ``value`` in collection ``col`` (appending to a tuple by default).

        A no-op returning False when ``col`` is not mutable; True when stored. With custom
        ``init_fn``/``reduce_fn`` the stored value is ``reduce_fn(init_fn(), value)`` first,
        then ``reduce_fn(previous, value)``.

        >>> import jax, jax.numpy as jnp
        >>> import flaxen.linen as nn
        >>> class Foo(nn.Module):
        ...     @nn.compact
        ...     def __call__(self, x):
        ...         self.sow('intermediates', 'h', x)
        ...         return x
        >>> _, state = Foo().apply({}, 1.0, mutable=['intermediates'])
        >>> state['intermediates']['h']
        (1.0,)
        """
        scope = self.scope
        if scope is None:
            raise _unbound("sow()")
        if not scope.is_mutable_collection(col):
            return False
        if scope.has_variable(col, name):
            xs = scope.get_variable(col, name)
        else:
            try:
                scope.reserve(name, col)
            except errors.NameInUseError:
                raise errors.NameInUseError("variable", name, type(self).__name__) from None
            self._state.children[name] = col
            xs = init_fn()
        scope.put_variable(col, name, reduce_fn(xs, value))
        return True

    def perturb(self, name: str, value: T, collection: str = "perturbations") -> T:
        """Adds a zero-valued variable to ``value`` so gradients w.r.t. it can be taken.

        ``init`` creates the zeros; in ``apply`` it is the identity unless the collection is
        passed in, in which case the stored perturbation is added.
        """
        scope = self.scope
        if scope is None:
            raise _unbound("perturb()")
        if scope.is_mutable_collection(collection) and not scope.has_variable(collection, name):
            try:
                scope.reserve(name, collection)
            except errors.NameInUseError:
                raise errors.NameInUseError("variable", name, type(self).__name__) from None
            self._state.children[name] = collection
            scope.put_variable(collection, name, jax.tree_util.tree_map(jnp.zeros_like, value))
        if collection in scope._store.variables:
            if not scope.has_variable(collection, name):
                raise ValueError(
                    f"Perturbation collection {collection!r} present, but missing perturbation "
                    f"variable {name!r} in {scope.path_text}. Pass the whole collection made "
                    f"by init (variables[{collection!r}]), or leave it out to disable "
                    "perturbations."
                )
            value = jax.tree_util.tree_map(
                jnp.add, value, scope.get_variable(collection, name))
        return value

    # -- inspection -----------------------------------------------------------------

    @property
    def path(self) -> tuple[str, ...]:
        """The path of this Module from the root, e.g. ``('Block_0', 'Dense_1')``."""
        scope = self.scope
        if scope is None:
            raise ValueError("Can't access module paths on unbound modules.")
        return scope.path

    def tabulate(self, rngs: Any, *args: Any, depth: int | None = None,
                 show_repeated: bool = False, mutable: Any = _INIT_MUTABLE,
                 console_kwargs: Mapping[str, Any] | None = None,
                 table_kwargs: Mapping[str, Any] = _EMPTY,
                 column_kwargs: Mapping[str, Any] = _EMPTY,
                 compute_flops: bool = False, compute_vjp_flops: bool = False,
                 **kwargs: Any) -> str:
        """A table of the submodules, their inputs, outputs and variables (see nn.tabulate)."""
        from flaxen.linen.summary import tabulate

        return tabulate(
            self, rngs, depth=depth, show_repeated=show_repeated, mutable=mutable,
            console_kwargs=console_kwargs, table_kwargs=table_kwargs,
            column_kwargs=column_kwargs, compute_flops=compute_flops,
            compute_vjp_flops=compute_vjp_flops, **kwargs)(*args)

    def module_paths(self, rngs: Any, *args: Any, show_repeated: bool = False,
                     mutable: Any = _INIT_MUTABLE, **kwargs: Any) -> dict[str, Module]:
        """``{path: module}`` of every Module called while initializing (root is ``''``)."""
        from flaxen.linen.summary import module_paths

        return module_paths(self, rngs, *args, show_repeated=show_repeated,
                            mutable=mutable, **kwargs)


# Names of Module's own API: subclass methods with these names are not wrapped.
_BASE_NAMES = frozenset(
    {n for n in vars(Module) if n not in ("__call__", "setup")} | {"scope"})
_dataclass._module_post_init[0] = Module.__post_init__
_dataclass._default_setup[0] = Module.setup
# typing.Union/Optional rather than ``|``: the reprs in signatures and fields are Flax's.
_dataclass._reserved_types.update(
    parent=Union[Module, Scope, _Sentinel, None],  # noqa: UP007
    name=Optional[str],  # noqa: UP045
)
_dataclass.make_dataclass(Module)
Module._flaxen_setup = None
# Unbound until init/apply/bind puts a Scope in the instance's __dict__; as a class attribute
# (not a field) ``Module.scope`` and ``hasattr(cls, 'scope')`` work as under Flax.
setattr(Module, "scope", None)  # noqa: B010 - keeps type checkers on __getattr__'s Any


def share_scope(module: Module, other: Module, /) -> None:
    """Makes two bound Modules read and write variables in the same scope.

    If ``other`` is a direct child of ``module``, ``other`` moves into ``module``'s scope;
    otherwise ``module`` moves into ``other``'s. Typically called in ``setup`` of a wrapper
    so the wrapped Module's variables keep their place in the tree.
    """
    if module.scope is None or other.scope is None:
        raise errors.CallShareScopeOnUnboundModuleError()
    if other.scope.parent is module.scope:
        other.__dict__["scope"] = module.scope
    else:
        module.__dict__["scope"] = other.scope


def merge_param(name: str, a: T | None, b: T | None) -> T:
    """Returns whichever of ``a`` (attribute) and ``b`` (call argument) is set.

    >>> merge_param('deterministic', None, True)
    True
    """
    if a is None and b is None:
        raise ValueError(
            f'Parameter "{name}" must be passed to the constructor or at call time.')
    if a is not None and b is not None:
        raise ValueError(
            f'Parameter "{name}" was passed to the constructor and at call time. Should be '
            "passed just once.")
    return cast(T, a if b is None else b)


def compact(fun: Callable[..., T]) -> Callable[..., T]:
    """Marks the one method of a Module that may define submodules and variables inline.

    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         return nn.Dense(2)(x) if False else x
    >>> Foo.__call__.compact
    True
    """
    fun.__dict__["compact"] = True
    return fun


def compact_name_scope(fun: Callable[..., T]) -> Callable[..., T]:
    """Runs a method like ``@compact`` code inside its own sub-scope named after it.

    Submodules and variables created in the method live under ``<method name>/`` (with
    their own auto-name counters), so several such methods can each create ``Dense_0``.
    Works whether or not the caller is ``@compact``, and as ``apply(..., method=name)``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     @nn.compact_name_scope
    ...     def up(self, x):
    ...         return nn.Dense(2)(x)
    ...     def __call__(self, x):
    ...         return self.up(x)
    >>> params = Foo().init(jax.random.key(0), jnp.ones((1, 2)))['params']
    >>> list(params['up'])
    ['Dense_0']
    """
    name = fun.__name__

    def scoped(self: Any, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        outer = d.get("scope")
        if outer is None:
            raise errors.CallCompactUnboundModuleError()
        st = d["_state"]
        saved = (st.in_compact, st.compact_done, st.autoname_cursor)
        d["scope"] = outer.push(name, reuse=True)
        st.in_compact, st.compact_done, st.autoname_cursor = True, False, None
        try:
            return fun(self, *args, **kwargs)
        finally:
            d["scope"] = outer
            st.in_compact, st.compact_done, st.autoname_cursor = saved

    functools.update_wrapper(scoped, fun)
    scoped.__dict__["compact_name_scope"] = True
    return scoped


def nowrap(fun: Callable[..., T]) -> Callable[..., T]:
    """Marks a Module method that must not be wrapped (no setup, no module stack).

    For helpers callable on unbound Modules or that override Module plumbing.
    """
    fun.__dict__["nowrap"] = True
    return fun


def _field_repr(value: Any, indent: str) -> str:
    if isinstance(value, Module):
        return _module_repr(value, indent)
    if isinstance(value, type) or callable(value) and hasattr(value, "__name__"):
        return getattr(value, "__name__", repr(value))
    text = repr(value)
    return text.replace("\n", "\n" + indent)


def _module_repr(module: Module, indent: str = "") -> str:
    cls = type(module)
    inner = indent + "    "
    lines = []
    names = cls._flaxen_fields
    d = module.__dict__
    if names:
        lines.append(f"{inner}# attributes")
        for n in names:
            lines.append(f"{inner}{n} = {_field_repr(d.get(n), inner)}")
    st = d.get("_state")
    children = {k: v for k, v in (st.children.items() if st else ()) if isinstance(v, Module)}
    if children:
        lines.append(f"{inner}# children")
        for k, v in children.items():
            lines.append(f"{inner}{k} = {_module_repr(v, inner)}")
    if not lines:
        return f"{cls.__name__}()"
    return f"{cls.__name__}(\n" + "\n".join(lines) + f"\n{indent})"


# --- small helpers kept under Flax's private names (its tests call them) ------------------


def _freeze_attr(val: Any) -> Any:
    """Setup attributes as stored: lists -> tuples, dicts -> FrozenDicts, recursively.

    >>> _freeze_attr([1, [2, 3]])
    (1, (2, 3))
    """
    if isinstance(val, (dict, FrozenDict)):
        return FrozenDict({k: _freeze_attr(v) for k, v in val.items()})
    if isinstance(val, tuple) and hasattr(val, "_fields"):  # a namedtuple keeps its type
        return type(val)(*[_freeze_attr(v) for v in val])
    if isinstance(val, (list, tuple)):
        return tuple(_freeze_attr(v) for v in val)
    return val


def _get_local_method_names(cls: type, exclude: Any = ()) -> tuple[str, ...]:
    """Names of the plain methods ``cls`` itself defines (no static/class methods).

    >>> class A:
    ...     def f(self): ...
    ...     @staticmethod
    ...     def g(): ...
    >>> _get_local_method_names(A)
    ('f',)
    """
    skip = set(exclude)
    names = []
    for name, value in cls.__dict__.items():
        if name in skip or isinstance(value, (staticmethod, classmethod, type)):
            continue
        if callable(value):
            names.append(name)
    return tuple(names)


def _get_suffix_value_pairs(tree: Any) -> list[tuple[str, Any]]:
    """``(suffix, leaf)`` pairs naming the leaves of nested lists/tuples/dicts.

    >>> _get_suffix_value_pairs({'a': 1, 'b': [2, 3]})
    [('_a', 1), ('_b_0', 2), ('_b_1', 3)]
    """
    if isinstance(tree, (list, tuple)) and tree:
        items = [(f"_{i}", v) for i, v in enumerate(tree)]
    elif isinstance(tree, Mapping) and tree:
        items = [(f"_{k}", v) for k, v in tree.items()]
    else:
        return [("", tree)]
    return [(key + sub, leaf) for key, v in items for sub, leaf in _get_suffix_value_pairs(v)]


__all__ = ["Module", "compact", "compact_name_scope", "merge_param", "nowrap", "share_scope"]
