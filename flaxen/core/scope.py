"""The Scope: variables and RNG streams of one position in a model, and init/apply/bind.

A ``Scope`` is a view onto one nested path (``/Dense_0/...``) of a tree of variable
collections, plus per-stream RNG counters. ``push(name)`` makes a child scope one level
deeper; ``param``/``variable`` read a variable or create it when it is missing and its
collection is mutable. ``init(fn)`` and ``apply(fn)`` turn a function ``fn(scope, *args)``
into a pure function of (variables, rngs, inputs). RNG keys are derived exactly as Flax
derives them (see :mod:`flaxen.core._rng`), so the same key gives bit-identical parameters.
The cached shape check behind reading an existing ``param`` is in
:mod:`flaxen.core._scope_shapes` (its names are re-exported here).

>>> import jax, jax.numpy as jnp
>>> def dense(scope, x, features):
...     kernel = scope.param('kernel', jax.nn.initializers.lecun_normal(),
...                          (x.shape[-1], features))
...     return x @ kernel
>>> y, variables = init(dense)(jax.random.PRNGKey(0), jnp.ones((1, 3)), 2)
>>> variables['params']['kernel'].shape
(3, 2)
>>> apply(dense)(variables, jnp.ones((1, 3)), 2).shape
(1, 2)
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import jax

from flaxen import errors, traceback_util
from flaxen.configurations import config
from flaxen.core import meta, partial_eval, tracers  # noqa: F401  (Flax exposes both here)
from flaxen.core._filters import (
    CollectionFilter,
    DenyList,
    Filter,
    PRNGSequenceFilter,
    check_filter,
    filter_to_set,
    group_collections,
    in_filter,
    intersect_filters,
    is_filter_empty,
    subtract_filters,
    union_filters,
)
from flaxen.core._rng import (  # noqa: F401 - child_rng_token: Flax's name, kept here
    LazyRng,
    PRNGKey,
    child_rng_token,
    fold_in_static,
    is_valid_rng,
)
from flaxen.core._scope_shapes import (
    _ABSTRACT_KEY,  # noqa: F401 - the shape cache's names, kept importable from here
    _FN_KEYS,  # noqa: F401
    _SHAPE_CACHE,  # noqa: F401
    _SHAPE_CACHE_MAX,  # noqa: F401
    _abstract_key,  # noqa: F401
    _compute_init_shapes,  # noqa: F401
    _FunctionType,  # noqa: F401
    _HashedKey,  # noqa: F401
    _init_shapes,
    _leaf_shapes,
    _MethodType,  # noqa: F401
    static_key,  # noqa: F401
)
from flaxen.core.frozen_dict import FrozenDict, freeze, unfreeze

__all__ = [
    "CollectionFilter", "DenyList", "Filter", "LazyRng", "PRNGSequenceFilter", "Scope",
    "Variable", "apply", "bind", "filter_to_set", "group_collections", "in_filter", "init",
    "intersect_filters", "is_filter_empty", "lazy_init", "subtract_filters", "union_filters",
]

T = TypeVar("T")
VariableDict = Mapping[str, Mapping[str, Any]]
FrozenVariableDict = FrozenDict[str, Any]
_fold_in_static = fold_in_static
_is_valid_rng = is_valid_rng


class _DefaultSentinel:
    def __repr__(self) -> str:
        return "<no default>"


no_flag = _DefaultSentinel()


class _DuplicateNameError(errors.NameInUseError, ValueError):
    """A name reserved twice in one scope; also a ValueError, which is what Flax raises."""

    def __init__(self, key_type: str, value: str, module_name: str) -> None:
        self.key_type = key_type
        self.value = value
        self.module_name = module_name
        errors.FlaxError.__init__(
            self,
            f'Duplicate use of scope name: "{value}" in scope "{module_name}": a {key_type} '
            "with this name already exists there (child scopes share one namespace with "
            "variables; variables clash only within their collection). Use a different "
            "name, or push(name, reuse=True) to re-enter an existing child scope.",
        )


# ---------------------------------------------------------------------------------------


class _Store:
    """State shared by every scope of one bound variable tree.

    ``gen`` is bumped whenever a stored sub-dict is replaced by another object, which
    invalidates the per-scope collection caches.
    """

    __slots__ = ("variables", "gen", "mutable", "mutable_cache", "invalid")

    def __init__(self, variables: dict, mutable: CollectionFilter) -> None:
        self.variables = variables
        self.gen = 0
        self.invalid = False
        self.mutable = mutable
        self.mutable_cache: dict[str, bool] = {}


def _merge_put(target: dict, name: str, value: Any) -> bool:
    """Writes ``value`` at ``target[name]``, merging dicts into existing dicts (as Flax does).

    Returns True when an existing sub-dict was replaced, so caches must be dropped.
    """
    old = target.get(name)
    if isinstance(value, Mapping) and isinstance(old, dict):
        replaced = False
        for k, v in value.items():
            replaced |= _merge_put(old, k, v)
        return replaced
    if isinstance(value, FrozenDict):
        value = unfreeze(value)
    elif isinstance(value, dict):
        value = _copy_dicts(value)
    target[name] = value
    return isinstance(old, Mapping)


def _copy_dicts(x: Any) -> Any:
    if isinstance(x, FrozenDict):
        return unfreeze(x)
    if isinstance(x, dict):
        return {k: _copy_dicts(v) for k, v in x.items()}
    return x


class Variable(Generic[T]):
    """A handle on one variable of a scope, read and written through ``.value``.

    Writing to a variable of an immutable collection raises
    :class:`~flaxen.errors.ModifyScopeVariableError`. With ``unbox=True`` (the default)
    metadata boxes such as ``Partitioned`` are hidden: reads return the raw value and
    writes keep the box.

    >>> import jax.numpy as jnp
    >>> scope = bind({}, mutable=True)
    >>> count = scope.variable('counter', 'n', jnp.zeros, ())
    >>> count.value = count.value + 1
    >>> scope.variables()['counter']['n']
    Array(1., dtype=float32)
    """

    # __dict__ keeps instances open to new attributes, as Flax's are (users tag Variables)
    __slots__ = ("scope", "collection", "name", "unbox", "__dict__")

    def __init__(self, scope: Scope, collection: str, name: str, unbox: bool = True) -> None:
        self.scope = scope
        self.collection = collection
        self.name = name
        self.unbox = unbox

    @property
    def value(self) -> T:
        v = self.scope.get_variable(self.collection, self.name)
        return meta.unbox(v) if self.unbox else v

    @value.setter
    def value(self, value: T) -> None:
        if self.unbox:
            current = self.scope.get_variable(self.collection, self.name)
            if isinstance(current, meta.AxisMetadata):
                self.scope.put_variable(self.collection, self.name, current.replace_boxed(value))
                return
        self.scope.put_variable(self.collection, self.name, value)

    def is_mutable(self) -> bool:
        """Whether this variable's collection may be written in its scope."""
        return self.scope.is_mutable_collection(self.collection)

    def __repr__(self) -> str:
        return (f"Variable(collection={self.collection!r}, name={self.name!r}, "
                f"path={self.scope.path_text!r})")


class Scope:
    """Variables and RNG streams at one path of a model; see the module docstring.

    >>> import jax
    >>> root = bind({}, rngs={'params': jax.random.PRNGKey(0)}, mutable=True)
    >>> child = root.push('block')
    >>> child.path_text
    '/block'
    >>> w = child.param('w', jax.random.normal, (2,))
    >>> list(root.variables()['params'])
    ['block']
    """

    def __init__(
        self,
        variables: Mapping[str, Mapping[str, Any]],
        rngs: Mapping[str, PRNGKey | LazyRng] | None = None,
        name: str | None = None,
        mutable: CollectionFilter = False,
        parent: Scope | None = None,
        path: Iterable[str] = (),
        debug_path: Iterable[str] = (),
        flags: Mapping | None = None,
    ) -> None:
        rngs = {} if rngs is None else rngs
        self.rngs = {k: v if isinstance(v, LazyRng) else LazyRng(v, ()) for k, v in rngs.items()}
        self.name = name
        self.parent = parent
        self.path = tuple(path)
        self.debug_path = tuple(debug_path) if debug_path else self.path
        self.mutable = mutable
        self._store: _Store
        self._root: Scope | None
        if parent is not None:
            self._store = parent._store
            self._root = parent.root
        else:
            if not isinstance(variables, dict):
                variables = dict(variables)
            self._store = _Store(variables, mutable)
            self._root = None  # root() is self: no self-reference, so no ref cycle
        self.flags = flags if isinstance(flags, FrozenDict) else freeze(dict(flags or {}))
        self.reservations: collections.defaultdict[str, set] = collections.defaultdict(set)
        self.rng_counters: dict[str, int] = {key: 0 for key in self.rngs}
        self._child_counters: dict[str, dict[str, int]] = {}
        self._invalid = False
        self._cols: dict[str, Any] = {}
        self._gen = 0
        self._name_hints: dict[str, int] = {}

    # -- identity --------------------------------------------------------------------

    # Two Scope objects that share the variable store, the path and the RNG counters draw
    # the same keys and touch the same variables, so they are interchangeable (Flax's rule).
    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Scope):
            return False
        return self is other or (
            self._store is other._store
            and self.path == other.path
            and self.rng_counters is other.rng_counters
        )

    def __hash__(self) -> int:
        return hash((id(self._store), self.path, id(self.rng_counters)))

    @property
    def root(self) -> Scope:
        """The root scope of this variable tree."""
        r = self._root
        return self if r is None else r

    @property
    def path_text(self) -> str:
        """The debug path as ``'/a/b'`` (``'/'`` for a root scope), for error messages.

        Inside a lifted transform the scope's own name is shown wrapped in the transform's
        name (``'/vmap(dense)'``), so errors say where the transform was applied.
        """
        return "/" + "/".join(self.debug_path)

    @property
    def invalid(self) -> bool:
        return self._invalid or self._store.invalid

    @property
    def is_valid(self) -> bool:
        return not (self._invalid or self._store.invalid)

    def invalidate(self) -> None:
        """Marks the scope as no longer usable for creating children, variables or RNGs.

        Invalidating a root scope invalidates every scope of its tree (the children an
        ``apply`` created must not outlive it either).
        """
        self._invalid = True
        if self.parent is None:
            self._store.invalid = True

    def _check_valid(self) -> None:
        if self._invalid or self._store.invalid:
            raise errors.InvalidScopeError(self.path_text)

    def _validate_trace_level(self) -> None:
        # Kept for API compatibility; flaxen relies on JAX's own leaked-tracer checks.
        return None

    def get_flag(self, key: str, default: Any = no_flag) -> Any:
        """The value of flag ``key`` (e.g. ``'initializing'``), or ``default``."""
        if key in self.flags:
            return self.flags[key]
        if default is no_flag:
            raise ValueError(
                f'Flag "{key}" is not set on scope "{self.path_text}" (flags: '
                f"{dict(self.flags)}). Pass a default: scope.get_flag({key!r}, default)."
            )
        return default

    def has_flag(self, key: str) -> bool:
        return key in self.flags

    @contextlib.contextmanager
    def temporary(self):
        """A context yielding this scope and invalidating it on exit."""
        try:
            yield self
        finally:
            self.invalidate()

    # -- names and children ----------------------------------------------------------

    def reserve(self, name: str, col: str | None = None) -> None:
        """Claims ``name`` in this scope (for ``col`` only, or for every use if None).

        A child scope name clashes with anything; a variable name clashes only with the
        same name in the same collection (or with a child).
        """
        if not isinstance(name, str):
            raise TypeError(
                f"Scope and variable names must be strings, got {name!r} of type "
                f"{type(name).__name__} in scope \"{self.path_text}\"."
            )
        taken = self.reservations.get(name)
        if taken is not None:
            if col is None or None in taken or col in taken:
                raise _DuplicateNameError(
                    "child scope" if col is None else f'variable of collection "{col}"',
                    name, self.path_text,
                )
            taken.add(col)
        else:
            self.reservations[name] = {col}

    def name_reserved(self, name: str, col: str | None = None) -> bool:
        """Whether ``name`` is taken (for collection ``col``, when given)."""
        taken = self.reservations.get(name)
        if taken is None:
            return False
        return col is None or None in taken or col in taken

    def default_name(self, prefix: str) -> str:
        """The first ``f'{prefix}{i}'`` (i = 0, 1, ...) not yet reserved."""
        i = self._name_hints.get(prefix, 0)
        reservations = self.reservations
        while f"{prefix}{i}" in reservations:
            i += 1
        self._name_hints[prefix] = i
        return f"{prefix}{i}"

    def push(self, name: str | None = None, prefix: str = "", reuse: bool = False) -> Scope:
        """Creates the child scope ``name`` (or an auto-name ``{prefix}{i}``).

        The name is reserved; pushing the same name twice raises unless ``reuse=True``. The
        child's RNG streams extend the suffix with ``name`` and keep their counters in this
        scope, so a re-pushed child continues where it left off.
        """
        if self._invalid or self._store.invalid:
            raise errors.InvalidScopeError(self.path_text)
        if name is None:
            name = self.default_name(prefix)
        if not reuse or name not in self.reservations:
            self.reserve(name)
        counters = self._child_counters.get(name)
        if counters is None:
            counters = self._child_counters[name] = {key: 0 for key in self.rngs}
        child = Scope.__new__(Scope)
        child.rngs = {k: LazyRng.create(v, name) for k, v in self.rngs.items()}
        child.name = name
        child.parent = self
        child.path = self.path + (name,)
        child.debug_path = self.debug_path + (name,)
        child.mutable = self.mutable
        child._store = self._store
        child._root = self.root
        child.flags = self.flags
        child.reservations = collections.defaultdict(set)
        child.rng_counters = counters
        child._child_counters = {}
        child._invalid = False
        child._cols = {}
        child._gen = 0
        child._name_hints = {}
        return child

    def child(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        prefix: str | None = None,
        named_call: bool = True,
        **partial_kwargs: Any,
    ) -> Callable[..., Any]:
        """Partially applies ``fn`` to a new child scope (named ``name`` or auto-named).

        >>> root = bind({}, mutable=True)
        >>> root.child(lambda scope: scope.name, prefix='block_')()
        'block_0'
        """
        if name is None and prefix is None:
            prefix = getattr(fn, "__name__", "child") + "_"

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            scope = self.push(name, prefix=prefix or "")
            kw = {**partial_kwargs, **kwargs}
            if named_call:
                with jax.named_scope(scope.name):
                    return fn(scope, *args, **kw)
            return fn(scope, *args, **kw)

        return wrapper

    def rewound(self, rewind_rngs: bool = False) -> Scope:
        """A fresh view of this scope: no names reserved; RNG counters kept or reset."""
        self._check_valid()
        scope = Scope.__new__(Scope)
        scope.__dict__.update(self.__dict__)
        scope.reservations = collections.defaultdict(set)
        scope._name_hints = {}
        scope._cols = {}
        if rewind_rngs:
            scope.rng_counters = {key: 0 for key in self.rngs}
            scope._child_counters = {}
        if self.parent is None:
            scope._root = None
        return scope

    # -- collections -----------------------------------------------------------------

    def _collection(self, col: str) -> Mapping | None:
        """This scope's sub-dict of collection ``col``, or None when it does not exist."""
        store = self._store
        if self._gen != store.gen:
            self._cols = {}
            self._gen = store.gen
        found = self._cols.get(col)
        if found is not None:
            return found
        if self.parent is None:
            found = store.variables.get(col)
        else:
            outer = self.parent._collection(col)
            found = outer.get(self.name) if outer is not None else None
        if isinstance(found, Mapping):
            self._cols[col] = found
            return found
        return None

    def collection(self, col: str) -> Mapping:
        """This scope's variables of collection ``col`` (empty when there are none)."""
        found = self._collection(col)
        return FrozenDict() if found is None else found

    def _mutable_collection(self, col: str) -> dict:
        if not self.is_mutable_collection(col):
            raise errors.ModifyScopeVariableError(col, "*", self.path_text)
        found = self._collection(col)
        if found is not None:
            return found  # type: ignore[return-value] # mutable collections hold plain dicts
        if self.parent is None:
            found = self._store.variables[col] = {}
        else:
            found = self.parent._mutable_collection(col).setdefault(self.name, {})
        self._cols[col] = found
        return found

    def is_mutable_collection(self, col: str) -> bool:
        """Whether variables of collection ``col`` may be created or written here."""
        store = self._store
        if self.mutable is store.mutable:
            hit = store.mutable_cache.get(col)
            if hit is None:
                hit = store.mutable_cache[col] = in_filter(self.mutable, col)
            return hit
        return in_filter(self.mutable, col)

    def is_collection_empty(self, col: str) -> bool:
        """Whether this scope holds no variables of collection ``col``."""
        found = self._collection(col)
        return found is None or len(found) == 0

    def variables(self) -> Mapping:
        """This scope's variables, one entry per non-empty collection."""
        if self.parent is None:
            out = dict(self._store.variables)
        else:
            out = {}
            for col in self._store.variables:
                found = self._collection(col)
                if found is not None:
                    out[col] = found
        return freeze(out) if config.flax_return_frozendict else out

    def mutable_variables(self) -> Mapping:
        """The variables of the mutable collections only."""
        out = {}
        for col in self._store.variables:
            if self.is_mutable_collection(col):
                found = self._collection(col)
                if found is not None:
                    out[col] = found
        return freeze(out) if config.flax_return_frozendict else out

    def has_variable(self, col: str, name: str) -> bool:
        found = self._collection(col)
        return found is not None and name in found

    def get_variable(self, col: str, name: str, default: Any = None) -> Any:
        """The value of variable ``col/name`` at this scope, or ``default`` if missing."""
        found = self._collection(col)
        if found is None or name not in found:
            return default
        return found[name]

    def put_variable(self, col: str, name: str, value: Any) -> None:
        """Writes variable ``col/name``; dict values are merged into existing dicts."""
        if self._invalid or self._store.invalid:
            raise errors.InvalidScopeError(self.path_text)
        if not self.is_mutable_collection(col):
            raise errors.ModifyScopeVariableError(col, name, self.path_text)
        target = self._mutable_collection(col)
        if isinstance(value, Mapping) or isinstance(target.get(name), Mapping):
            if _merge_put(target, name, value):
                self._store.gen += 1
        else:
            target[name] = value

    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., T] | None = None,
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> Variable[T]:
        """The variable ``col/name``, created as ``init_fn(*init_args)`` if missing.

        ``init_fn`` gets no RNG (use ``make_rng`` for that). A missing variable of an
        immutable collection raises ``ScopeVariableNotFoundError`` (or
        ``ScopeCollectionNotFound`` when the whole collection is absent).
        """
        self.reserve(name, col)
        found = self._collection(col)
        if found is None or name not in found:
            if init_fn is None or not self.is_mutable_collection(col):
                if found is None or len(found) == 0:
                    raise errors.ScopeCollectionNotFound(col, name, self.path_text)
                raise errors.ScopeVariableNotFoundError(name, col, self.path_text)
            self._check_valid()
            self.put_variable(col, name, init_fn(*init_args, **init_kwargs))
        return Variable(self, col, name, unbox=unbox)

    def param(
        self,
        name: str,
        init_fn: Callable[..., T],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> T:
        """The parameter ``name``, created as ``init_fn(make_rng('params'), *init_args)``.

        An existing parameter is returned after checking that its shape is the one
        ``init_fn`` would produce (``ScopeParamShapeError`` otherwise).
        """
        self.reserve(name, "params")
        found = self._collection("params")
        if found is not None and name in found:
            value = found[name]
            expected = _init_shapes(init_fn, init_args, init_kwargs)
            shape = getattr(value, "shape", None)
            if shape is not None and not isinstance(value, meta.AxisMetadata):
                actual = [tuple(shape)]
            else:
                actual = _leaf_shapes(value)
            if actual != expected:
                value_shape = actual[0] if len(actual) == 1 else actual
                init_shape = expected[0] if len(expected) == 1 else expected
                raise errors.ScopeParamShapeError(name, self.path_text, value_shape, init_shape)
        else:
            if not self.is_mutable_collection("params"):
                if found is None or len(found) == 0:
                    raise errors.ScopeCollectionNotFound("params", name, self.path_text)
                raise errors.ScopeParamNotFoundError(name, self.path_text)
            value = init_fn(self.make_rng("params"), *init_args, **init_kwargs)
            self.put_variable("params", name, value)
        if unbox and isinstance(value, (meta.AxisMetadata, Mapping, list, tuple)):
            value = meta.unbox(value)
        return value

    # -- RNGs --------------------------------------------------------------------------

    def has_rng(self, name: str) -> bool:
        return name in self.rngs

    def make_rng(self, name: str = "params") -> PRNGKey:
        """A new key of stream ``name``; unique per call, reproducible from the root key.

        A missing stream falls back to ``'params'`` when that one exists (as in Flax);
        otherwise :class:`~flaxen.errors.InvalidRngError` is raised.
        """
        if self._invalid or self._store.invalid:
            raise errors.InvalidScopeError(self.path_text)
        lazy = self.rngs.get(name)
        if lazy is None:
            lazy = self.rngs.get("params")
            if lazy is None:
                raise errors.InvalidRngError(
                    f'{self.name} needs PRNG for "{name}": scope "{self.path_text}" got no '
                    f'stream "{name}" (streams present: {sorted(self.rngs) or "none"}). Pass it '
                    "to init/apply, e.g. rngs={'" + name + "': jax.random.key(0)}."
                )
            name = "params"
        counters = self.rng_counters
        count = counters[name] + 1
        counters[name] = count
        return lazy.fold_count(count)

    def __repr__(self) -> str:
        return f"Scope(path={self.path_text!r}, mutable={self.mutable!r})"


# ---------------------------------------------------------------------------------------
# init / apply / bind


def _is_valid_variables(variables: Any) -> bool:
    if not isinstance(variables, Mapping):
        return False
    for name, col in variables.items():
        if not isinstance(name, str) or not isinstance(col, Mapping):
            return False
    return True


def _is_valid_rngs(rngs: Any) -> bool:
    if not isinstance(rngs, Mapping):
        return False
    return all(isinstance(k, str) and is_valid_rng(v) for k, v in rngs.items())


def _unfreeze_variables(variables: Mapping, mutable: CollectionFilter) -> dict:
    out = {}
    for col, tree in variables.items():
        if in_filter(mutable, col):
            out[col] = unfreeze(tree) if isinstance(tree, FrozenDict) else _copy_dicts(tree)
        else:
            out[col] = tree
    return out


@traceback_util.api_boundary
def bind(
    variables: VariableDict,
    rngs: Mapping[str, PRNGKey] | None = None,
    mutable: CollectionFilter = False,
    flags: Mapping | None = None,
) -> Scope:
    """A root Scope over ``variables`` with RNG streams ``rngs``; lives until dropped.

    Mutable collections are copied, so the caller's dicts are never modified.

    >>> scope = bind({'params': {'w': 1.0}})
    >>> scope.get_variable('params', 'w')
    1.0
    """
    check_filter(mutable)
    if not _is_valid_variables(variables):
        if isinstance(variables, Mapping):
            bad = [k for k, v in variables.items() if not isinstance(v, Mapping)]
            raise errors.ApplyScopeInvalidVariablesTypeError() from TypeError(
                f"collections {bad} are not dicts; expected {{'params': {{...}}, ...}}"
            )
        raise errors.ApplyScopeInvalidVariablesTypeError()
    params = variables.get("params")
    if isinstance(params, Mapping) and "params" in params and isinstance(
            params["params"], Mapping):
        raise errors.ApplyScopeInvalidVariablesStructureError(variables)
    if rngs is not None and not _is_valid_rngs(rngs):
        raise ValueError(
            "The ``rngs`` argument passed to an apply function should be a ``jax.PRNGKey`` "
            "or a dict mapping stream names to PRNG keys (from jax.random.key or "
            f"jax.random.PRNGKey); got {rngs!r}."
        )
    return Scope(_unfreeze_variables(variables, mutable), rngs=rngs, mutable=mutable,
                 flags=flags)


def apply(
    fn: Callable[..., Any],
    mutable: CollectionFilter = False,
    flags: Mapping | None = None,
) -> Callable[..., Any]:
    """Turns ``fn(scope, *args)`` into ``(variables, *args, rngs=None) -> out``.

    When ``mutable`` is anything but False the result is ``(out, mutated)``, where
    ``mutated`` holds only the mutable collections (plain dicts, or FrozenDicts when
    ``config.flax_return_frozendict`` is set).
    """
    check_filter(mutable)

    @traceback_util.api_boundary
    @functools.wraps(fn)
    def wrapper(variables: VariableDict, *args: Any, rngs: Any = None, **kwargs: Any):
        if rngs is not None and not isinstance(rngs, Mapping):
            if not is_valid_rng(rngs):
                raise errors.InvalidRngError(
                    "The rngs argument of an apply function must be a PRNG key or a dict "
                    f"mapping stream names to PRNG keys; got {rngs!r}."
                )
            rngs = {"params": rngs}
        root = bind(variables, rngs=rngs, mutable=mutable, flags=flags)
        try:
            y = fn(root, *args, **kwargs)
        finally:
            root.invalidate()
        if mutable is not False:
            return y, root.mutable_variables()
        return y

    return wrapper


def init(
    fn: Callable[..., Any],
    mutable: CollectionFilter = True,
    flags: Mapping | None = None,
) -> Callable[..., Any]:
    """Turns ``fn(scope, *args)`` into ``(rngs, *args) -> (out, variables)``.

    ``rngs`` is a PRNG key (the ``'params'`` stream) or a dict of streams. The root scope
    has the flag ``initializing=True``.
    """
    check_filter(mutable)

    @traceback_util.api_boundary
    @functools.wraps(fn)
    def wrapper(rngs: Any, *args: Any, **kwargs: Any):
        if not isinstance(rngs, Mapping):
            if not is_valid_rng(rngs):
                raise ValueError(
                    "First argument passed to an init function should be a ``jax.PRNGKey`` "
                    "(jax.random.key(0) or jax.random.PRNGKey(0)) or a dict mapping stream "
                    f"names to PRNG keys; got {rngs!r}."
                )
            rngs = {"params": rngs}
        elif not _is_valid_rngs(rngs):
            raise ValueError(
                "First argument passed to an init function should be a ``jax.PRNGKey`` or a "
                f"dict mapping stream names to PRNG keys; got {rngs!r}."
            )
        init_flags = {**(flags or {}), "initializing": True}
        return apply(fn, mutable=mutable, flags=init_flags)({}, *args, rngs=rngs, **kwargs)

    return wrapper


def lazy_init(
    fn: Callable[..., Any],
    mutable: CollectionFilter = True,
    flags: Mapping | None = None,
) -> Callable[..., Any]:
    """Like :func:`init` but inputs may be ``jax.ShapeDtypeStruct``; returns only variables.

    Nothing depending on the abstract inputs' values is computed; variables that do
    raise :class:`~flaxen.errors.LazyInitError`.
    """
    from flaxen.core._partial_eval import lazy_call

    init_fn = init(fn, mutable=mutable, flags=flags)

    @traceback_util.api_boundary
    @functools.wraps(fn)
    def wrapper(rngs: Any, *args: Any, **kwargs: Any):
        return lazy_call(lambda *a, **k: init_fn(rngs, *a, **k)[1], args, kwargs)

    return wrapper

# Flax's module imports these for its own use; code written for Flax reaches for them here.
from flaxen import struct  # noqa: E402, F401
from flaxen.ids import uuid  # noqa: E402, F401

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import (  # noqa: E402, F401 - Flax's module re-exports these aliases
    Array,
    Collection,
    MutableCollection,
    MutableVariableDict,
    PRNGFoldable,
    RNGSequences,
)
