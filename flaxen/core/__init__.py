"""flaxen.core: the functional core (Scope, init/apply, lift, meta) and FrozenDict.

>>> import jax
>>> from flaxen.core import init
>>> _, variables = init(lambda scope: scope.param('w', jax.random.normal, (2,)))(
...     jax.random.PRNGKey(0))
>>> variables['params']['w'].shape
(2,)
"""

from typing import Any as Array  # Flax's alias for "a JAX array" in annotations

from flaxen.core import lift, meta, nn
from flaxen.core.lift import (
    custom_vjp,
    jit,
    jvp,
    remat,
    remat_scan,
    scan,
    vjp,
    vmap,
    while_loop,
)
from flaxen.core.frozen_dict import FrozenDict, copy, freeze, pop, pretty_repr, unfreeze
from flaxen.core.axes_scan import broadcast
from flaxen.core.meta import (
    AxisMetadata,
    Partitioned,
    add_axis,
    get_partition_spec,
    get_sharding,
    map_axis_meta,
    remove_axis,
    replace_boxed,
    unbox,
    with_partitioning,
)
from flaxen.core.scope import (
    CollectionFilter,
    DenyList,
    Scope,
    Variable,
    apply,
    bind,
    init,
    lazy_init,
)

__all__ = [
    "Array", "custom_vjp", "jit", "jvp", "remat", "remat_scan", "scan", "vjp", "vmap",
    "while_loop",
    "AxisMetadata", "broadcast", "CollectionFilter", "DenyList", "FrozenDict", "Partitioned",
    "Scope", "Variable", "add_axis", "apply", "bind", "copy", "freeze", "get_partition_spec",
    "get_sharding", "init", "lazy_init", "lift", "nn", "map_axis_meta", "meta", "pop",
    "pretty_repr",
    "remove_axis", "replace_boxed", "unbox", "unfreeze", "with_partitioning",
]
