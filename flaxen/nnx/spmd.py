"""Sharding annotations for NNX state: ``with_partitioning`` and friends.

A Variable's ``sharding`` metadata is a tuple of mesh axis names (or None), one per array
axis. ``get_partition_spec`` turns a State's annotations into ``PartitionSpec``s,
``get_named_sharding`` into ``NamedSharding``s for a mesh.

>>> import jax
>>> from flaxen import nnx
>>> init = nnx.with_partitioning(jax.nn.initializers.ones, (None, 'model'))
>>> layer = nnx.Linear(2, 4, kernel_init=init, rngs=nnx.Rngs(0))
>>> tuple(nnx.get_partition_spec(nnx.state(layer)).kernel.value)
(None, 'model')
"""

from __future__ import annotations

import typing as tp

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen.nnx.state import State
from flaxen.nnx.variables import VariableState, with_metadata

PARTITION_NAME = "partition_name"


def with_partitioning(initializer: tp.Callable[..., tp.Any], sharding: tp.Sequence[tp.Any],
                      mesh: Mesh | None = None, **metadata: tp.Any
                      ) -> tp.Callable[..., tp.Any]:
    """``initializer`` whose Variables carry ``sharding`` (and ``mesh``) metadata."""
    extra = dict(metadata)
    if mesh is not None:
        extra["mesh"] = mesh
    return with_metadata(initializer, sharding=tuple(sharding), **extra)


def _spec(leaf: tp.Any) -> tp.Any:
    if isinstance(leaf, VariableState):
        names = leaf._var_metadata.get("sharding")
        spec = PartitionSpec(*names) if names is not None else PartitionSpec()
        return leaf.replace(spec)
    if hasattr(leaf, "shape"):
        return PartitionSpec()
    return None


def get_partition_spec(tree: tp.Any) -> tp.Any:
    """The same tree with each VariableState's value replaced by its ``PartitionSpec``."""
    return jax.tree_util.tree_map(_spec, tree, is_leaf=lambda x: isinstance(x, VariableState))


def get_named_sharding(tree: tp.Any, mesh: Mesh) -> tp.Any:
    """The same tree with each value replaced by a ``NamedSharding`` on ``mesh``."""
    specs = get_partition_spec(tree)

    def named(leaf: tp.Any) -> tp.Any:
        if isinstance(leaf, VariableState):
            return leaf.replace(NamedSharding(mesh, leaf.value))
        if isinstance(leaf, PartitionSpec):
            return NamedSharding(mesh, leaf)
        return leaf

    return jax.tree_util.tree_map(
        named, specs, is_leaf=lambda x: isinstance(x, (VariableState, PartitionSpec)))


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
    names = meta.get("sharding")
    if names is None:
        return None
    spec = PartitionSpec(*names)
    mesh = meta.get("mesh")
    if mesh is not None:
        return NamedSharding(mesh, spec)
    return spec


__all__ = [
    "PARTITION_NAME",
    "State",
    "get_named_sharding",
    "get_partition_spec",
    "with_partitioning",
    "with_sharding_constraint",
]
