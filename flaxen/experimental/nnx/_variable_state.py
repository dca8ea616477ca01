"""The Flax 0.8.3 ``VariableState``: an immutable snapshot of a Variable (the 0.8.3 face).

Today's ``flax.nnx`` folded VariableState into :class:`~flaxen.nnx.Variable` (its ``State``
leaves are Variables, and ``nnx.VariableState`` is ``Variable``); this face keeps the class,
which its ``split``, ``state`` and ``pop`` put at a State's leaves. Its only pytree child is
``value``; ``type`` and metadata travel in the tree structure. The engine underneath knows it
only through the snapshot protocol of :mod:`flaxen.nnx._snapshots`.

>>> import jax.numpy as jnp
>>> from flaxen.experimental import nnx
>>> vs = nnx.VariableState(nnx.Param, jnp.ones(2), tag='w')
>>> vs.type is nnx.Param, vs.tag, vs.value.shape
(True, 'w', (2,))
>>> type(VariableState.of(nnx.Param(1.0))).__name__
'VariableState'
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.nnx import _snapshots, _trace, _treescope
from flaxen.nnx.variablelib import _DEFAULT_REQUIRED, _leaves_equal, _ref_read

A = tp.TypeVar("A")

# metadata every today's Variable carries; a 0.8.3 snapshot keeps them (so split/merge round
# trips give back the same Variables) but hides them from get_metadata, == and repr
REQUIRED_METADATA = tuple(_DEFAULT_REQUIRED)


class VariableState(tp.Generic[A]):
    """Immutable snapshot of a Variable: ``type``, ``value`` and metadata (as attributes).

    A pytree whose only child is ``value``; ``type`` and metadata travel in the tree
    structure, so ``jax.tree_util.tree_map`` over a State maps the arrays.
    """

    __slots__ = ("type", "value", "_var_metadata")
    _stands_for_type = True  # filters match it by `.type` (see filterlib)

    def __init__(self, type: type, value: A, **metadata: tp.Any) -> None:  # noqa: A002
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "_var_metadata", metadata)

    def __getattr__(self, name: str) -> tp.Any:
        meta = object.__getattribute__(self, "_var_metadata")
        if name == "sharding" and name not in meta and "out_sharding" in meta:
            return meta["out_sharding"]  # today's Variables store the 0.8.3 `sharding` so
        try:
            return meta[name]
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
        # the hijax/ref/eager_sharding entries a today's Variable carries are not 0.8.3 data
        return without_required(self._var_metadata)

    def replace(self, value: tp.Any) -> VariableState:
        return _make_state(self.type, value, self._var_metadata)

    @classmethod
    def _from_parts(cls, typ: type, value: tp.Any, metadata: dict) -> VariableState:
        return _make_state(typ, value, metadata)

    @classmethod
    def of(cls, variable: tp.Any) -> VariableState:
        """The snapshot of ``variable`` (what ``Variable.to_state()`` gave in Flax 0.8.3),
        its value read out of a ``jax.Ref``."""
        value = jax.tree_util.tree_map(_ref_read, variable.raw_value)
        return _make_state(type(variable), value, variable._var_metadata)

    def to_variable(self) -> tp.Any:
        var = object.__new__(self.type)
        object.__setattr__(var, "_var_metadata", with_required(self._var_metadata))
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
            and without_required(self._var_metadata) == without_required(other._var_metadata)
            and _leaves_equal(self.value, other.value)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        lines = [f"  type={self.type.__name__}", f"  value={_indent(repr(self.value))}"]
        for k, v in without_required(self._var_metadata).items():
            lines.append(f"  {k}={_indent(repr(v))}")
        return "VariableState(\n" + ",\n".join(lines) + "\n)"

    def __treescope_repr__(self, path: str | None, subtree_renderer: tp.Any) -> tp.Any:
        from treescope import formatting_util  # optional dependency: only when rendering

        attributes = {"type": self.type, "value": self.value,
                      **without_required(self._var_metadata)}
        return _treescope.render_object_constructor(
            type(self), attributes, path, subtree_renderer,
            color=formatting_util.color_from_string(self.type.__qualname__))


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


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


_snapshots.register(VariableState)
jax.tree_util.register_pytree_with_keys(
    VariableState, _vs_flatten_with_keys,
    _vs_unflatten,  # type: ignore[arg-type]  # jax passes the children as a tuple
    flatten_func=_vs_flatten,
)


def with_required(metadata: dict) -> dict:
    """``metadata`` plus the default hijax/ref/eager_sharding keys where missing."""
    out = dict(_DEFAULT_REQUIRED)
    out.update(metadata)
    return out


def without_required(metadata: dict) -> dict:
    """``metadata`` less the hijax/ref/eager_sharding keys (what a 0.8.3 snapshot keeps)."""
    return {k: v for k, v in metadata.items() if k not in REQUIRED_METADATA}
