"""Lifted transformations: JAX transforms that work on functions of Scopes.

Everything here is built on :func:`pack` (stages described in ``flaxen.core._packing``):
``vmap``, ``scan``, ``jit``, ``checkpoint``/``remat``, ``remat_scan``, ``vjp``, ``jvp``,
``value_and_grad``/``grad``, ``custom_vjp``, ``while_loop``, ``cond``, ``switch``,
``map_variables``/``transform``, ``fold_rngs``, ``named_call``, ``swap_collection``.
Keys drawn inside a transform are the ones Flax draws: streams enter as the outer scope's
``LazyRng`` with shared counters, and ``split_rngs`` splits the underlying key.

>>> import jax, jax.numpy as jnp
>>> from flaxen.core import init
>>> def layer(scope, x):
...     w = scope.param('w', jax.nn.initializers.lecun_normal(), (x.shape[-1], 3))
...     return x @ w
>>> batched = vmap(layer, variable_axes={'params': 0}, split_rngs={'params': True})
>>> y, v = init(batched)(jax.random.PRNGKey(0), jnp.ones((4, 2)))
>>> v['params']['w'].shape
(4, 2, 3)
"""

from typing import TypeVar

from flaxen.core import axes_scan, meta  # noqa: F401  (Flax exposes both here)
from flaxen.core._filters import (
    CollectionFilter,
    DenyList,
    PRNGSequenceFilter,
    group_collections,
    in_filter,
    intersect_filters,
    is_filter_empty,
    subtract_filters,
    union_filters,
)
from flaxen.core._lift_context import A, CountsHolder, TransformContext, id_fn, set_from_dict
from flaxen.core._lift_maps import scan, vmap
from flaxen.core._lift_misc import (
    checkpoint,
    cond,
    custom_vjp,
    fold_rngs,
    grad,
    jit,
    jvp,
    map_variables,
    named_call,
    remat,
    remat_scan,
    swap_collection,
    switch,
    transform,
    value_and_grad,
    vjp,
    while_loop,
)
from flaxen.core._packing import In, Out, _split_in_out_axes, pack, tree_map_rngs
from flaxen.core._rng import LazyRng
from flaxen.core.axes_scan import broadcast
from flaxen.core.scope import Scope

C = TypeVar("C")  # the carry of while_loop

__all__ = [
    "A", "C", "CountsHolder", "TransformContext", "axes_scan", "id_fn", "meta",
    "set_from_dict",
    "CollectionFilter", "DenyList", "In", "LazyRng", "Out", "PRNGSequenceFilter", "Scope",
    "broadcast", "checkpoint", "cond", "custom_vjp", "fold_rngs", "grad", "group_collections",
    "in_filter", "intersect_filters", "is_filter_empty", "jit", "jvp", "map_variables",
    "named_call", "pack", "remat", "remat_scan", "scan", "subtract_filters",
    "swap_collection", "switch", "transform", "tree_map_rngs", "union_filters",
    "value_and_grad", "vjp", "vmap", "while_loop", "_split_in_out_axes",
]

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen import traceback_util, traverse_util  # noqa: E402, F401
from flaxen.core.frozen_dict import freeze, unfreeze  # noqa: E402, F401

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import InOutAxis, InOutScanAxis  # noqa: E402, F401
