"""Logical axis rules shared by Linen and NNX, and sharding helpers (``flax.core.spmd``).

Rules are pairs ``(logical_name, mesh_axes)``: ``('embed', 'model')`` shards every dimension
named ``'embed'`` over the mesh axis ``'model'``. :func:`logical_axis_rules` binds them for a
block; :func:`set_logical_axis_rules` binds them until changed.

>>> from jax.sharding import PartitionSpec as P
>>> with logical_axis_rules((('embed', 'model'),)):
...     apply_rules(P('embed', None), None)
P('model', None)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from flaxen.core import meta
from flaxen.errors import MeshRequiredError

LogicalRules = Sequence[tuple[str, Any]]
Sharding = tuple[Any, ...]


class _AxisRules(threading.local):
    """The rules in force on this thread (each thread starts with none)."""

    def __init__(self) -> None:
        self.rules: Any = ()


_axis_rules = _AxisRules()


def _check_rules(rules: Any) -> None:
    if rules is None:
        return
    if not isinstance(rules, (tuple, list)):
        raise TypeError(
            f"Logical axis rules must be a sequence of (logical_name, mesh_axes) pairs, got "
            f"{type(rules).__name__} {rules!r}; e.g. (('batch', 'data'), ('embed', None))."
        )
    for i, rule in enumerate(rules):
        if not (isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)):
            raise TypeError(
                f"Logical axis rule #{i} is {rule!r}; each rule must be a pair "
                "(logical_name: str, mesh_axes: str | tuple[str, ...] | None), "
                "e.g. ('batch', 'data')."
            )


def set_logical_axis_rules(rules: LogicalRules) -> None:
    """Sets the logical-to-mesh axis rules of this thread until changed.

    >>> set_logical_axis_rules((('batch', 'data'),))
    >>> get_logical_axis_rules()
    (('batch', 'data'),)
    >>> set_logical_axis_rules(())
    """
    _check_rules(rules)
    _axis_rules.rules = () if rules is None else rules


def get_logical_axis_rules() -> Any:
    """The rules in force (as they were given), ``()`` when none are.

    >>> get_logical_axis_rules()
    ()
    """
    return _axis_rules.rules


@contextlib.contextmanager
def logical_axis_rules(rules: LogicalRules) -> Iterator[None]:
    """Binds ``rules`` inside the block and restores the previous rules after it.

    >>> with logical_axis_rules([('batch', 'data')]):
    ...     get_logical_axis_rules()
    [('batch', 'data')]
    """
    _check_rules(rules)
    old = _axis_rules.rules
    _axis_rules.rules = () if rules is None else rules
    try:
        yield
    finally:
        _axis_rules.rules = old


def composite_rules(rule1: Any, rule2: Any) -> Any:
    """Merges two rule sets; a name both map to different mesh axes is an error.

    >>> composite_rules((('a', 'x'),), (('b', 'y'),))
    (('a', 'x'), ('b', 'y'))
    """
    if not rule1 and not rule2:
        return ()
    if not rule2:
        return rule1
    if not rule1:
        return rule2
    merged = dict(rule1)
    for name, axes in rule2:
        if name in merged and merged[name] != axes:
            raise ValueError(
                f"Inconsistent logical axis annotations for {name}: {merged[name]} vs {axes} "
                "(the rules in force map it one way, the variable's own sharding_rules "
                "another); make them agree or drop one."
            )
        merged[name] = axes
    return tuple(merged.items())


def from_sharding_rules(sharding: Sharding, sharding_rules: LogicalRules) -> Sharding:
    """Renames each entry of ``sharding`` that a rule names (others are kept).

    >>> from_sharding_rules(('embed', None, 'mlp'), (('embed', 'model'),))
    ('model', None, 'mlp')
    """
    table = dict(sharding_rules)
    return tuple(table[str(s)] if (s and str(s) in table) else s for s in sharding)


def _format_type() -> Any:
    try:
        from jax.experimental.layout import Format
    except ImportError:  # pragma: no cover - older JAX
        return ()
    return Format


def map_sharding(f: Callable[[Any], Any], sharding: Any) -> Any:
    """Applies ``f`` to each axis name of a PartitionSpec / tuple / NamedSharding / Format.

    >>> map_sharding(str.upper, ('a', 'b'))
    P('A', 'B')
    """
    if isinstance(sharding, (PartitionSpec, tuple)):
        return PartitionSpec(*map(f, sharding))
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, map_sharding(f, sharding.spec))
    fmt = _format_type()
    if fmt and isinstance(sharding, fmt):
        return fmt(sharding.layout, map_sharding(f, sharding.sharding))
    return None


def get_mesh(sharding: Any) -> Any:
    """The mesh a sharding names (None for a bare PartitionSpec or tuple).

    >>> get_mesh(('a', None)) is None
    True
    """
    if isinstance(sharding, NamedSharding):
        return sharding.mesh
    fmt = _format_type()
    if fmt and isinstance(sharding, fmt):
        return get_mesh(sharding.sharding)
    return None


def apply_rules(sharding: Any, sharding_rules: Any) -> Any:
    """Renames the axes of ``sharding`` by the rules in force merged with ``sharding_rules``.

    >>> apply_rules(('embed',), (('embed', 'model'),))
    P('model',)
    """
    context = get_logical_axis_rules()
    table = dict(composite_rules(context, sharding_rules)) if (context or sharding_rules) else {}
    return map_sharding(lambda a: table.get(a, a), sharding)


def get_pspec(sharding: Any, sharding_rules: Any = None) -> PartitionSpec:
    """The PartitionSpec of a sharding annotation after applying the rules.

    >>> get_pspec(('embed', None), (('embed', 'model'),))
    P('model', None)
    """
    return apply_rules(sharding, sharding_rules)


def _apply_sharding(value: Any, sharding: Any, mesh: Any) -> Any:
    fmt = _format_type()
    if fmt and isinstance(sharding, fmt):
        return jax.lax.with_sharding_constraint(value, sharding)
    if mesh.are_all_axes_explicit:
        return jax.sharding.reshard(value, sharding)
    if mesh.are_all_axes_auto:
        return jax.lax.with_sharding_constraint(value, sharding)
    raise ValueError(
        f"Mesh must have all axes as Explicit or all axes as Auto. Got mixed axis types: "
        f"{mesh.axis_types}; build the mesh with one jax.sharding.AxisType for every axis."
    )


def shard_value(value: Any, out_sharding: Any, sharding_rules: Any, mesh: Any) -> Any:
    """Places ``value`` as ``out_sharding`` says (after the rules); unchanged when it is empty.

    >>> import jax.numpy as jnp
    >>> shard_value(jnp.ones(2), None, None, None).shape
    (2,)
    """
    if not out_sharding:
        return value
    if mesh is None:
        mesh = meta.get_global_mesh()
    out_sharding = apply_rules(out_sharding, sharding_rules)
    own_mesh = get_mesh(out_sharding)
    if own_mesh is not None:
        mesh = own_mesh
    if mesh is None:
        raise MeshRequiredError(out_sharding)
    if isinstance(out_sharding, PartitionSpec):
        out_sharding = NamedSharding(mesh, out_sharding)
    return _apply_sharding(value, out_sharding, mesh)


__all__ = [
    "apply_rules", "composite_rules", "from_sharding_rules", "get_logical_axis_rules",
    "get_mesh", "get_pspec", "logical_axis_rules", "map_sharding", "set_logical_axis_rules",
    "shard_value",
]
