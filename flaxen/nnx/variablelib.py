"""Variables: the mutable boxes that hold a module's arrays, and their kinds.

A :class:`Variable` wraps one value (usually an array) plus metadata. Its subclass says what
the value is for: :class:`Param` (trainable), :class:`BatchStat`, :class:`Cache`,
:class:`Intermediate`, and the RNG kinds in :mod:`flaxen.nnx.rnglib`. Filters select state
by these types. A Variable is a JAX pytree (its value is the leaf) and acts like its array.

Today's ``nnx.VariableState`` is ``Variable`` itself: a State's leaves are Variables, and
``to_state`` is ``copy``. Flax 0.8.3's snapshot class lives with that face, in
``flaxen.experimental.nnx``.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> w = nnx.Param(jnp.ones(3), out_sharding=('model',), eager_sharding=False)
>>> w.shape, w.get_metadata('out_sharding'), float((w * 2).sum())
((3,), ('model',), 6.0)
>>> nnx.Param(jnp.ones(3), sharding=('model',)).get_metadata('out_sharding')
('model',)
>>> vs = w.to_state()
>>> vs is w, vs.type is nnx.Param, vs.get_metadata('out_sharding')
(False, True, ('model',))

The sharding names are stored as ``out_sharding``, as in Flax 0.12.8: ``sharding=`` (also
the Flax 0.8.3 face's spelling, so it is taken silently) and the deprecated
``sharding_names=`` (a ``DeprecationWarning``, as Flax warns) are renamed on the way in.
"""

from __future__ import annotations

import builtins
import dataclasses
import typing as tp
import warnings

import jax

from flaxen.errors import InvalidNNXValueError, TraceContextError
from flaxen.nnx import _trace, _treescope, _variable_pytree
from flaxen.nnx import reprlib as _reprlib
from flaxen.nnx._creation_defaults import (
    VARIABLE_CONTEXT,
    VarDefaults,
    VarDefaultsContext,
    VariableContext,
    use_eager_sharding,
    using_eager_sharding,
    var_defaults,
)
from flaxen.nnx._creation_defaults import _current as _default_mode
from flaxen.nnx._variable_ops import ArrayOps
from flaxen.nnx._variable_parts import (  # what Variable needs that needs no Variable class
    _DEFAULT_REQUIRED,
    _HOOK_NAMES,
    _HOOKS_DEPRECATED,
    _ON_NAMES,
    _REF_TYPE,  # noqa: F401 - the Ref check's types, kept importable from here
    _SHARDING_NAMES_DEPRECATED,
    _TRACER_TYPE,  # noqa: F401
    EMPTY,
    MISSING,
    Empty,
    Missing,  # noqa: F401 - importable from here, as in Flax
    SizeBytes,  # noqa: F401 - importable from here, as in Flax
    _as_hooks,
    _axis_args,
    _check_hooks_free,
    _leaves_equal,
    _pick,
    _ref_read,
    _remap_sharding,
    _run_hooks,
    is_array_ref,
    variable_repr_items,
)
from flaxen.nnx._variable_pytree import own_metadata as _own_metadata

__all__ = [
    "EMPTY", "MISSING", "VARIABLE_CONTEXT", "BatchStat", "Cache", "Empty", "Intermediate",
    "Param", "Perturbation", "VarDefaults", "VarDefaultsContext", "Variable", "VariableContext",
    "VariableMetadata", "VariableState", "VariableTypeCache", "is_array_ref",
    "use_eager_sharding", "using_eager_sharding", "var_defaults", "with_metadata",
    "_leaves_equal",
]

A = tp.TypeVar("A")
B = tp.TypeVar("B")
C = tp.TypeVar("C")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
P = tp.TypeVar("P", bound=property)
V = tp.TypeVar("V", bound="Variable[tp.Any]")
# the hook shapes of today's Flax (``on_get_value=`` ... on a Variable or VariableMetadata)
GetValueHook = tp.Callable[["Variable[A]", A], A]
SetValueHook = tp.Callable[["Variable[A]", A], A]
CreateValueHook = tp.Callable[["Variable[A]", A], A]
AxisName = str
AxisIndex = int
AddAxisHook = tp.Callable[[V, AxisIndex, tp.Optional[AxisName]], None]  # noqa: UP045
RemoveAxisHook = tp.Callable[[V, AxisIndex, tp.Optional[AxisName]], None]  # noqa: UP045
PyTreeDef = tp.Any
Leaf = tp.Any


@dataclasses.dataclass(init=False)
class VariableMetadata(tp.Generic[A]):
    """An initializer's result that carries metadata and hooks for the Variable built from it.

    A Variable constructed from it takes ``raw_value`` as its value, ``metadata`` as its
    metadata and each non-empty ``on_*`` hook tuple as the ``on_*`` metadata entry.
    ``set_value_hooks=`` ... ``remove_axis_hooks=`` (Flax 0.8.3's keyword names, with its
    ``(variable, axis_name, axis_index)`` axis hooks) are accepted as keywords and read back
    as attributes of those names (tuples); the Variable runs them as 0.8.3 hooks.

    >>> from flaxen import nnx
    >>> vm = nnx.VariableMetadata(1.0, metadata={'tag': 'a'})
    >>> p = nnx.Param(vm)
    >>> p.get_metadata('tag'), vm == nnx.VariableMetadata(1.0, metadata={'tag': 'a'})
    ('a', True)
    """

    raw_value: A
    on_set_value: tuple[SetValueHook[A], ...] = ()
    on_get_value: tuple[GetValueHook[A], ...] = ()
    on_create_value: tuple[CreateValueHook[A], ...] = ()
    on_add_axis: tuple[AddAxisHook[Variable[A]], ...] = ()
    on_remove_axis: tuple[RemoveAxisHook[Variable[A]], ...] = ()
    metadata: tp.Mapping[str, tp.Any] = dataclasses.field(default_factory=dict)

    def __init__(
        self,
        raw_value: A,
        on_set_value: tp.Any = (),
        on_get_value: tp.Any = (),
        on_create_value: tp.Any = (),
        on_add_axis: tp.Any = (),
        on_remove_axis: tp.Any = (),
        metadata: tp.Mapping[str, tp.Any] | None = None,
        **legacy_hooks: tp.Any,
    ) -> None:
        self.raw_value = raw_value
        self.on_set_value = on_set_value
        self.on_get_value = on_get_value
        self.on_create_value = on_create_value
        self.on_add_axis = on_add_axis
        self.on_remove_axis = on_remove_axis
        self.metadata = dict(metadata or {})
        for name in legacy_hooks:
            if name not in _HOOK_NAMES:
                raise TypeError(
                    f"VariableMetadata() got an unexpected keyword argument {name!r}; it takes "
                    f"raw_value, {', '.join(_ON_NAMES)}, metadata (or Flax 0.8.3's "
                    f"{', '.join(_HOOK_NAMES)}).")
        self._legacy_hooks = {name: _as_hooks(h) for name, h in legacy_hooks.items() if h}

    # Flax 0.8.3's attribute names of the hooks given by its keyword names
    set_value_hooks = property(lambda self: self._legacy_hooks.get("set_value_hooks", ()))
    get_value_hooks = property(lambda self: self._legacy_hooks.get("get_value_hooks", ()))
    create_value_hooks = property(
        lambda self: self._legacy_hooks.get("create_value_hooks", ()))
    add_axis_hooks = property(lambda self: self._legacy_hooks.get("add_axis_hooks", ()))
    remove_axis_hooks = property(
        lambda self: self._legacy_hooks.get("remove_axis_hooks", ()))


class VariableMeta(type):
    """Metaclass of Variables: slots by default, hijax construction, hijax isinstance."""

    def __new__(mcls, cls_name: str, bases: tuple, attrs: dict, **kwargs: tp.Any) -> type:
        attrs.setdefault("__slots__", ())
        return super().__new__(mcls, cls_name, bases, attrs, **kwargs)

    def __instancecheck__(cls, instance: tp.Any) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        var_type = getattr(type(instance), "_hijax_var_type", None)
        if var_type is not None:
            return issubclass(var_type(instance), cls)
        return False

    def __call__(cls, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        var = super().__call__(*args, **kwargs)
        if var._var_metadata.get("hijax"):
            return _to_hijax(var)
        return var


def _to_hijax(var: tp.Any) -> tp.Any:
    # upward: the hijax form subclasses Variable (defined in this file), so its file sits
    # above this one and is loaded on the first hijax Variable
    from flaxen.nnx._hijax import HijaxVariable

    return HijaxVariable.from_variable(var)


class Variable(ArrayOps, _reprlib.Representable, tp.Generic[A], metaclass=VariableMeta):
    """A mutable box for one value, typed by its subclass, with metadata.

    A Variable behaves like its value: operators, ``.shape``/``.T`` (attributes of the value
    are proxied), ``v[...]`` to read and ``v[...] = x`` / ``v[...] += x`` to write,
    ``get_value()``/``set_value()`` (override them in a subclass to transform reads and
    writes), and ``jnp`` functions accept it. It is a JAX pytree whose one leaf is the value
    and whose metadata is static, so ``jax.tree.map`` over a Param gives a new Param.
    Metadata always holds ``hijax``, ``ref`` and ``eager_sharding``; with ``ref=True`` the
    value lives in a ``jax.Ref`` that ``jax.jit`` updates in place.

    The Flax 0.8.3 hooks (``get_value_hooks`` ... ``remove_axis_hooks``: callables or tuples
    of them, getting ``(variable, value)``) and metadata-as-attributes still work.

    >>> import jax, jax.numpy as jnp
    >>> from flaxen import nnx
    >>> v = nnx.Param(jnp.zeros(2), tag='x')
    >>> v[...] += 1
    >>> v[...].tolist(), v.get_metadata('tag'), v.shape
    ([1.0, 1.0], 'x', (2,))
    >>> type(jax.tree.map(lambda a: a * 2, v)).__name__
    'Param'
    """

    __slots__ = ("raw_value", "_trace_state", "_var_metadata", "_var_aux")
    __treescope_repr__ = _treescope.variable_repr
    required_metadata = frozenset(_DEFAULT_REQUIRED)

    # the today's-hook methods (on_get_value ...) a subclass defines: each becomes the
    # metadata entry of that name on construction, as in Flax; found once per class
    _class_hooks: tp.ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: tp.Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._class_hooks = tuple(name for name in _ON_NAMES if hasattr(cls, name))
        _variable_pytree.register(cls)

    def __init__(
        self,
        value: A | VariableMetadata[A],
        set_value_hooks: tp.Any = (),
        get_value_hooks: tp.Any = (),
        create_value_hooks: tp.Any = (),
        add_axis_hooks: tp.Any = (),
        remove_axis_hooks: tp.Any = (),
        *,
        hijax: bool | None = None,
        ref: bool | None = None,
        eager_sharding: bool | None = None,
        **metadata: tp.Any,
    ) -> None:
        setter = object.__setattr__
        if isinstance(value, VariableMetadata):
            # Flax's merge: the keywords' keys first, the initializer's metadata after them
            # and winning a clash; its eager_sharding keeps its place
            aux = dict(value.metadata)
            hijax = _pick(aux, "hijax", hijax)
            ref = _pick(aux, "ref", ref)
            eager_sharding = _pick(aux, "eager_sharding", eager_sharding, keep=True)
            metadata.update(aux)
            for name in _ON_NAMES:
                hooks = getattr(value, name)
                if hooks and name not in metadata:
                    metadata[name] = hooks
            for name, hooks in getattr(value, "_legacy_hooks", {}).items():
                metadata[name] = _as_hooks(metadata.get(name, ())) + hooks
            value = value.raw_value
        for name, hooks in zip(
            _HOOK_NAMES,
            (set_value_hooks, get_value_hooks, create_value_hooks, add_axis_hooks,
             remove_axis_hooks),
        ):
            if hooks or name in metadata:
                metadata[name] = _as_hooks(metadata.get(name, ())) + _as_hooks(hooks)
        hooked = bool(metadata) and any(metadata.get(name) for name in _ON_NAMES)
        if hijax is None:
            hijax = _default_mode("hijax")
        if ref is None:
            ref = _default_mode("ref")
        if eager_sharding is None:
            eager_sharding = using_eager_sharding()
        if ref:
            _check_hooks_free(value)
        # Flax's key order: the modes after the given metadata, then the class's hooks, and
        # a renamed `sharding_names`/`sharding` moves to the end as `out_sharding`
        metadata["hijax"] = bool(hijax)
        metadata["ref"] = bool(ref)
        metadata["eager_sharding"] = bool(eager_sharding)
        for name in self._class_hooks:
            if name not in metadata:
                metadata[name] = getattr(type(self), name)
                hooked = True
        if hooked:
            warnings.warn(_HOOKS_DEPRECATED, stacklevel=3)
        # 0.8.3's spelling only names axes: without a mesh such a Variable stays unsharded
        axes_only = "sharding" in metadata
        _remap_sharding(metadata)
        setter(self, "_var_metadata", metadata)
        setter(self, "_trace_state", _trace.current_trace())
        setter(self, "raw_value", value)
        if "create_value_hooks" in metadata or "on_create_value" in metadata:
            value = _run_hooks(self, value, metadata, "create_value_hooks", "on_create_value")
        value = self.create_value(value)  # type: ignore[arg-type]  # metadata unwrapped above
        if eager_sharding and metadata.get("out_sharding") is not None:
            # today's eager sharding: place (or constrain) the value as out_sharding asks
            from flaxen.nnx._sharding import shard_value

            value = shard_value(value, metadata["out_sharding"],
                                metadata.get("sharding_rules"), metadata.get("mesh"),
                                require_mesh=not axes_only)
        if ref:
            value = jax.tree_util.tree_map(jax.new_ref, value)
        setter(self, "raw_value", value)

    def create_value(self, value: A) -> A:
        """Called once on construction; a subclass may override it to transform the value."""
        return value

    # -- properties -----------------------------------------------------------------------
    @property
    def type(self) -> type:
        """The Variable's kind (its class); the same as ``VariableState.type`` was."""
        return type(self)

    @property
    def var_type(self) -> builtins.type:
        return type(self)

    @property
    def hijax(self) -> bool:
        return self._var_metadata.get("hijax", False)

    @property
    def ref(self) -> bool:
        return self._var_metadata.get("ref", False)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the value (read out of its Ref for ``ref=True``)."""
        return self.get_value().shape  # type: ignore[attr-defined]

    @property
    def sharding_names(self) -> tp.Any:
        """Deprecated alias of the ``out_sharding`` metadata (None when absent); warns."""
        warnings.warn(_SHARDING_NAMES_DEPRECATED, DeprecationWarning, stacklevel=2)
        return self._var_metadata.get("out_sharding")

    # -- metadata as attributes; other attributes proxy the value ---------------------------
    def __getattr__(self, name: str) -> tp.Any:
        # only called when normal lookup fails, so slots and methods stay fast
        meta = object.__getattribute__(self, "_var_metadata")
        if name in meta:
            return meta[name]
        if name.startswith("__") and not name.startswith("__array"):
            # NumPy's hooks (__array__, __array_priority__, ...) are read off the value, as
            # Flax's Variable does, so NumPy converts it and defers to its operators
            raise AttributeError(name)
        raw = object.__getattribute__(self, "raw_value")
        try:
            return getattr(raw[...] if is_array_ref(raw) else raw, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute or metadata {name!r}, and neither "
                f"has its value ({type(raw).__name__}); its metadata keys are "
                f"{sorted(meta)}."
            ) from None

    def __setattr__(self, name: str, value: tp.Any) -> None:
        if name == "value":
            object.__setattr__(self, name, value)  # goes through the property
            return
        self._check_trace(name)
        if name in Variable.__slots__:
            object.__setattr__(self, name, value)
        else:
            _own_metadata(self)[name] = value
        _trace.bump()

    def __delattr__(self, name: str) -> None:
        self._check_trace(name)
        if name in self._var_metadata:
            del _own_metadata(self)[name]
            _trace.bump()
        else:
            object.__delattr__(self, name)

    def _check_trace(self, what: str) -> None:
        if self._trace_state is not _trace.current_trace() and not self.hijax:
            raise TraceContextError(
                f"Cannot mutate {type(self).__name__} from a different trace level: tried to "
                f"set {what!r} of a {type(self).__name__} created under a different JAX trace (it "
                "was probably captured by closure inside a transform). Pass the module as an "
                "argument of the nnx transform instead, so its state is traced."
            )

    # -- metadata API ---------------------------------------------------------------------
    def get_metadata(self, name: str | None = None, default: tp.Any = MISSING, *,
                     exclude_required: bool | None = None) -> tp.Any:
        """All metadata as a new dict, or the entry ``name`` (``default`` when absent).

        >>> from flaxen import nnx
        >>> v = nnx.Variable(1.0, tag='t')
        >>> v.get_metadata('tag'), v.get_metadata('other', 0)
        ('t', 0)
        >>> sorted(v.get_metadata(exclude_required=True))
        ['tag']
        """
        meta = self._var_metadata
        if name is None:
            if default is not MISSING:
                raise TypeError("get_metadata(): `default` needs a `name`.")
            if exclude_required:
                return {k: v for k, v in meta.items() if k not in _DEFAULT_REQUIRED}
            return dict(meta)
        if exclude_required is not None:
            raise TypeError("get_metadata(): pass either `name` or `exclude_required`.")
        if name in meta:
            return meta[name]
        if name in _DEFAULT_REQUIRED:
            return _DEFAULT_REQUIRED[name]
        if default is MISSING:
            raise KeyError(
                f"{type(self).__name__} has no metadata {name!r}; its keys are {sorted(meta)}. "
                "Pass a default: get_metadata(name, default)."
            )
        return default

    def set_metadata(self, *args: tp.Any, **kwargs: tp.Any) -> None:
        """Sets metadata: ``set_metadata(dict)`` replaces it all, ``set_metadata(name,
        value)`` sets one entry, ``set_metadata(**entries)`` updates several.

        ``hijax`` and ``ref`` cannot change here (use ``nnx.with_vars``).

        >>> from flaxen import nnx
        >>> v = nnx.Variable(1.0)
        >>> v.set_metadata(a=1); v.set_metadata('b', 2)
        >>> v.get_metadata('a'), v.get_metadata('b')
        (1, 2)
        """
        self._check_trace("metadata")
        if args and kwargs:
            raise TypeError("set_metadata(): pass a dict, a (name, value) pair, or keywords, "
                            "not a mix of positional and keyword arguments.")
        if len(args) == 1:
            new = dict(args[0])
            _remap_sharding(new)
            for key in _DEFAULT_REQUIRED:
                new.setdefault(key, self.get_metadata(key))
            self._check_fixed(new)
            object.__setattr__(self, "_var_metadata", new)
        elif len(args) == 2:
            entry = {args[0]: args[1]}
            _remap_sharding(entry)
            self._check_fixed(entry)
            _own_metadata(self).update(entry)
        elif kwargs and not args:
            _remap_sharding(kwargs)
            self._check_fixed(kwargs)
            _own_metadata(self).update(kwargs)
        else:
            raise TypeError(
                f"set_metadata() takes a dict, a name and a value, or keyword arguments; got "
                f"{len(args)} positional arguments.")
        _trace.bump()

    def _check_fixed(self, new: tp.Mapping[str, tp.Any]) -> None:
        for key in ("hijax", "ref", "eager_sharding"):
            if key in new and new[key] != self.get_metadata(key):
                raise ValueError(
                    f"Cannot change the `{key}` metadata of a {type(self).__name__} with "
                    f"set_metadata (it is {self.get_metadata(key)}, got {new[key]}); make a "
                    f"new Variable instead: variable.copy({key}={new[key]}) or "
                    f"nnx.with_vars(node, {key}={new[key]}).")

    def has_metadata(self, name: str) -> bool:
        return name in self._var_metadata

    def del_metadata(self, name: str) -> None:
        if name in ("hijax", "ref"):
            raise ValueError(f"Cannot delete the `{name}` metadata of a Variable.")
        self._check_trace("metadata")
        del _own_metadata(self)[name]
        _trace.bump()

    # -- value ----------------------------------------------------------------------------
    def get_raw_value(self) -> A:
        """The stored value as is (a ``jax.Ref`` for ``ref=True`` Variables, no hooks)."""
        return self.raw_value

    def set_raw_value(self, value: A, *, _unsafe_bypass_check: bool = False) -> None:
        if not _unsafe_bypass_check:
            self._check_trace("value")
        object.__setattr__(self, "raw_value", value)

    def get_value(self, *, index: tp.Any = MISSING) -> A:
        """The value (read out of its Ref for ``ref=True``), or ``value[index]``."""
        raw = self.raw_value
        if index is not MISSING:
            if is_array_ref(raw):
                value = raw[index]
            elif index is Ellipsis and (isinstance(raw, jax.Array)
                                        or not hasattr(raw, "__getitem__")):
                value = raw
            else:
                value = raw[index]
        elif is_array_ref(raw):
            value = raw[...]
        else:
            value = raw
        meta = self._var_metadata
        if "get_value_hooks" in meta or "on_get_value" in meta:
            value = _run_hooks(self, value, meta, "get_value_hooks", "on_get_value")
        return value  # type: ignore[return-value]

    def set_value(self, value: A, *, index: tp.Any = MISSING) -> None:
        """Sets the value (writing into its Ref for ``ref=True``), or ``value[index]``."""
        if isinstance(value, Variable):
            raise InvalidNNXValueError(
                "",
                f"Cannot assign a {type(value).__name__} as the value of a "
                f"{type(self).__name__}; assign its .value instead (`variable[...] = other[...]`)."
            )
        if self._trace_state is not _trace.current_trace():
            self._check_trace("value")
        meta = self._var_metadata
        if "set_value_hooks" in meta or "on_set_value" in meta:
            value = _run_hooks(self, value, meta, "set_value_hooks", "on_set_value")
        raw = self.raw_value
        if is_array_ref(raw):
            raw[... if index is MISSING else index] = value
        elif index is MISSING:
            object.__setattr__(self, "raw_value", value)
        elif isinstance(raw, jax.Array) or hasattr(raw, "at"):
            if index is Ellipsis and getattr(value, "shape", None) == raw.shape and \
                    getattr(value, "dtype", None) == raw.dtype:
                object.__setattr__(self, "raw_value", value)
            else:
                object.__setattr__(self, "raw_value", raw.at[index].set(value))
        elif index is Ellipsis and not hasattr(raw, "__setitem__"):
            object.__setattr__(self, "raw_value", value)
        else:
            raw[index] = value

    @property
    def value(self) -> A:
        return self.get_value()

    @value.setter
    def value(self, value: A) -> None:
        self.set_value(value)

    @classmethod
    def _variable_get_value(cls, var: Variable) -> tp.Any:
        return var.get_value()

    def __getitem__(self, key: tp.Any) -> tp.Any:
        return self.get_value(index=key)

    def __setitem__(self, key: tp.Any, value: tp.Any) -> None:
        self.set_value(value, index=key)

    def __delitem__(self, key: tp.Any) -> None:
        value = self.get_value()
        del value[key]  # type: ignore[attr-defined]
        self.set_value(value)

    def __jax_array__(self) -> tp.Any:
        return self.get_value()

    # Flax's Variable compares by value (``__eq__`` above), so it is unhashable: graph code
    # keys Variables by id(). No ``__array__`` either, so NumPy scalars on the left defer to
    # the Variable's reflected operators instead of converting it (a tracer error under jit).
    __hash__ = None  # type: ignore[assignment]

    # -- copies and states ----------------------------------------------------------------
    @classmethod
    def _new(cls, value: tp.Any, metadata: dict) -> Variable:
        var = object.__new__(cls)
        object.__setattr__(var, "_var_metadata", metadata)
        object.__setattr__(var, "_trace_state", _trace.current_trace())
        object.__setattr__(var, "raw_value", value)
        return var

    @classmethod
    def from_metadata(cls, value: tp.Any, attributes: tp.Mapping[str, tp.Any]) -> tp.Any:
        """A Variable of this type holding ``value`` as stored, with metadata ``attributes``.

        >>> from flaxen import nnx
        >>> p = nnx.Param.from_metadata(1.0, {'hijax': False, 'ref': False, 'tag': 'a'})
        >>> type(p).__name__, p.tag
        ('Param', 'a')
        """
        var = cls._new(value, dict(attributes))
        if attributes.get("hijax"):
            return _to_hijax(var)
        return var

    def copy(self, value: tp.Any = MISSING, *, _copy_ref: bool = True, **updates: tp.Any
             ) -> tp.Any:
        """A new Variable of the same type; ``value`` and metadata ``updates`` replace.

        ``copy(ref=True)`` gives a Variable whose value lives in a fresh ``jax.Ref``;
        ``copy(hijax=True)`` a hijax Variable.

        >>> import jax, jax.numpy as jnp
        >>> from flaxen import nnx
        >>> v = nnx.Param(jnp.ones(2)).copy(ref=True)
        >>> isinstance(v.get_raw_value(), jax.Ref), v.ref
        (True, True)
        """
        meta = dict(self._var_metadata)
        for key, default in _DEFAULT_REQUIRED.items():
            meta.setdefault(key, default)
        if value is MISSING:
            value = updates.pop("value", MISSING)
        meta.update(updates)
        if value is MISSING:
            value = self.raw_value
        if _copy_ref:
            value = jax.tree_util.tree_map(_ref_read, value)
            if meta["ref"]:
                value = jax.tree_util.tree_map(jax.new_ref, value)
        return type(self).from_metadata(value, meta)

    def replace(self, value: tp.Any = MISSING, **metadata: tp.Any) -> tp.Any:
        """A new Variable of the same type with ``value`` and/or metadata replaced."""
        if value is EMPTY:
            value = MISSING
        return self.copy(value, **metadata)

    def copy_from(self, other: Variable) -> None:
        """Makes this Variable hold ``other``'s value and metadata (in place)."""
        self._check_trace("value")
        object.__setattr__(self, "raw_value", other.raw_value)
        object.__setattr__(self, "_var_metadata", dict(other._var_metadata))
        _trace.bump()

    def update_from_state(self, variable_state: tp.Any) -> None:
        """Takes the value and metadata of ``variable_state`` (a Variable, or a snapshot such
        as the 0.8.3 face's VariableState), keeping this Variable's ``hijax`` and ``ref``."""
        if not isinstance(variable_state, Variable):
            self.copy_from_state(variable_state)
            return
        self._check_trace("value")
        object.__setattr__(self, "raw_value", variable_state.raw_value)
        if variable_state._var_metadata != self._var_metadata:
            meta = dict(variable_state._var_metadata)
            meta["hijax"], meta["ref"] = self.hijax, self.ref
            object.__setattr__(self, "_var_metadata", meta)
        _trace.bump()

    def copy_from_state(self, variable_state: tp.Any) -> None:
        """Takes the value and metadata of a snapshot (``.value`` and ``._var_metadata``; a
        Variable gives its raw value), keeping this Variable's ``hijax`` and ``ref``."""
        self._check_trace("value")
        meta = dict(_DEFAULT_REQUIRED)
        meta.update(variable_state._var_metadata)
        meta["hijax"], meta["ref"] = self.hijax, self.ref
        value = variable_state.raw_value if isinstance(variable_state, Variable) \
            else variable_state.value
        object.__setattr__(self, "raw_value", value)
        object.__setattr__(self, "_var_metadata", meta)
        _trace.bump()

    # Flax 0.12.8's ``to_state`` is ``copy``: today's State leaves are Variables
    to_state = copy

    @classmethod
    def state(cls, value: tp.Any, **metadata: tp.Any) -> tp.Any:
        """A State leaf holding ``value``: Flax 0.8.3's spelling; today's State leaves are
        Variables, so this is ``cls(value, **metadata)``.

        >>> from flaxen import nnx
        >>> nnx.Param.state(1.0, tag='w')
        Param(
          value=1.0,
          tag='w'
        )
        """
        return cls(value, **metadata)

    # -- axes (vmap/scan) ------------------------------------------------------------------
    def add_axis(self, axis_index: AxisIndex, axis_name: AxisName | None) -> None:
        """Tells the metadata a vmap/scan axis appears at ``axis_index`` (the Flax 0.8.3 order
        ``(axis_name, axis_index)`` is recognised too): runs the ``on_add_axis`` hooks."""
        self._axis_hooks("add_axis_hooks", "on_add_axis", axis_index, axis_name)

    def remove_axis(self, axis_index: AxisIndex, axis_name: AxisName | None) -> None:
        """Tells the metadata a vmap/scan axis disappears (arguments as in add_axis)."""
        self._axis_hooks("remove_axis_hooks", "on_remove_axis", axis_index, axis_name)

    def _axis_hooks(self, legacy: str, key: str, a: tp.Any, b: tp.Any) -> None:
        index, name = _axis_args(a, b)
        meta = self._var_metadata
        for hook in meta.get(legacy, ()):
            hook(self, name, index)
        hooks = meta.get(key)
        if hooks is None:
            return
        for hook in _as_hooks(hooks):
            hook(self, index, name)

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        # the value as read (a Ref's array, as Flax prints it), sized by what is stored
        yield from variable_repr_items(type(self).__name__, self.get_value(),
                                       self._var_metadata, self.raw_value)

    def __getstate__(self) -> dict:
        return {"raw_value": self.raw_value, "_var_metadata": self._var_metadata}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "raw_value", state["raw_value"])
        object.__setattr__(self, "_var_metadata", dict(state["_var_metadata"]))
        object.__setattr__(self, "_trace_state", _trace.current_trace())


_variable_pytree.bind(Variable)


class Param(Variable[A]):
    """A trainable parameter: what ``nnx.grad`` differentiates by default."""


class BatchStat(Variable[A]):
    """A running statistic (e.g. BatchNorm mean/var), updated in the forward pass."""


class Cache(Variable[A]):
    """A cache, e.g. the key/value cache of autoregressive attention."""


class Intermediate(Variable[A]):
    """A value recorded with ``Module.sow`` during a call."""


class Perturbation(Intermediate[A]):
    """A zero-valued Intermediate added with ``Module.perturb`` to read gradients of activations."""


def with_metadata(
    initializer: tp.Callable[..., A],
    on_set_value: tp.Any = (),
    on_get_value: tp.Any = (),
    on_create_value: tp.Any = (),
    on_add_axis: tp.Any = (),
    on_remove_axis: tp.Any = (),
    **metadata: tp.Any,
) -> tp.Callable[..., VariableMetadata[A]]:
    """Wraps ``initializer`` so the Variable created from its result carries ``metadata``
    (and the ``on_*`` hooks; Flax 0.8.3's ``set_value_hooks=`` ... keywords are passed on to
    :class:`VariableMetadata` as its 0.8.3 hooks).

    >>> import jax
    >>> from flaxen import nnx
    >>> init = nnx.with_metadata(jax.nn.initializers.ones, out_sharding=(None, 'model'),
    ...                          eager_sharding=False)
    >>> p = nnx.Param(init(jax.random.key(0), (2, 3)))
    >>> p.get_metadata('out_sharding'), p.get_metadata('eager_sharding')
    ((None, 'model'), False)
    """

    legacy = {name: metadata.pop(name) for name in _HOOK_NAMES if name in metadata}

    def wrapped(*args: tp.Any, **kwargs: tp.Any) -> VariableMetadata[A]:
        return VariableMetadata(
            initializer(*args, **kwargs),
            on_set_value=on_set_value,
            on_get_value=on_get_value,
            on_create_value=on_create_value,
            on_add_axis=on_add_axis,
            on_remove_axis=on_remove_axis,
            metadata=metadata,
            **legacy,
        )

    return wrapped


# collection name -> Variable type, for the Linen bridge (nnx.register_variable_name adds)
VariableState = Variable  # Flax 0.12.8 folded the 0.8.3 snapshot class into Variable

VariableTypeCache: dict[str, type[Variable[tp.Any]]] = {
    "params": Param, "batch_stats": BatchStat, "cache": Cache, "intermediates": Intermediate,
}


_NAME_REGISTRY = frozenset({
    "register_variable_name", "variable_name_from_type", "variable_type_from_name"})


def __getattr__(name: str) -> tp.Any:
    if name in _NAME_REGISTRY:
        # upward: the collection-name registry maps names to the Variable classes defined here
        from flaxen.nnx import _variable_names

        return getattr(_variable_names, name)
    if name in ("HijaxVariable", "HijaxVariableMeta", "VariableQDD"):
        # upward: see _to_hijax; Flax's variablelib names the hijax classes
        from flaxen.nnx import _hijax

        return getattr(_hijax, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
