"""Axis metadata boxes: values that carry per-axis information (e.g. sharding names).

A variable may be stored boxed, e.g. ``Partitioned(value, names=('embed', 'mlp'))``. Module
code sees the raw value (``scope.param`` unboxes); lifted transforms that add or remove an
axis (``vmap``/``scan`` over variables) call ``add_axis``/``remove_axis`` on every box so the
metadata follows the value's shape. Boxes are pytrees whose only child is the value.

>>> import jax.numpy as jnp
>>> box = Partitioned(jnp.ones((2, 3)), ('embed', 'mlp'))
>>> unbox({'w': box})['w'].shape
(2, 3)
>>> box.add_axis(0, {PARTITION_NAME: 'layers'}).names
('layers', 'embed', 'mlp')
>>> get_partition_spec({'w': box})
{'w': P('embed', 'mlp')}
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import jax
from jax.sharding import NamedSharding, PartitionSpec

from flaxen import errors, struct

A = TypeVar("A")
B = TypeVar("B")
TAxisMetadata = TypeVar("TAxisMetadata", bound="AxisMetadata[Any]")
LogicalNames = tuple[str | None, ...]

PARTITION_NAME = "partition_name"


class AxisMetadata(Generic[A], metaclass=abc.ABCMeta):
    """Abstract base of metadata boxes.

    A subclass defines ``unbox()`` (the raw value), ``replace_boxed(val)`` (the same
    metadata around a new value), and ``add_axis``/``remove_axis(index, params)``, which
    lifted transforms call when they stack or unstack the value along ``index``;
    ``params`` is the transform's ``metadata_params`` dict. Subclasses must be pytrees.
    """

    @abc.abstractmethod
    def unbox(self) -> A:
        """The raw value inside the box."""

    @abc.abstractmethod
    def replace_boxed(self: TAxisMetadata, val: B) -> TAxisMetadata:
        """A box with the same metadata around ``val``."""

    @abc.abstractmethod
    def add_axis(self: TAxisMetadata, index: int, params: dict[Any, Any]) -> TAxisMetadata:
        """The metadata after a transform inserted an axis at ``index``."""

    @abc.abstractmethod
    def remove_axis(self: TAxisMetadata, index: int, params: dict[Any, Any]) -> TAxisMetadata:
        """The metadata after a transform removed the axis at ``index``."""


def is_axis_metadata(val: Any) -> bool:
    """Whether ``val`` is a metadata box."""
    return isinstance(val, AxisMetadata)


def map_axis_meta(fn: Callable[[AxisMetadata[Any]], Any], tree: Any) -> Any:
    """Applies ``fn`` to every box in ``tree``; other leaves are kept."""

    def update(x: Any) -> Any:
        return fn(x) if isinstance(x, AxisMetadata) else x

    return jax.tree_util.tree_map(update, tree, is_leaf=is_axis_metadata)


def add_axis(tree: Any, index: int, params: dict[Any, Any]) -> Any:
    """Calls ``add_axis(index, params)`` on every box in ``tree``."""
    return map_axis_meta(lambda x: x.add_axis(index, params), tree)


def remove_axis(tree: Any, index: int, params: dict[Any, Any]) -> Any:
    """Calls ``remove_axis(index, params)`` on every box in ``tree``."""
    return map_axis_meta(lambda x: x.remove_axis(index, params), tree)


def _has_box(tree: Any) -> bool:
    if isinstance(tree, AxisMetadata):
        return True
    if isinstance(tree, dict):
        return any(_has_box(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(_has_box(v) for v in tree)
    if hasattr(tree, "shape") or isinstance(tree, (int, float, complex, bool, str)) or tree is None:
        return False
    return True  # unknown container: let the tree map decide


def unbox(tree: Any) -> Any:
    """Replaces every box in ``tree`` by its raw value.

    >>> import jax.numpy as jnp
    >>> unbox(Partitioned(jnp.zeros(2), ('data',))).shape
    (2,)
    """
    if not _has_box(tree):
        return tree
    return map_axis_meta(lambda x: x.unbox(), tree)


def replace_boxed(tree: Any, updates: Any) -> Any:
    """Puts the raw values of ``updates`` into the boxes of ``tree``.

    Where ``tree`` has a box, the result keeps the box around the matching update; other
    leaves of the result come from ``updates``.
    """

    def inner(x: Any, update: Any) -> Any:
        if isinstance(x, AxisMetadata):
            return x.replace_boxed(update)
        return update

    return jax.tree_util.tree_map(inner, tree, updates, is_leaf=is_axis_metadata)


def _global_mesh() -> Any:
    # Only the mesh of jax.set_mesh / use_mesh counts, as in Flax 0.12.8: under the legacy
    # `with mesh:` context Flax applies no constraint, so neither does flaxen (the same
    # model must place its arrays the same way under both libraries).
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty:
        return None
    return mesh


def get_global_mesh() -> Any:
    """The mesh set by ``jax.set_mesh`` / ``jax.sharding.use_mesh``, or None (a legacy
    ``with mesh:`` block does not count)."""
    return _global_mesh()


def global_mesh_defined() -> bool:
    return _global_mesh() is not None


class Partitioned(struct.PyTreeNode, AxisMetadata[A]):
    """A value with one sharding name per axis (``None`` = not sharded along that axis).

    ``unbox()`` applies a sharding constraint when a mesh is known (``mesh`` or an
    enclosing global mesh). A ``struct.PyTreeNode``: subclasses (e.g.
    ``LogicallyPartitioned``) become pytree dataclasses automatically; mark metadata
    fields with ``struct.field(pytree_node=False)``.

    >>> import jax.numpy as jnp
    >>> Partitioned(jnp.zeros((4, 2)), ('batch', None)).get_partition_spec()
    P('batch', None)
    """

    value: Any
    names: LogicalNames = struct.field(pytree_node=False)
    mesh: Any = struct.field(pytree_node=False, default=None)

    def unbox(self, apply_constraint: bool = True) -> A:
        if apply_constraint and (self.mesh is not None or global_mesh_defined()):
            sharding = self.get_sharding(self.mesh) if self.mesh is not None else (
                self.get_partition_spec())
            return jax.lax.with_sharding_constraint(self.value, sharding)
        return self.value

    def replace_boxed(self, val: Any) -> Partitioned:
        return self.replace(value=val)

    def _axis_name(self, params: dict[Any, Any]) -> Any:
        if PARTITION_NAME not in params:
            raise errors.PartitioningUnspecifiedError(self)
        return params[PARTITION_NAME]

    def add_axis(self, index: int, params: dict[Any, Any]) -> Partitioned[A]:
        axis_name = self._axis_name(params)
        names = list(self.names)
        while len(names) < index:
            names.append(None)
        names.insert(index, axis_name)
        return self.replace(names=tuple(names))

    def remove_axis(self, index: int, params: dict[Any, Any]) -> Partitioned[A]:
        axis_name = self._axis_name(params)
        names = list(self.names)
        if names[index] != axis_name:
            raise errors.MetadataAxisError(
                f"remove_axis({index}) expected axis name {axis_name!r} at position {index} "
                f"of {tuple(names)}, found {names[index]!r}. The metadata_params of the "
                "transform must match the ones used when the axis was added."
            )
        names.pop(index)
        return self.replace(names=tuple(names))

    def get_partition_spec(self) -> PartitionSpec:
        """``PartitionSpec(*names)``."""
        return PartitionSpec(*self.names)

    def get_sharding(self, mesh: Any) -> jax.sharding.Sharding:
        """``NamedSharding(mesh, self.get_partition_spec())``."""
        return NamedSharding(mesh, self.get_partition_spec())

    def to_nnx_metadata(self) -> dict[str, Any]:
        return {"sharding_names": self.names, "mesh": self.mesh}

    @classmethod
    def from_nnx_metadata(cls, metadata: dict[str, Any]) -> Partitioned[Any]:
        return cls(metadata["value"], metadata.get("sharding_names", ()),
                   metadata.get("mesh"))


def with_partitioning(
    fn: Callable[..., Any],
    names: LogicalNames,
    mesh: Any = None,
) -> Callable[..., Partitioned[Any]]:
    """Wraps initializer ``fn`` so that its result is boxed as ``Partitioned(value, names)``.

    >>> import jax, jax.numpy as jnp
    >>> init = with_partitioning(jax.nn.initializers.zeros, (None, 'model'))
    >>> init(jax.random.PRNGKey(0), (2, 3)).names
    (None, 'model')
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Partitioned[Any]:
        return Partitioned(fn(*args, **kwargs), names, mesh=mesh)

    return wrapper


def get_partition_spec(tree: Any) -> Any:
    """Maps boxes to their ``PartitionSpec``, other arrays to ``PartitionSpec()``."""

    def f(x: Any) -> Any:
        if isinstance(x, AxisMetadata) and hasattr(x, "get_partition_spec"):
            return x.get_partition_spec()  # Partitioned, or e.g. nnx.bridge.NNXMeta
        if hasattr(x, "shape"):
            return PartitionSpec()
        return None

    return jax.tree_util.tree_map(f, tree, is_leaf=lambda x: isinstance(x, AxisMetadata))


def get_sharding(tree: Any, mesh: Any) -> Any:
    """Maps every leaf to ``NamedSharding(mesh, spec)`` using :func:`get_partition_spec`."""

    def f(x: Any) -> Any:
        if isinstance(x, AxisMetadata) and hasattr(x, "get_sharding"):
            return x.get_sharding(mesh)
        if hasattr(x, "shape"):
            return NamedSharding(mesh, PartitionSpec())
        return None

    return jax.tree_util.tree_map(f, tree, is_leaf=lambda x: isinstance(x, AxisMetadata))
