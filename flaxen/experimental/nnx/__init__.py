"""``flaxen.experimental.nnx``: NNX as Flax 0.8.3 published it (the spec's API), kept exactly.

``flaxen.nnx`` follows today's ``flax.nnx``; this namespace keeps the 0.8.3 faces
(``Optimizer(model, tx)``, the 0.8.3 transform signatures, ``State`` of ``VariableState``).
Both run on the one engine in ``flaxen/nnx/``: where the two APIs agree the objects are
shared, where they differ this file imports the 0.8.3 face explicitly, so a change to
``flaxen.nnx``'s namespace never reaches code written for 0.8.3.

>>> import jax.numpy as jnp
>>> from flaxen.experimental import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> model(jnp.ones((1, 2))).shape
(1, 3)
"""

import sys as _sys

from flaxen.nnx import module as module
from flaxen.nnx import nn as nn
from flaxen.nnx import training as training
from flaxen.nnx import transforms as transforms
from flaxen.nnx import visualization as visualization

from flaxen.nnx import errors
from flaxen.experimental.nnx import filterlib as filterlib  # 0.8.3's string filters
from flaxen.experimental.nnx import graph as graph
from flaxen.nnx import rnglib as rnglib
from flaxen.experimental.nnx import _spmd as spmd
from flaxen.experimental.nnx._axis_transforms import Jit, Remat, Scan, Vmap, scan, vmap
from flaxen.nnx.errors import TraceContextError
from flaxen.nnx.filterlib import Everything, Nothing, OfType, PathContains, WithTag
from flaxen.experimental.nnx.filterlib import All, Any, Not  # strings by 0.8.3's rule
from flaxen.experimental.nnx.graph import (
    GraphDef,
    GraphNode,
    UpdateContext,
    clone,
    merge,
    pop,
    split,
    state,
    update,
)
from flaxen.experimental.nnx.graph import graphdef as graphdef
from flaxen.experimental.nnx._legacy_module import Dict, List, Sequential
from flaxen.experimental.nnx._legacy_module import LegacyModule as Module
from flaxen.experimental.nnx._attention import MultiHeadAttention
from flaxen.nnx.nn.linear import Conv, Einsum, Embed, Linear, LinearGeneral
from flaxen.experimental.nnx._norms import BatchNorm, GroupNorm, LayerNorm, RMSNorm
from flaxen.experimental.nnx._dropout import Dropout
from flaxen.experimental.nnx._rngs import Rngs, RngStream, fork
from flaxen.nnx.rnglib import RngCount, RngKey, RngState
from flaxen.experimental.nnx._spmd import (
    PARTITION_NAME,
    get_named_sharding,
    get_partition_spec,
    with_partitioning,
    with_sharding_constraint,
)
from flaxen.nnx.statelib import State
from flaxen.nnx.training import metrics as metrics
from flaxen.nnx.training.metrics import Accuracy, Average, Metric, MultiMetric
from flaxen.experimental.nnx._optimizer import Optimizer
from flaxen.nnx.training.optimizer import OptState
from flaxen.experimental.nnx.transforms import eval_shape, grad, jit, remat, value_and_grad
from flaxen.nnx.variablelib import (
    EMPTY,
    BatchStat,
    Cache,
    Empty,
    Intermediate,
    Param,
    Variable,
    VariableMetadata,
    with_metadata,
)
from flaxen.experimental.nnx._variable_state import VariableState
from flaxen.nnx.visualization import display

# the pure functions shared with Linen (flaxen.layer_math: no Linen import)
from flaxen.layer_math import activations as _activations
from flaxen.layer_math import initializers as initializers
from flaxen.layer_math.attention import combine_masks, make_attention_mask, make_causal_mask
from flaxen.experimental.nnx._attention import dot_product_attention  # sows into NNX modules
from flaxen.layer_math.pooling import avg_pool, max_pool, min_pool, pool

_ACTIVATIONS = (
    "celu", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh",
    "leaky_relu", "log_sigmoid", "log_softmax", "logsumexp", "normalize", "one_hot", "relu",
    "relu6", "selu", "sigmoid", "silu", "soft_sign", "softmax", "softplus", "standardize",
    "swish", "tanh",
)
globals().update({name: getattr(_activations, name) for name in _ACTIVATIONS})


_LAZY = {
    # loaded on first use: TrainState needs flaxen.struct, the interop modules flaxen.linen
    "TrainState": ("flaxen.nnx.training.train_state", "TrainState"),
    "compatibility": ("flaxen.nnx.compatibility", None),
    "bridge": ("flaxen.experimental.nnx._bridge", None),  # flaxen's pre-today wrappers
}

# Names Flax 0.12.8's flax.experimental.nnx has (there it re-exports all of flax.nnx) that
# Flax 0.8.3's did not: they are today's objects from flaxen.nnx, looked up on first use so
# this face imports nothing more. A 0.8.3 name defined above always wins over these.
_TODAY_NAMES = frozenset((
    # classes and values
    "A", "Bidirectional", "Carry", "ConvTranspose", "Data", "DiffState", "EMA", "FlatState",
    "GRUCell", "GraphState", "Initializer", "InstanceNorm", "LSTMCell", "LoRA", "LoRALinear",
    "LoRAParam", "M", "MergeContext", "ModelAndOptimizer", "NodeStates", "Object", "OptArray",
    "OptVariable", "OptimizedLSTMCell", "PReLU", "Perturbation", "PureState", "Pytree", "RNN",
    "RNNCellBase", "SimpleCell", "SpectralNorm", "SplitContext", "StateAxes", "StateSharding",
    "Static", "WeightNorm",
    # functions
    "as_abstract", "as_pure", "cached_partial", "call", "capture", "check_pytree", "checkify",
    "cond", "current_update_context", "custom_vjp", "data", "dataclass", "filter_state",
    "find_duplicates", "flatten", "fori_loop", "fork_rngs", "from_flat_state", "from_tree",
    "get_abstract_model", "has_data", "identity", "is_data", "iter_children", "iter_graph",
    "iter_module_children", "iter_modules", "jit_partial", "jvp", "logical_axis_rules",
    "make_jaxpr", "map", "map_state", "merge_context", "merge_state", "pmap", "prefix",
    "recursive_map", "register_data_type", "register_variable_name", "replace_by_pure_dict",
    "reseed", "restore_int_paths", "restore_rngs", "set_graph_mode", "set_graph_updates",
    "set_metadata", "shard_map", "split_context", "split_rngs", "split_state", "static",
    "switch", "tabulate", "to_flat_state", "to_pure_dict", "to_tree", "transform_metadata",
    "unflatten", "unpack", "update_context", "use_eager_sharding", "using_eager_sharding",
    "var_defaults", "variable_name_from_type", "variable_type_from_name", "variables", "view",
    "view_info", "vjp", "while_loop", "with_attributes", "with_rngs", "with_vars",
    # names Flax keeps as deprecated aliases (calling them warns, as in Flax)
    "abstract_with_sharding", "pure", "vars_as",
    # submodules
    "compat", "deprecations", "extract", "graphlib", "helpers", "optimizer", "proxy_caller",
    "pytreelib", "reprlib", "statelib", "summary", "tracers", "traversals", "variablelib",
    "wrappers",
))


def __getattr__(name: str):
    if name in _TODAY_NAMES:
        import flaxen.nnx as today

        value = getattr(today, name)
        globals()[name] = value
        return value
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'flaxen.experimental.nnx' has no attribute {name!r}")
    import importlib

    module_name, attr = target
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise AttributeError(
            f"module 'flaxen.experimental.nnx' has no attribute {name!r} ({module_name} is missing)"
        ) from e
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _TODAY_NAMES)


# reprs and pickles name 0.8.3 paths like flax.experimental.nnx.nnx.*
_sys.modules[__name__ + ".nnx"] = _sys.modules["flaxen.nnx"]
