"""Helpers to build Orbax ``save_args`` / ``restore_args`` trees from a target pytree.

Needs the optional ``orbax-checkpoint`` package (``pip install flaxen[orbax]``); importing this
module without it works, calling a helper raises ImportError with the install command.

>>> import numpy as np
>>> args = save_args_from_target({'w': np.zeros(2)})  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from typing import Any

import jax

PyTree = Any


def _ocp():
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:
        raise ImportError(
            "Orbax checkpointing needs the orbax-checkpoint package, which is not installed. "
            "Install it with `pip install orbax-checkpoint` (or `pip install flaxen[orbax]`), "
            "or set flaxen.config.update('flax_use_orbax_checkpointing', False) to use the "
            "legacy msgpack format."
        ) from e
    return ocp


def is_multi_device_array(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Array`` laid out over more than one device."""
    return isinstance(value, jax.Array) and len(value.sharding.device_set) > 1


def save_args_from_target(target: PyTree) -> PyTree:
    """One default ``orbax.checkpoint.SaveArgs()`` per leaf of ``target`` (``None`` stays).

    Pass the result as ``save_args=`` to an Orbax ``PyTreeCheckpointer.save``.
    """
    ocp = _ocp()
    return jax.tree.map(lambda _: ocp.SaveArgs(), target)


def restore_args_from_target(target: PyTree, mesh: jax.sharding.Mesh | None = None) -> PyTree:
    """Orbax ``restore_args`` that bring each leaf back like the one in ``target``.

    ``jax.Array`` leaves are restored with their sharding (and dtype); other leaves as their
    own type. Shapes come from the checkpoint, not the target: a target leaf may be a
    placeholder such as ``np.array(0)`` or ``jnp.zeros(())``. With ``mesh``, named shardings are
    rebuilt on that mesh, which lets a checkpoint saved on one device layout be restored onto
    another.
    """
    ocp = _ocp()

    def sharding_of(x):
        if not isinstance(x, jax.Array):
            return None
        sharding = x.sharding
        if mesh is not None and isinstance(sharding, jax.sharding.NamedSharding):
            return jax.sharding.NamedSharding(mesh, sharding.spec)
        return sharding

    shardings = jax.tree.map(sharding_of, target)
    construct = ocp.checkpoint_utils.construct_restore_args
    if "set_global_shape" in inspect.signature(construct).parameters:
        return construct(target, shardings, set_global_shape=False)
    return construct(target, shardings)


def maybe_construct_transformations(target: PyTree, transforms: Any | None) -> Any:
    """Orbax restore ``transforms``: as given; ``{}`` with a target; else "fall back for all".

    With a target, ``{}`` lets Orbax fill leaves missing from the checkpoint from the target;
    without one, a catch-all fallback transform restores the checkpoint as saved.
    """
    if transforms is not None:
        return transforms
    if target is not None:
        return {}
    return {"": _ocp().Transform(use_fallback=True)}
