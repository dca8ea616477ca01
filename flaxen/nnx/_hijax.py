"""Hijax Variables: Variables that JAX transforms update in place (``hijax=True``).

A :class:`HijaxVariable` keeps each array leaf of its value in a ``jax.Ref``. Passed into
``jax.jit``, ``jax.grad``, ``jax.lax.scan`` (as an argument or captured by closure), writes
through ``v[...] = x`` go to the Refs, so the caller's Variable sees them after the call,
with no ``nnx`` transform involved. ``type(v)`` is ``HijaxVariable``; ``isinstance(v,
nnx.Param)`` and filters see the Variable type it was made from (``v.var_type``).
``ref=False`` hijax Variables report plain arrays from ``get_raw_value()``; ``ref=True``
ones report the Refs.

flaxen builds this on ``jax.Ref`` rather than on JAX's experimental hijax types: a change
of the value's tree structure inside a traced function (a new dict key added under
``jax.jit``) stays local to the trace.

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> v = nnx.Param(jnp.array(1), hijax=True)
>>> @jax.jit
... def bump(v):
...     v[...] += 1
>>> bump(v); bump(v)
>>> int(v[...]), isinstance(v, nnx.Param), type(v).__name__
(3, True, 'HijaxVariable')
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

from flaxen.nnx import _trace
from flaxen.nnx import variablelib as variables
from flaxen.nnx._variable_pytree import own_metadata as _own_metadata
from flaxen.nnx.variablelib import MISSING, Variable, VariableMeta, is_array_ref

A = tp.TypeVar("A")
_TYPE_KEY = "_var_type"  # hidden metadata entry: the Variable type a HijaxVariable stands for


def _to_ref(x: tp.Any) -> tp.Any:
    if is_array_ref(x):
        return x
    if isinstance(x, (jax.Array, np.ndarray, np.generic, int, float, complex, bool)):
        return jax.new_ref(x)
    return x


def _read(x: tp.Any) -> tp.Any:
    return x[...] if is_array_ref(x) else x


def _refs(value: tp.Any) -> tp.Any:
    return jax.tree_util.tree_map(_to_ref, value)


def _values(raw: tp.Any) -> tp.Any:
    return jax.tree_util.tree_map(_read, raw)


@dataclasses.dataclass(frozen=True)
class VariableQDD:
    """The type state of a hijax Variable: its leaves' abstract values, its tree structure
    (a Variable node and its metadata) and its Variable type.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> qdd = nnx.Param(jnp.ones(2), hijax=True).type_state()
    >>> qdd.leaf_avals[0].shape, qdd.var_type.__name__
    ((2,), 'Param')
    """

    leaf_avals: tuple[tp.Any, ...]
    treedef: tp.Any
    var_type: type

    def normalize(self) -> VariableQDD:
        """The same state with strongly typed leaf types (weak types dropped)."""
        avals = tuple(a.update(weak_type=False) if getattr(a, "weak_type", False) else a
                      for a in self.leaf_avals)
        return VariableQDD(avals, self.treedef, self.var_type)

    def to_tangent_qdd(self) -> VariableQDD:
        """The type state of a tangent of such a Variable (tangent leaf types)."""
        return VariableQDD(tuple(a.to_tangent_aval() for a in self.leaf_avals),
                           self.treedef, self.var_type)


class HijaxVariableMeta(VariableMeta):
    """Metaclass of :class:`HijaxVariable` (a Variable metaclass: hijax isinstance checks)."""


class HijaxVariable(Variable[A], metaclass=HijaxVariableMeta):
    """A Variable whose array leaves live in ``jax.Ref``s (see the module docstring)."""

    _stands_for_type = True  # filters match it by `.type` (its Variable type)

    @staticmethod
    def _hijax_var_type(instance: tp.Any) -> type:
        return instance._var_metadata.get(_TYPE_KEY, Variable)

    @classmethod
    def from_variable(cls, var: Variable) -> HijaxVariable:
        """The hijax form of ``var`` (which keeps its type, value and metadata)."""
        meta = dict(var._var_metadata)
        meta[_TYPE_KEY] = meta.get(_TYPE_KEY, type(var))
        meta["hijax"] = True
        new = object.__new__(cls)
        object.__setattr__(new, "_var_metadata", meta)
        object.__setattr__(new, "_trace_state", _trace.current_trace())
        object.__setattr__(new, "raw_value", _refs(var.raw_value))
        return new

    @classmethod
    def from_metadata(cls, value: tp.Any, metadata: tp.Mapping[str, tp.Any]) -> tp.Any:
        """The hijax Variable of type ``metadata['_var_type']`` (else Variable) holding
        ``value`` with ``metadata``."""
        meta = dict(metadata)
        var_type = meta.pop(_TYPE_KEY, Variable)
        meta["hijax"] = True
        return var_type.from_metadata(value, meta)

    @property
    def var_type(self) -> type:
        return self._var_metadata.get(_TYPE_KEY, Variable)

    @property
    def has_qdd(self) -> bool:
        """Whether its type state may change with updates: ``ref=False`` ones take a value of
        another structure or shape outside traces; ``ref=True`` ones keep their Refs' types."""
        return not self.ref

    def type_state(self) -> VariableQDD:
        """Its current :class:`VariableQDD` (leaf types, tree structure, Variable type)."""
        meta = {k: v for k, v in self._var_metadata.items() if k != _TYPE_KEY}
        plain = self.var_type._new(self.get_raw_value(), meta)  # type: ignore[attr-defined]
        leaves, treedef = jax.tree_util.tree_flatten(plain)
        return VariableQDD(tuple(jax.typeof(x) for x in leaves), treedef, self.var_type)

    def cur_qdd(self) -> VariableQDD:
        """The same as :meth:`type_state`."""
        return self.type_state()

    def __divmod__(self, other: tp.Any) -> tp.Any:
        return divmod(self.get_value(), other.get_value() if isinstance(other, Variable)
                      else other)

    def __rdivmod__(self, other: tp.Any) -> tp.Any:
        return divmod(other, self.get_value())

    @property
    def type(self) -> type:
        return self.var_type

    def get_metadata(self, name: str | None = None, default: tp.Any = MISSING, *,
                     exclude_required: bool | None = None) -> tp.Any:
        if name == _TYPE_KEY:
            raise KeyError(name)
        out = super().get_metadata(name, default, exclude_required=exclude_required)
        if name is None:
            out.pop(_TYPE_KEY, None)
        return out

    def set_metadata(self, *args: tp.Any, **kwargs: tp.Any) -> None:
        var_type = self.var_type
        super().set_metadata(*args, **kwargs)
        _own_metadata(self)[_TYPE_KEY] = var_type

    def get_raw_value(self) -> tp.Any:
        return self.raw_value if self.ref else _values(self.raw_value)

    def get_value(self, *, index: tp.Any = MISSING) -> tp.Any:
        raw = self.raw_value
        if is_array_ref(raw):
            # Refs index like arrays only for basic slices: read, then index the array
            value = raw[...] if index is MISSING or index is Ellipsis else raw[...][index]
        else:
            value = _values(raw)
            if index is not MISSING and not (index is Ellipsis
                                             and not hasattr(value, "__getitem__")):
                value = value[index]
        meta = self._var_metadata
        if "get_value_hooks" in meta:
            for hook in meta["get_value_hooks"]:
                value = hook(self, value)
        return value

    def set_value(self, value: tp.Any, *, index: tp.Any = MISSING) -> None:
        if isinstance(value, Variable):
            raise variables.InvalidNNXValueError(
                "", f"Cannot assign a {type(value).__name__} as the value of a hijax "
                f"{self.var_type.__name__}; assign its .value instead (`v[...] = other[...]`).")
        meta = self._var_metadata
        if "set_value_hooks" in meta:
            for hook in meta["set_value_hooks"]:
                value = hook(self, value)
        raw = self.raw_value
        if is_array_ref(raw):
            if index is MISSING or index is Ellipsis:
                self._write_whole(raw, value)
            else:
                raw[index] = value
            return
        if index is MISSING or index is Ellipsis:
            old: tp.Any  # jaxlib's PyTreeDef is untyped here
            new: tp.Any
            old, new = jax.tree_util.tree_flatten(raw), jax.tree_util.tree_flatten(value)
            if old[1] == new[1] and all(is_array_ref(r) for r in old[0]):
                for ref, leaf in zip(old[0], new[0]):
                    ref[...] = leaf
            else:  # a new structure: new Refs (seen by the caller only outside traces)
                object.__setattr__(self, "raw_value", _refs(value))
            return
        slot: tp.Any = raw[index] if _has_key(raw, index) else None
        if is_array_ref(slot):
            slot[...] = value
        else:
            raw[index] = _refs(value)

    def _write_whole(self, ref: tp.Any, value: tp.Any) -> None:
        if isinstance(value, (bool, int, float, complex)):  # weakly typed: keep the dtype
            value = jnp.asarray(value, ref.dtype)
        shape, dtype = jnp.shape(value), jnp.result_type(value)
        if shape == ref.shape and dtype == ref.dtype:
            ref[...] = value
        elif not isinstance(ref, jax.core.Tracer):
            # outside a trace the value may take any shape or dtype: a fresh Ref holds it
            object.__setattr__(self, "raw_value", jax.new_ref(value))
        else:  # inside a trace the Ref's type is fixed: broadcast and cast into it
            ref[...] = jnp.broadcast_to(jnp.asarray(value, ref.dtype), ref.shape)

    def copy(self, value: tp.Any = MISSING, *, _copy_ref: bool = True, **updates: tp.Any
             ) -> tp.Any:
        meta = dict(self._var_metadata)
        var_type = meta.pop(_TYPE_KEY, Variable)
        if value is MISSING:
            value = updates.pop("value", MISSING)
        meta.update(updates)
        if value is MISSING:
            value = _values(self.raw_value)
        elif _copy_ref:
            value = _values(value)
        if meta.get("ref"):
            value = jax.tree_util.tree_map(jax.new_ref, value)
        return var_type.from_metadata(value, meta)

    def __repr__(self) -> str:
        from flaxen.nnx.visualization import variable_repr

        meta = {k: v for k, v in self._var_metadata.items()
                if k != _TYPE_KEY and not (k in ("ref", "eager_sharding")
                                           and v == variables._DEFAULT_REQUIRED[k])}
        return variable_repr(self.var_type.__name__, self.get_raw_value(), meta)


def _has_key(container: tp.Any, key: tp.Any) -> bool:
    try:
        container[key]
    except (KeyError, IndexError, TypeError):
        return False
    return True


