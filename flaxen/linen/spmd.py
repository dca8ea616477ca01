"""Logical axis names for SPMD: rules that map them to mesh axes, constraints, and boxes.

A model annotates its arrays with *logical* dimension names (``'batch'``, ``'embed'``,
``'mlp'``); a list of rules binds each name to a mesh axis (or ``None``, unsharded), so one
model can be laid out differently on different meshes without touching its code.

>>> import flaxen.linen as nn
>>> rules = (('batch', 'data'), ('embed', 'model'))
>>> nn.logical_to_mesh_axes(('batch', 'length', 'embed'), rules)
P('data', None, 'model')
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen import struct
from flaxen.core import meta
from flaxen.core import spmd as _core_spmd
from flaxen.core.spmd import _check_rules, logical_axis_rules, set_logical_axis_rules

LogicalNames = tuple[str | None, ...]
LogicalRules = Sequence[tuple[str, str | tuple[str, ...] | None]]
LogicalPartitionSpec = Any  # a PartitionSpec (or tuple) of logical names
LogicalPartitionSpecPytree = Any


def _freeze_rules(rules: LogicalRules | None) -> tuple:
    if rules is None:
        return ()
    _check_rules(rules)
    return tuple((name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in rules)


def get_logical_axis_rules() -> tuple:
    """Returns the rules in force (shared with ``flaxen.core.spmd`` and NNX), as a tuple.

    >>> import flaxen.linen as nn
    >>> with nn.logical_axis_rules([('batch', 'data')]):
    ...     nn.get_logical_axis_rules()
    (('batch', 'data'),)
    """
    return _freeze_rules(_core_spmd.get_logical_axis_rules())


class _Unassigned:
    """Marks a named dimension that no rule could place (distinct from an explicit None)."""

    def __repr__(self):
        return "UNASSIGNED"


_UNASSIGNED = _Unassigned()


_UNCONSTRAINED = PartitionSpec.UNCONSTRAINED


def _mesh_axes_of(mesh_axes: Any) -> tuple[str, ...]:
    # UNCONSTRAINED lets XLA choose, so it claims no mesh axis and may repeat.
    if mesh_axes is None or mesh_axes is _UNCONSTRAINED:
        return ()
    if isinstance(mesh_axes, str):
        return (mesh_axes,)
    return tuple(a for a in mesh_axes if a is not None and a is not _UNCONSTRAINED)


def _assign(array_dim_names: Sequence[str | None], rules: tuple) -> list[Any]:
    names = list(array_dim_names)
    seen = [n for n in names if isinstance(n, str)]
    dupes = sorted({n for n in seen if seen.count(n) > 1})
    if dupes:
        raise ValueError(
            f"Unsupported: Dimensions {tuple(dupes)} occur more than once in array names "
            f"{tuple(names)}; give each dimension of one array its own logical name."
        )
    # only string names are looked up; None and PartitionSpec.UNCONSTRAINED pass through
    result: list[Any] = [_UNASSIGNED if isinstance(n, str) else n for n in names]
    position = {n: i for i, n in enumerate(names) if isinstance(n, str)}
    used: set[str] = set()
    for logical, mesh_axes in rules:
        i = position.get(logical)
        if i is None or result[i] is not _UNASSIGNED:
            continue
        axes = _mesh_axes_of(mesh_axes)
        if any(a in used for a in axes):
            continue  # that mesh axis already shards another dimension: try a later rule
        result[i] = mesh_axes
        used.update(axes)
    return result


def logical_to_mesh_axes(
    array_dim_names: Sequence[str | None] | None, rules: LogicalRules | None = None
) -> PartitionSpec | None:
    """Maps the logical names of one array's dimensions to a ``PartitionSpec`` of mesh axes.

    Rules are tried in order; a dimension takes a rule's mesh axis when the dimension is still
    unplaced and the mesh axis is not used by another dimension of the same array. Names that
    no rule places are left unsharded (``None``). ``rules=None`` uses the rules in force.

    >>> rules = (('batch', 'X'), ('features', 'X'), ('heads', 'Y'), ('batch', 'Z'))
    >>> logical_to_mesh_axes(('batch', 'length', 'heads', 'features'), rules)
    P('X', None, 'Y', None)
    """
    if array_dim_names is None:
        return None
    rules = get_logical_axis_rules() if rules is None else _freeze_rules(rules)
    assigned = _assign(array_dim_names, rules)
    return PartitionSpec(*(None if a is _UNASSIGNED else a for a in assigned))


def _is_logical_spec(x: Any) -> bool:
    return x is None or (
        isinstance(x, (tuple, PartitionSpec))
        and all(isinstance(e, str) or e is None or e is _UNCONSTRAINED for e in x)
    )


def logical_to_mesh(tree: LogicalPartitionSpecPytree, rules: LogicalRules | None = None) -> Any:
    """Applies :func:`logical_to_mesh_axes` to every logical spec in a pytree."""
    return jax.tree_util.tree_map(
        lambda spec: logical_to_mesh_axes(spec, rules), tree, is_leaf=_is_logical_spec
    )


def _check_mesh_axes(spec: PartitionSpec, mesh: Mesh, what: str) -> None:
    known = set(mesh.axis_names)
    for entry in spec:
        for axis in _mesh_axes_of(entry):
            if axis not in known:
                raise ValueError(
                    f"{what} maps to mesh axis {axis!r}, which the mesh does not have "
                    f"(its axes are {tuple(mesh.axis_names)}). Fix the logical axis rules "
                    "or build the mesh with that axis name."
                )


def logical_to_mesh_sharding(
    tree: LogicalPartitionSpecPytree, mesh: Mesh, rules: LogicalRules | None = None
) -> Any:
    """Turns a pytree of logical specs into ``NamedSharding``s on ``mesh``."""

    def one(spec):
        if spec is None:
            return None
        mesh_spec = logical_to_mesh_axes(spec, rules)
        _check_mesh_axes(mesh_spec, mesh, f"Logical spec {tuple(spec)}")
        return NamedSharding(mesh, mesh_spec)

    return jax.tree_util.tree_map(one, tree, is_leaf=_is_logical_spec)


class RulesFallback(enum.Enum):
    """What ``with_logical_constraint`` does with a name that no rule places."""

    AXIS_IS_UNSHARDED = "axis_is_unsharded"
    RAISE_ERROR = "raise_error"
    NO_CONSTRAINT = "no_constraint"


def _context_mesh() -> jax.sharding.AbstractMesh | None:
    # The legacy `with mesh:` context is not consulted, as in Flax 0.12.8.
    return meta.get_global_mesh()


def _with_sharding_constraint(x: Any, axis_resources: PartitionSpec | None,
                              mesh: Mesh | None = None) -> Any:
    """``jax.lax.with_sharding_constraint(x, axis_resources)`` on ``mesh`` (or the mesh in
    context); returns ``x`` unchanged when there is no mesh, so one-device runs are untouched.
    """
    if mesh is None and _context_mesh() is None:
        return x
    if axis_resources is None:
        return x
    ndim = getattr(x, "ndim", None)
    if ndim is not None and len(axis_resources) > ndim:
        raise ValueError(
            f"with_logical_constraint: the array has {ndim} dimensions (shape {x.shape}) "
            f"but the {len(axis_resources)} logical names resolve to {axis_resources}; give "
            "one name per dimension."
        )
    if mesh is not None:
        _check_mesh_axes(axis_resources, mesh, f"PartitionSpec {axis_resources}")
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, axis_resources))
    return jax.lax.with_sharding_constraint(x, axis_resources)


def _constrain_one(x, names, rules: tuple, mesh, fallback: RulesFallback):
    if names is None:
        return x
    ndim = getattr(x, "ndim", None)
    if ndim is not None and len(names) > ndim:
        raise ValueError(
            f"with_logical_constraint: the array has {ndim} dimensions (shape {x.shape}) "
            f"but {len(names)} logical names {tuple(names)} were given; give one name per "
            "dimension."
        )
    assigned = _assign(tuple(names), rules)
    missing = [n for n, a in zip(names, assigned) if a is _UNASSIGNED]
    if missing:
        if fallback is RulesFallback.RAISE_ERROR:
            raise ValueError(
                f"Axis names {tuple(names)} did not match a rule: no rule places "
                f"{tuple(missing)} (rules in force: {rules}). Add a rule for each name, "
                "e.g. nn.logical_axis_rules([(name, 'mesh_axis' or None), ...]), or use "
                "fallback=RulesFallback.AXIS_IS_UNSHARDED."
            )
        if fallback is RulesFallback.NO_CONSTRAINT:
            return x
    spec = PartitionSpec(*(None if a is _UNASSIGNED else a for a in assigned))
    # looked up at call time, so tests may replace it
    return _with_sharding_constraint(x, spec, mesh=mesh)


def with_logical_constraint(
    x: Any,
    logical_axis_resources: LogicalPartitionSpecPytree,
    rules: LogicalRules | None = None,
    mesh: Mesh | None = None,
    fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
) -> Any:
    """``jax.lax.with_sharding_constraint`` with logical axis names.

    A no-op when no rules are in force (none given and none set) or the names are ``None``,
    and outside any mesh (none given and none in context), so the same model runs on one
    device untouched. ``fallback`` says what to do with a name that no rule places.

    >>> import jax.numpy as jnp
    >>> x = jnp.ones((2, 3))
    >>> with_logical_constraint(x, ('batch', 'embed'), rules=[('batch', 'data')]) is x
    True
    """
    rules = get_logical_axis_rules() if rules is None else _freeze_rules(rules)
    if not rules or logical_axis_resources is None:
        return x
    if _is_logical_spec(logical_axis_resources):
        return jax.tree_util.tree_map(
            lambda leaf: _constrain_one(leaf, logical_axis_resources, rules, mesh, fallback), x
        )
    return jax.tree_util.tree_map(
        lambda leaf, names: _constrain_one(leaf, names, rules, mesh, fallback),
        x,
        logical_axis_resources,
        is_leaf=lambda v: v is None,
    )


class LogicallyPartitioned(meta.Partitioned):
    """A :class:`Partitioned` box whose names are logical and resolved through ``rules``.

    ``unbox`` resolves the names with ``rules`` (or the rules in force when ``rules`` is
    None). ``get_partition_spec`` and ``get_sharding(mesh)`` are the base class's: as in
    Flax they use the logical names as they are (translate them with
    :func:`logical_to_mesh_sharding`).
    """

    rules: LogicalRules | None = struct.field(default=None, pytree_node=False)

    def unbox(self, apply_constraint: bool = True) -> Any:
        if apply_constraint and (self.mesh is not None or _context_mesh() is not None):
            return with_logical_constraint(
                self.value, self.get_partition_spec(), rules=self.rules, mesh=self.mesh
            )
        return self.value


def with_logical_partitioning(
    fn: Callable[..., Any],
    names: LogicalNames,
    mesh: Mesh | None = None,
    rules: LogicalRules | None = None,
) -> Callable[..., LogicallyPartitioned]:
    """Wraps an initializer so it returns a :class:`LogicallyPartitioned` box.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> init = nn.with_logical_partitioning(nn.initializers.ones, ('embed', 'mlp'))
    >>> box = init(jax.random.key(0), (2, 3))
    >>> box.names, box.value.shape
    (('embed', 'mlp'), (2, 3))
    """

    def wrapper(*args, **kwargs):
        return LogicallyPartitioned(fn(*args, **kwargs), names, mesh=mesh, rules=rules)

    return wrapper


__all__ = [
    "LogicallyPartitioned",
    "RulesFallback",
    "get_logical_axis_rules",
    "logical_axis_rules",
    "logical_to_mesh",
    "logical_to_mesh_axes",
    "logical_to_mesh_sharding",
    "set_logical_axis_rules",
    "with_logical_constraint",
    "with_logical_partitioning",
]

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import Array, ArrayPytree  # noqa: E402, F401
