"""Variables: the mutable boxes that hold a module's arrays, and their kinds.

A :class:`Variable` wraps one value (usually an array) plus free-form metadata readable as
attributes (``param.sharding``). Its subclass says what the value is for: :class:`Param`
(trainable), :class:`BatchStat`, :class:`Cache`, :class:`Intermediate`, and the RNG kinds
in :mod:`flaxen.nnx.rnglib`. Filters select state by these types.

:class:`VariableState` is the immutable, pytree-friendly snapshot of a Variable that
:class:`~flaxen.nnx.State` holds at its leaves; its only pytree child is ``value``.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> w = nnx.Param(jnp.ones(3), sharding=('model',))
>>> w.value.shape, w.sharding
((3,), ('model',))
>>> vs = w.to_state()
>>> vs.type is nnx.Param, vs.sharding
(True, ('model',))
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.errors import InvalidNNXValueError, TraceContextError
from flaxen.nnx import _trace, _treescope

A = tp.TypeVar("A")

_HOOK_NAMES = (
    "set_value_hooks",
    "get_value_hooks",
    "create_value_hooks",
    "add_axis_hooks",
    "remove_axis_hooks",
)


def _as_hooks(h: tp.Any) -> tuple:
    if h is None:
        return ()
    if callable(h):
        return (h,)
    return tuple(h)


class Empty:
    """Marks a Variable slot whose value is absent (see :meth:`GraphDef.make_empty`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Empty"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Empty)

    def __hash__(self) -> int:
        return hash(Empty)


jax.tree_util.register_pytree_node(Empty, lambda e: ((), None), lambda aux, c: EMPTY)
EMPTY = Empty()


class VariableMetadata(tp.Generic[A]):
    """An initializer's result that carries metadata and hooks for the Variable built from it."""

    __slots__ = ("raw_value", "hooks", "metadata")

    def __init__(
        self,
        raw_value: A,
        set_value_hooks: tp.Any = (),
        get_value_hooks: tp.Any = (),
        create_value_hooks: tp.Any = (),
        add_axis_hooks: tp.Any = (),
        remove_axis_hooks: tp.Any = (),
        metadata: tp.Mapping[str, tp.Any] | None = None,
    ) -> None:
        self.raw_value = raw_value
        self.hooks = {
            "set_value_hooks": _as_hooks(set_value_hooks),
            "get_value_hooks": _as_hooks(get_value_hooks),
            "create_value_hooks": _as_hooks(create_value_hooks),
            "add_axis_hooks": _as_hooks(add_axis_hooks),
            "remove_axis_hooks": _as_hooks(remove_axis_hooks),
        }
        self.metadata = dict(metadata or {})

    def __repr__(self) -> str:
        return f"VariableMetadata(raw_value={self.raw_value!r}, metadata={self.metadata!r})"


class Variable(tp.Generic[A]):
    """A mutable box for one value, typed by its subclass, with metadata as attributes.

    Hooks (each a callable or a tuple of them) let metadata-aware code react:
    ``create_value_hooks`` / ``set_value_hooks`` / ``get_value_hooks`` get
    ``(variable, value)`` and return the value to use; ``add_axis_hooks`` /
    ``remove_axis_hooks`` get ``(variable, axis_name, axis_index)``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> v = nnx.Variable(jnp.zeros(2), tag='x')
    >>> v.value = v.value + 1
    >>> v.value.tolist(), v.tag
    ([1.0, 1.0], 'x')
    """

    __slots__ = ("raw_value", "_trace_state", "_var_metadata")
    __treescope_repr__ = _treescope.variable_repr

    def __init_subclass__(cls, **kwargs: tp.Any) -> None:
        super().__init_subclass__(**kwargs)
        _register_variable_pytree(cls)

    def __init__(
        self,
        value: A | VariableMetadata[A],
        set_value_hooks: tp.Any = (),
        get_value_hooks: tp.Any = (),
        create_value_hooks: tp.Any = (),
        add_axis_hooks: tp.Any = (),
        remove_axis_hooks: tp.Any = (),
        **metadata: tp.Any,
    ) -> None:
        setter = object.__setattr__
        if isinstance(value, VariableMetadata):
            base = dict(value.metadata)
            base.update(metadata)
            metadata = base
            for name, hooks in value.hooks.items():
                if hooks:
                    metadata[name] = hooks
            value = value.raw_value
        for name, hooks in zip(
            _HOOK_NAMES,
            (set_value_hooks, get_value_hooks, create_value_hooks, add_axis_hooks,
             remove_axis_hooks),
        ):
            if hooks:
                metadata[name] = metadata.get(name, ()) + _as_hooks(hooks)
        setter(self, "_var_metadata", metadata)
        setter(self, "_trace_state", _trace.current_trace())
        if metadata and "create_value_hooks" in metadata:
            for hook in metadata["create_value_hooks"]:
                value = hook(self, value)
        setter(self, "raw_value", value)

    # -- metadata as attributes ------------------------------------------------------------
    def __getattr__(self, name: str) -> tp.Any:
        # only called when normal lookup fails, so slots and methods stay fast
        try:
            return object.__getattribute__(self, "_var_metadata")[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute or metadata {name!r}; "
                f"its metadata keys are {sorted(self._var_metadata)}."
            ) from None

    def __setattr__(self, name: str, value: tp.Any) -> None:
        if name == "value":
            object.__setattr__(self, name, value)  # goes through the property
            return
        self._check_trace(name)
        if name in Variable.__slots__:
            object.__setattr__(self, name, value)
        else:
            self._var_metadata[name] = value
        _trace.bump()

    def __delattr__(self, name: str) -> None:
        self._check_trace(name)
        if name in self._var_metadata:
            del self._var_metadata[name]
            _trace.bump()
        else:
            object.__delattr__(self, name)

    def _check_trace(self, what: str) -> None:
        if self._trace_state is not _trace.current_trace():
            raise TraceContextError(
                f"Cannot set {what!r} of a {type(self).__name__} created under a different JAX "
                "trace (it was probably captured by closure inside a transform). Pass the "
                "module as an argument of the nnx transform instead, so its state is traced."
            )

    def get_metadata(self) -> dict[str, tp.Any]:
        return dict(self._var_metadata)

    # -- value -----------------------------------------------------------------------------
    @property
    def value(self) -> A:
        meta = self._var_metadata
        if meta and "get_value_hooks" in meta:
            value = self.raw_value
            for hook in meta["get_value_hooks"]:
                value = hook(self, value)
            return value
        return self.raw_value

    @value.setter
    def value(self, value: A) -> None:
        if isinstance(value, Variable):
            raise InvalidNNXValueError(
                "",
                f"Cannot assign a {type(value).__name__} as the value of a "
                f"{type(self).__name__}; assign its .value instead."
            )
        if self._trace_state is not _trace.current_trace():
            self._check_trace("value")
        meta = self._var_metadata
        if meta and "set_value_hooks" in meta:
            for hook in meta["set_value_hooks"]:
                value = hook(self, value)
        object.__setattr__(self, "raw_value", value)

    # -- copies and states -----------------------------------------------------------------
    def replace(self, value: tp.Any = EMPTY, **metadata: tp.Any) -> Variable:
        """A new Variable of the same type with ``value`` and/or metadata replaced."""
        new = object.__new__(type(self))
        meta = dict(self._var_metadata)
        meta.update(metadata)
        object.__setattr__(new, "_var_metadata", meta)
        object.__setattr__(new, "_trace_state", _trace.current_trace())
        object.__setattr__(new, "raw_value", self.raw_value if value is EMPTY else value)
        return new

    def copy(self) -> Variable:
        return self.replace()

    def copy_from(self, other: Variable) -> None:
        """Makes this Variable hold ``other``'s value and metadata (in place)."""
        self._check_trace("value")
        object.__setattr__(self, "raw_value", other.raw_value)
        object.__setattr__(self, "_var_metadata", dict(other._var_metadata))
        _trace.bump()

    def copy_from_state(self, variable_state: VariableState) -> None:
        self._check_trace("value")
        object.__setattr__(self, "raw_value", variable_state.value)
        object.__setattr__(self, "_var_metadata", dict(variable_state._var_metadata))
        _trace.bump()

    def to_state(self) -> VariableState:
        return _make_state(type(self), self.raw_value, self._var_metadata)

    @classmethod
    def state(cls, value: tp.Any, **metadata: tp.Any) -> VariableState:
        return _make_state(cls, value, metadata)

    def add_axis(self, axis_name: tp.Any, axis_index: int) -> None:
        for hook in self._var_metadata.get("add_axis_hooks", ()):
            hook(self, axis_name, axis_index)

    def remove_axis(self, axis_name: tp.Any, axis_index: int) -> None:
        for hook in self._var_metadata.get("remove_axis_hooks", ()):
            hook(self, axis_name, axis_index)

    def __eq__(self, other: object) -> bool:
        return (
            type(self) is type(other)
            and self._var_metadata == other._var_metadata  # type: ignore[attr-defined]
            and _leaves_equal(self.raw_value, other.raw_value)  # type: ignore[attr-defined]
        )

    __hash__ = object.__hash__  # identity: a Variable is a mutable object in the graph

    def __repr__(self) -> str:
        from flaxen.nnx.visualization import variable_repr

        return variable_repr(type(self).__name__, self.raw_value, self._var_metadata)

    # Python-level sugar so `param[...]` and arithmetic behave like the array
    def __getitem__(self, item: tp.Any) -> tp.Any:
        return self.value[item]

    def __setitem__(self, item: tp.Any, value: tp.Any) -> None:
        if item is Ellipsis:
            self.value = value
        else:
            self.value = self.value.at[item].set(value)

    def __jax_array__(self) -> tp.Any:
        return self.value

    def __getstate__(self) -> dict:
        return {"raw_value": self.raw_value, "_var_metadata": self._var_metadata}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "raw_value", state["raw_value"])
        object.__setattr__(self, "_var_metadata", state["_var_metadata"])
        object.__setattr__(self, "_trace_state", _trace.current_trace())


class _VarAux:
    """Hashable tree-structure data of a Variable pytree (type plus metadata)."""

    __slots__ = ("type", "metadata", "_hash")

    def __init__(self, typ: type, metadata: dict) -> None:
        self.type = typ
        self.metadata = metadata
        try:
            self._hash = hash((typ, tuple(sorted(metadata.items()))))
        except TypeError:
            self._hash = hash(typ)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _VarAux) and self.type is other.type
                                 and self.metadata == other.metadata)


def _var_flatten(v: Variable) -> tuple[tuple, _VarAux]:
    return (v.raw_value,), _VarAux(type(v), v._var_metadata)


def _var_flatten_with_keys(v: Variable) -> tuple[tuple, _VarAux]:
    return ((jax.tree_util.GetAttrKey("value"), v.raw_value),), _VarAux(type(v),
                                                                       v._var_metadata)


def _var_unflatten(aux: _VarAux, children: tp.Sequence[tp.Any]) -> Variable:
    var = object.__new__(aux.type)
    object.__setattr__(var, "_var_metadata", dict(aux.metadata))
    object.__setattr__(var, "_trace_state", _trace.current_trace())
    object.__setattr__(var, "raw_value", children[0])
    return var


def _register_variable_pytree(cls: type) -> None:
    # A Variable is a pytree whose one child is its value, so jax.numpy functions (which
    # no longer call __jax_array__ while tracing) accept it: jnp.dot(x, module.kernel).
    jax.tree_util.register_pytree_with_keys(
        cls, _var_flatten_with_keys, _var_unflatten, flatten_func=_var_flatten)


_register_variable_pytree(Variable)


def _leaves_equal(a: tp.Any, b: tp.Any) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb:
        return False
    for x, y in zip(la, lb):
        if x is y:
            continue
        if hasattr(x, "shape") or hasattr(y, "shape"):
            import numpy as np

            if not (np.shape(x) == np.shape(y) and bool(np.all(np.asarray(x) == np.asarray(y)))):
                return False
        elif x != y:
            return False
    return True


class Param(Variable[A]):
    """A trainable parameter: what ``nnx.grad`` differentiates by default."""

    __slots__ = ()


class BatchStat(Variable[A]):
    """A running statistic (e.g. BatchNorm mean/var), updated in the forward pass."""

    __slots__ = ()


class Cache(Variable[A]):
    """A cache, e.g. the key/value cache of autoregressive attention."""

    __slots__ = ()


class Intermediate(Variable[A]):
    """A value recorded with ``Module.sow`` during a call."""

    __slots__ = ()


class VariableState(tp.Generic[A]):
    """Immutable snapshot of a Variable: ``type``, ``value`` and metadata (as attributes).

    A pytree whose only child is ``value``; ``type`` and metadata travel in the tree
    structure, so ``jax.tree_util.tree_map`` over a State maps the arrays.
    """

    __slots__ = ("type", "value", "_var_metadata")
    __treescope_repr__ = _treescope.variable_state_repr
    _stands_for_type = True  # filters match it by `.type` (see filterlib)

    def __init__(self, type: type[Variable], value: A, **metadata: tp.Any) -> None:  # noqa: A002
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "_var_metadata", metadata)

    def __getattr__(self, name: str) -> tp.Any:
        try:
            return object.__getattribute__(self, "_var_metadata")[name]
        except KeyError:
            raise AttributeError(
                f"VariableState has no attribute or metadata {name!r}; its metadata keys are "
                f"{sorted(self._var_metadata)}."
            ) from None

    def __setattr__(self, name: str, value: tp.Any) -> None:
        if name == "value":  # allowed: State trees are rebuilt functionally, but users do this
            object.__setattr__(self, name, value)
        else:
            self._var_metadata[name] = value

    def get_metadata(self) -> dict[str, tp.Any]:
        return dict(self._var_metadata)

    def replace(self, value: tp.Any) -> VariableState:
        return _make_state(self.type, value, self._var_metadata)

    def to_variable(self) -> Variable:
        var = object.__new__(self.type)
        object.__setattr__(var, "_var_metadata", dict(self._var_metadata))
        object.__setattr__(var, "_trace_state", _trace.current_trace())
        object.__setattr__(var, "raw_value", self.value)
        return var

    def add_axis(self, axis_name: tp.Any, axis_index: int) -> None:
        for hook in self._var_metadata.get("add_axis_hooks", ()):
            hook(self, axis_name, axis_index)

    def remove_axis(self, axis_name: tp.Any, axis_index: int) -> None:
        for hook in self._var_metadata.get("remove_axis_hooks", ()):
            hook(self, axis_name, axis_index)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, VariableState)
            and self.type is other.type
            and self._var_metadata == other._var_metadata
            and _leaves_equal(self.value, other.value)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        from flaxen.nnx.visualization import variable_state_repr

        return variable_state_repr(self)


def _make_state(typ: type, value: tp.Any, metadata: dict) -> VariableState:
    vs = object.__new__(VariableState)
    object.__setattr__(vs, "type", typ)
    object.__setattr__(vs, "value", value)
    object.__setattr__(vs, "_var_metadata", dict(metadata) if metadata else {})
    return vs


class _StateAux:
    """Hashable tree-structure data of a VariableState (type plus frozen metadata)."""

    __slots__ = ("type", "metadata", "_hash")

    def __init__(self, typ: type, metadata: dict) -> None:
        self.type = typ
        self.metadata = metadata
        try:
            self._hash = hash((typ, tuple(sorted(metadata.items()))))
        except TypeError:
            self._hash = hash(typ)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _StateAux)
            and self.type is other.type
            and self.metadata == other.metadata
        )

    def __repr__(self) -> str:
        return f"{self.type.__name__}{self.metadata or ''}"


def _vs_flatten(vs: VariableState) -> tuple[tuple, _StateAux]:
    return (vs.value,), _StateAux(vs.type, vs._var_metadata)


def _vs_flatten_with_keys(vs: VariableState) -> tuple[tuple, _StateAux]:
    return ((jax.tree_util.GetAttrKey("value"), vs.value),), _StateAux(vs.type, vs._var_metadata)


def _vs_unflatten(aux: _StateAux, children: tp.Sequence[tp.Any]) -> VariableState:
    vs = object.__new__(VariableState)
    object.__setattr__(vs, "type", aux.type)
    object.__setattr__(vs, "value", children[0])
    object.__setattr__(vs, "_var_metadata", dict(aux.metadata))
    return vs


jax.tree_util.register_pytree_with_keys(
    VariableState, _vs_flatten_with_keys, _vs_unflatten, flatten_func=_vs_flatten
)


def with_metadata(
    initializer: tp.Callable[..., A],
    set_value_hooks: tp.Any = (),
    get_value_hooks: tp.Any = (),
    create_value_hooks: tp.Any = (),
    add_axis_hooks: tp.Any = (),
    remove_axis_hooks: tp.Any = (),
    **metadata: tp.Any,
) -> tp.Callable[..., VariableMetadata[A]]:
    """Wraps ``initializer`` so the Variable created from its result carries ``metadata``.

    >>> import jax
    >>> from flaxen import nnx
    >>> init = nnx.with_metadata(jax.nn.initializers.ones, sharding=(None, 'model'))
    >>> p = nnx.Param(init(jax.random.key(0), (2, 3)))
    >>> p.sharding
    (None, 'model')
    """

    def wrapped(*args: tp.Any, **kwargs: tp.Any) -> VariableMetadata[A]:
        return VariableMetadata(
            initializer(*args, **kwargs),
            set_value_hooks=set_value_hooks,
            get_value_hooks=get_value_hooks,
            create_value_hooks=create_value_hooks,
            add_axis_hooks=add_axis_hooks,
            remove_axis_hooks=remove_axis_hooks,
            metadata=metadata,
        )

    return wrapped
