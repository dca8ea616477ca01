"""Low-level sharding helpers for NNX Variables: logical axis rules and sharding on creation.

Imports only JAX and :mod:`flaxen.errors`, so that ``variables.py`` can call
:func:`shard_value` when a Variable with ``out_sharding`` metadata is created (eager sharding)
without an import cycle; the public names live in :mod:`flaxen.nnx.spmd`.

- ``logical_axis_rules(rules)``: a context binding logical axis names (``'embed'``) to mesh
  axes (``'model'``); Linen's ``nn.logical_axis_rules`` is honoured too when Linen is loaded.
- ``partition_spec(out_sharding, sharding_rules)``: the ``PartitionSpec`` for a Variable's
  ``out_sharding`` names after the context rules and the Variable's own ``sharding_rules``.
- ``shard_value(value, out_sharding, sharding_rules, mesh)``: ``value`` placed (or, under a
  trace, constrained) according to those names on ``mesh`` or the mesh set by
  ``jax.set_mesh`` (or ``with mesh:``); :class:`~flaxen.errors.MeshRequiredError` when no
  mesh is known.

>>> from flaxen.nnx import _sharding
>>> with _sharding.logical_axis_rules((('embed', 'model'),)):
...     _sharding.partition_spec(('batch', 'embed'))
P('batch', 'model')
"""

from __future__ import annotations

import contextlib
import sys
import threading
import typing as tp

import jax
from jax.sharding import NamedSharding, PartitionSpec

from flaxen.errors import MeshRequiredError

Rules = tp.Sequence[tuple[str, tp.Any]]


class _RulesStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[tuple] = []


_RULES = _RulesStack()


@contextlib.contextmanager
def logical_axis_rules(rules: Rules) -> tp.Iterator[None]:
    """Binds logical axis names to mesh axes inside the block (innermost wins)."""
    frozen = []
    for i, rule in enumerate(rules or ()):
        if not (isinstance(rule, (tuple, list)) and len(rule) == 2
                and isinstance(rule[0], str)):
            raise TypeError(
                f"Logical axis rule #{i} is {rule!r}; each rule must be a pair "
                "(logical_name, mesh_axes), e.g. ('embed', 'model').")
        frozen.append((rule[0], tuple(rule[1]) if isinstance(rule[1], list) else rule[1]))
    _RULES.stack.append(tuple(frozen))
    try:
        yield
    finally:
        _RULES.stack.pop()


def get_logical_axis_rules() -> tuple:
    """The rules in force: the innermost NNX context, else Linen's rules (if Linen is loaded)."""
    if _RULES.stack:
        return _RULES.stack[-1]
    linen_spmd = sys.modules.get("flaxen.linen.spmd")
    if linen_spmd is not None:
        return tuple(linen_spmd.get_logical_axis_rules())
    return ()


def composite_rules(outer: Rules | None, inner: Rules | None) -> tuple:
    """``outer`` extended by ``inner``; the same name mapped two ways is an error."""
    merged: dict[str, tp.Any] = dict(outer or ())
    for name, axes in inner or ():
        if name in merged and merged[name] != axes:
            raise ValueError(
                f"Inconsistent logical axis rules for {name!r}: {merged[name]!r} vs "
                f"{axes!r}; give each logical name one mesh axis (fix the context rules or "
                "the Variable's sharding_rules).")
        merged[name] = axes
    return tuple(merged.items())


def from_sharding_rules(names: tp.Sequence[tp.Any], rules: Rules) -> tuple:
    """Each logical name replaced by its mesh axis where a rule names it."""
    table = dict(rules)
    return tuple(table[s] if isinstance(s, str) and s in table else s for s in names)


def partition_spec(out_sharding: tp.Any, sharding_rules: Rules | None = None) -> PartitionSpec:
    """The ``PartitionSpec`` for ``out_sharding`` (names, a PartitionSpec or a sharding)."""
    if isinstance(out_sharding, NamedSharding):
        return out_sharding.spec
    context = get_logical_axis_rules()
    names = tuple(out_sharding)
    if context or sharding_rules:
        names = from_sharding_rules(names, composite_rules(context, sharding_rules))
    return PartitionSpec(*names)


def context_mesh() -> tp.Any:
    """The mesh set by ``jax.set_mesh`` (or ``with mesh:``), or None."""
    abstract = jax.sharding.get_abstract_mesh()
    if abstract is not None and not abstract.empty:
        return abstract
    try:
        from jax._src.mesh import thread_resources

        physical = thread_resources.env.physical_mesh
        return None if physical.empty else physical
    except Exception:  # noqa: BLE001 - jax internals moved: no legacy mesh
        return None


def _concrete_mesh() -> tp.Any:
    try:
        mesh = jax.sharding.get_mesh()
    except Exception:  # noqa: BLE001 - older jax
        return None
    return None if mesh is None or mesh.empty else mesh


def _is_traced(value: tp.Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(value))


def _check_axis_types(mesh: tp.Any) -> None:
    types = set(getattr(mesh, "axis_types", ()) or ())
    if len(types) > 1:
        raise ValueError(
            f"Cannot shard a Variable on a mesh mixing axis types {sorted(map(str, types))} "
            f"(axes {mesh.axis_names}); use a mesh whose axes are all AxisType.Auto or all "
            "AxisType.Explicit.")


def _all_explicit(mesh: tp.Any) -> bool:
    types = tuple(getattr(mesh, "axis_types", ()) or ())
    return bool(types) and all(t == jax.sharding.AxisType.Explicit for t in types)


def shard_value(value: tp.Any, out_sharding: tp.Any, sharding_rules: Rules | None = None,
                mesh: tp.Any = None, *, require_mesh: bool = True) -> tp.Any:
    """``value`` sharded as ``out_sharding`` asks (see the module docstring); with
    ``require_mesh=False``, ``value`` unchanged when no mesh is known."""
    if out_sharding is None or not hasattr(value, "shape") \
            or isinstance(value, jax.ShapeDtypeStruct):
        return value
    layout_format = None
    if type(out_sharding).__name__ == "Format":  # jax.experimental.layout.Format
        layout_format = out_sharding
        out_sharding = out_sharding.sharding
    sharding: tp.Any  # a NamedSharding, or a bare PartitionSpec on an abstract mesh
    if isinstance(out_sharding, NamedSharding):
        sharding = out_sharding
        mesh = sharding.mesh
    else:
        if not out_sharding:
            return value
        if mesh is None:
            mesh = context_mesh()
            if mesh is None and not require_mesh:
                return value
            if mesh is None:
                # as Flax: a sharding asked for and no mesh to honour it is an error, not a
                # value quietly left unsharded
                raise MeshRequiredError(out_sharding)
        spec = partition_spec(out_sharding, sharding_rules)
        sharding = None
    _check_axis_types(mesh)
    if _is_traced(value):
        if sharding is None:
            # a NamedSharding on the abstract mesh too: building it checks the spec's axes
            # against the mesh (an unknown axis is an error here, as in Flax)
            sharding = NamedSharding(mesh, spec)
        if _all_explicit(mesh):
            return jax.sharding.reshard(value, sharding)
        return jax.lax.with_sharding_constraint(value, sharding)
    if sharding is None:
        if isinstance(mesh, jax.sharding.AbstractMesh):
            concrete = _concrete_mesh()
            if concrete is None:  # nothing to place it on; the names must still fit
                NamedSharding(mesh, spec)  # raises for an axis the mesh lacks, as Flax
                return value
            mesh = concrete
        sharding = NamedSharding(mesh, spec)
    if layout_format is not None:
        return jax.device_put(value, layout_format)
    return jax.device_put(value, sharding)
