"""flaxen.core: the functional core (Scope, init/apply, lift, meta) and FrozenDict.

>>> import jax
>>> from flaxen.core import init
>>> _, variables = init(lambda scope: scope.param('w', jax.random.normal, (2,)))(
...     jax.random.PRNGKey(0))
>>> variables['params']['w'].shape
(2,)
"""

from flaxen.core import lift, meta, nn, partial_eval, spmd, tracers, variables
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
from flaxen.typing import Array
from flaxen.core.tracers import check_trace_level, current_trace
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
    "while_loop", "check_trace_level", "current_trace", "partial_eval", "spmd", "tracers",
    "variables",
    "AxisMetadata", "broadcast", "CollectionFilter", "DenyList", "FrozenDict", "Partitioned",
    "Scope", "Variable", "add_axis", "apply", "bind", "copy", "freeze", "get_partition_spec",
    "get_sharding", "init", "lazy_init", "lift", "nn", "map_axis_meta", "meta", "pop",
    "pretty_repr",
    "remove_axis", "replace_boxed", "unbox", "unfreeze", "with_partitioning",
]
