"""Flax 0.8.3's sharding annotations for NNX state (the ``flaxen.experimental.nnx`` face).

In 0.8.3 a Variable's ``sharding`` metadata is a tuple of mesh axis names (or None), one per
array axis, and ``get_partition_spec`` maps a State of ``VariableState`` s. Today's face
(``out_sharding`` metadata, Variables as State leaves) is :mod:`flaxen.nnx.spmd`.

>>> import jax
>>> from flaxen.experimental import nnx
>>> init = nnx.with_partitioning(jax.nn.initializers.ones, (None, 'model'))
>>> layer = nnx.Linear(2, 4, kernel_init=init, rngs=nnx.Rngs(0))
>>> tuple(nnx.get_partition_spec(nnx.state(layer)).kernel.value)
(None, 'model')
"""

from __future__ import annotations

import typing as tp

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen.experimental.nnx._variable_state import VariableState
from flaxen.nnx.spmd import PARTITION_NAME, with_sharding_constraint
from flaxen.nnx.statelib import State
from flaxen.nnx.variablelib import with_metadata


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
        names = leaf._var_metadata.get("sharding", leaf._var_metadata.get("out_sharding"))
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


__all__ = [
    "PARTITION_NAME",
    "State",
    "get_named_sharding",
    "get_partition_spec",
    "with_partitioning",
    "with_sharding_constraint",
]
