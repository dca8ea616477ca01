"""Sharding annotations for NNX Variables (today's ``flax.nnx`` face).

A Variable's ``out_sharding`` metadata names, per array axis, a mesh axis or a logical axis
(mapped by ``nnx.logical_axis_rules`` and the Variable's own ``sharding_rules``), or None.
``with_partitioning`` adds it from an initializer; ``get_partition_spec`` /
``get_named_sharding`` turn a State's annotations into ``PartitionSpec`` s /
``NamedSharding`` s; ``as_abstract`` and ``get_abstract_model`` give abstract models whose
shapes carry their shardings; ``add_axis`` / ``remove_axis`` keep the annotations in step
when a transform (``nnx.vmap``, ``nnx.scan``) adds or removes an array axis. The Flax 0.8.3
face (``sharding`` metadata on VariableStates) is ``flaxen.experimental.nnx``'s.

>>> import jax
>>> from flaxen import nnx
>>> mesh = jax.make_mesh((1,), ('model',))
>>> init = nnx.with_partitioning(jax.nn.initializers.ones, (None, 'model'))
>>> with jax.set_mesh(mesh):  # eager sharding places the kernel on the mesh at creation
...     layer = nnx.Linear(2, 4, kernel_init=init, rngs=nnx.Rngs(0))
>>> nnx.spmd.get_var_pspec(layer.kernel), layer.kernel[...].sharding.spec
(P(None, 'model'), P(None, 'model'))
"""

from __future__ import annotations

import typing as tp

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen.nnx import _sharding
from flaxen.nnx._sharding import (
    composite_rules,
    from_sharding_rules,
    get_logical_axis_rules,
    logical_axis_rules,
)
from flaxen.nnx._snapshots import SNAPSHOT_TYPES
from flaxen.nnx.variablelib import Variable, with_metadata
from flaxen.typing import Sharding as Sharding  # Flax imports it here from flax.typing

A = tp.TypeVar("A")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
PARTITION_NAME = "partition_name"

def _is_var(x: tp.Any) -> bool:
    return isinstance(x, Variable) or type(x) in SNAPSHOT_TYPES


def _metadata(v: tp.Any) -> dict:
    return dict(v.get_metadata()) if hasattr(v, "get_metadata") else dict(v._var_metadata)


def _raw(v: tp.Any) -> tp.Any:
    getter = getattr(type(v), "get_value", None)
    if getter is not None:
        return getter(v)
    return v.raw_value if isinstance(v, Variable) else v.value


def _names(meta: tp.Mapping) -> tp.Any:
    names = meta.get("out_sharding")
    if names is None:
        names = meta.get("sharding")  # older spelling
    return names


def _set_meta(v: tp.Any, **updates: tp.Any) -> None:
    setter = getattr(v, "set_metadata", None)
    if setter is not None and isinstance(v, Variable):
        setter(**updates)
    else:
        v._var_metadata.update(updates)  # a snapshot (the 0.8.3 face's VariableState)


# -- annotations ------------------------------------------------------------------------------


def with_partitioning(initializer: F, sharding: tp.Any, mesh: Mesh | None = None,
                      **metadata: tp.Any) -> F:
    """``initializer`` whose Variables get ``out_sharding=sharding`` and ``mesh`` metadata.

    >>> import jax, jax.numpy as jnp
    >>> from flaxen import nnx
    >>> init = nnx.with_partitioning(jax.nn.initializers.zeros, ('data', None))
    >>> with jax.set_mesh(jax.make_mesh((1,), ('data',))):
    ...     nnx.Param(init(jax.random.key(0), (2, 2))).out_sharding
    ('data', None)
    """
    if isinstance(sharding, list):
        sharding = tuple(sharding)
    # ``mesh`` is recorded even when None, as Flax does: ``var.mesh`` reads None and the
    # metadata (GraphDefs, reprs) has the same keys
    return with_metadata(initializer, out_sharding=sharding, mesh=mesh,  # type: ignore[return-value]
                         **metadata)


def get_var_pspec(v: tp.Any) -> PartitionSpec | None:
    """The ``PartitionSpec`` of one Variable: its ``out_sharding`` after the logical axis rules
    in force and its own ``sharding_rules``; ``P()`` for an unannotated array."""
    meta = _metadata(v)
    names = _names(meta)
    if names:
        return _sharding.partition_spec(names, meta.get("sharding_rules"))
    if hasattr(_raw(v), "shape"):
        return PartitionSpec()
    return None


def get_partition_spec(tree: A) -> A:
    """The same tree with each Variable's value replaced by its ``PartitionSpec`` (and each
    bare array by ``P()``)."""

    def spec(x: tp.Any) -> tp.Any:
        if _is_var(x):
            return x.replace(get_var_pspec(x))
        if hasattr(x, "shape"):
            return PartitionSpec()
        return None

    return jax.tree_util.tree_map(spec, tree, is_leaf=_is_var)


def get_named_sharding(tree: A, mesh: Mesh) -> A:
    """The same tree with each value replaced by its ``NamedSharding`` on ``mesh``."""
    # a map over the specs' leaves (PartitionSpecs are leaves): Variables are rebuilt by
    # their unflatten, so their metadata comes out in the order a jax.tree.map gives, as
    # in Flax
    return jax.tree_util.tree_map(lambda p: NamedSharding(mesh, p),
                                  get_partition_spec(tree))


def with_sharding_constraint(x: tp.Any, axis_resources: tp.Any, mesh: Mesh | None = None
                             ) -> tp.Any:
    """``jax.lax.with_sharding_constraint``, taking a PartitionSpec together with a ``mesh``."""
    if mesh is not None:
        def to_named(s: tp.Any) -> tp.Any:
            return NamedSharding(mesh, s) if isinstance(s, PartitionSpec) else s

        axis_resources = jax.tree_util.tree_map(
            to_named, axis_resources, is_leaf=lambda s: isinstance(s, PartitionSpec))
    return jax.lax.with_sharding_constraint(x, axis_resources)


def _constraint_for(var: tp.Any) -> tp.Any:
    """The sharding a Variable's metadata asks for, or None (used by ``jit(constrain_state)``)."""
    meta = var._var_metadata
    names = _names(meta)
    if names is None:
        return None
    spec = _sharding.partition_spec(names, meta.get("sharding_rules"))
    mesh = meta.get("mesh")
    if mesh is not None:
        return NamedSharding(mesh, spec)
    return spec


# -- axes added/removed by transforms -----------------------------------------------------------


def _partition_name(transform_metadata: tp.Mapping) -> tuple[tp.Any, dict]:
    if PARTITION_NAME not in transform_metadata:
        from flaxen.errors import NNXTransformError

        raise NNXTransformError(
            "", f"transform_metadata {dict(transform_metadata)!r} has no {PARTITION_NAME!r} "
            "key, which a transform adding or removing an axis of annotated Variables needs",
            "pass e.g. transform_metadata={nnx.PARTITION_NAME: 'layers'} (None for an "
            "unsharded axis)")
    other = dict(transform_metadata)
    return other.pop(PARTITION_NAME), other


def _inserted(fields: tp.Sequence, index: int, value: tp.Any) -> tuple:
    items = list(fields)
    while len(items) < index:
        items.append(None)
    items.insert(index, value)
    return tuple(items)


def _removed(fields: tp.Sequence, index: int, value: tp.Any, what: str) -> tuple:
    items = list(fields)
    found = items.pop(index)
    if found != value:
        raise ValueError(
            f"Expected {value!r} at index {index} of {what} {tuple(fields)!r}, found "
            f"{found!r}: the transform's {PARTITION_NAME} must match the name the axis was "
            "added with.")
    return tuple(items)


def add_axis(tree: A, index: int, transform_metadata: tp.Mapping) -> A:
    """Inserts the transform's partition name at ``index`` of every Variable's
    ``out_sharding`` (and of each other tuple metadata named in ``transform_metadata``), then
    calls the Variable's ``add_axis`` hook."""
    axis_name, other = _partition_name(transform_metadata)

    def one(x: tp.Any) -> tp.Any:
        if isinstance(x, Variable):
            meta = _metadata(x)
            if meta.get("out_sharding"):
                _set_meta(x, out_sharding=_inserted(meta["out_sharding"], index, axis_name))
            for key, value in other.items():
                current = meta.get(key)
                if current and isinstance(current, tuple):
                    _set_meta(x, **{key: _inserted(current, index, value)})
            x.add_axis(index, axis_name)
        return x

    return jax.tree_util.tree_map(one, tree, is_leaf=_is_var)


def remove_axis(tree: A, index: int, transform_metadata: tp.Mapping) -> A:
    """Undoes :func:`add_axis`: removes the partition name at ``index`` (checking it is the
    one expected) and calls each Variable's ``remove_axis`` hook."""
    axis_name, other = _partition_name(transform_metadata)

    def one(x: tp.Any) -> tp.Any:
        if isinstance(x, Variable):
            meta = _metadata(x)
            if meta.get("out_sharding") is not None:
                _set_meta(x, out_sharding=_removed(meta["out_sharding"], index, axis_name,
                                                   "out_sharding"))
            for key, value in other.items():
                current = meta.get(key)
                if current and isinstance(current, tuple):
                    _set_meta(x, **{key: _removed(current, index, value, key)})
            x.remove_axis(index, axis_name)
        return x

    return jax.tree_util.tree_map(one, tree, is_leaf=_is_var)


# -- abstract models ----------------------------------------------------------------------------


def _abstract_value(x: Variable, mesh: tp.Any = None, *, unannotated: bool = False) -> tp.Any:
    """The sharded ``ShapeDtypeStruct`` for abstract Variable ``x``, or None to keep it.
    With ``unannotated``, a Variable without ``out_sharding`` gets one too (``P()``), as
    ``nnx.eval_shape`` gives its outputs."""
    value = _raw(x)
    meta = _metadata(x)
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        return None
    if not (unannotated or _names(meta)) or getattr(value, "sharding", None) is not None:
        return None
    var_mesh = meta.get("mesh") or mesh or jax.sharding.get_abstract_mesh()
    if var_mesh is None or getattr(var_mesh, "empty", False):
        return None
    sharding = NamedSharding(var_mesh, get_var_pspec(x) or PartitionSpec())
    return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding,
                                weak_type=getattr(value, "weak_type", False))


def _set_raw(var: Variable, value: tp.Any) -> None:
    setter = getattr(var, "set_raw_value", None)
    if callable(setter):
        setter(value)
    else:
        object.__setattr__(var, "raw_value", value)


def as_abstract(tree: A, graph: bool | None = None) -> A:
    """A copy of ``tree`` (e.g. from ``nnx.eval_shape``) whose annotated abstract Variables'
    ``ShapeDtypeStruct`` s carry the ``NamedSharding`` their ``out_sharding`` asks for (on
    their ``mesh`` metadata, else the mesh set by ``jax.set_mesh``)."""
    from flaxen.nnx import _graph_ops as graphlib

    if isinstance(tree, Variable):
        new = _abstract_value(tree)
        return tree if new is None else tree.replace(new)  # type: ignore[return-value]
    copy = graphlib.clone(tree)
    for _, node in graphlib.iter_graph(copy):
        if isinstance(node, Variable):
            new = _abstract_value(node)
            if new is not None:
                _set_raw(node, new)
    return copy


abstract_with_sharding = as_abstract


def get_abstract_model(init_fn: tp.Callable[[], tp.Any], mesh: Mesh, *,
                       graph: bool | None = None) -> tuple[tp.Any, tp.Any]:
    """``(graphdef, abstract_state)`` of the model ``init_fn`` builds, without computing it:
    each state leaf a ``ShapeDtypeStruct`` carrying its ``NamedSharding`` on ``mesh``."""
    from flaxen.nnx import _graph_ops as graphlib

    # upward: an abstract model is built with nnx.eval_shape, a transform above this file
    from flaxen.nnx.transforms import eval_shape

    with jax.set_mesh(mesh):
        abs_model = eval_shape(init_fn)
        gdef, abs_state = graphlib.split(abs_model)
        shardings = get_named_sharding(abs_state, mesh)

        def leaf(a: tp.Any, s: tp.Any) -> tp.Any:
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)

        abs_state = jax.tree_util.tree_map(leaf, abs_state, shardings)
    return gdef, abs_state


__all__ = [
    "PARTITION_NAME",
    "abstract_with_sharding",
    "add_axis",
    "as_abstract",
    "composite_rules",
    "from_sharding_rules",
    "get_abstract_model",
    "get_logical_axis_rules",
    "get_named_sharding",
    "get_partition_spec",
    "get_var_pspec",
    "logical_axis_rules",
    "remove_axis",
    "with_partitioning",
    "with_sharding_constraint",
]
