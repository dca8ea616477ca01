"""flaxen.nnx: Pythonic modules (plain objects holding Variables) and lifted transforms.

Follows today's ``flax.nnx`` (Flax 0.12.8); the spec's Flax 0.8.3 API stays at
``flaxen.experimental.nnx``, on the same engine.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> model(jnp.ones((1, 2))).shape
(1, 3)
"""

import sys as _sys

from flaxen.nnx import errors, filterlib
from flaxen.nnx import rnglib as rnglib
from flaxen.nnx import spmd as spmd
from flaxen.nnx.errors import TraceContextError
from flaxen.nnx.filterlib import All, Any, Everything, Not, Nothing, OfType, PathContains, WithTag
from flaxen.nnx.filterlib import PathIn as PathIn
from flaxen.nnx._graph_ops import GraphNode
from flaxen.nnx import graphlib as graphlib

# `flax.nnx.graph` is the same module as `flax.nnx.graphlib` in today's Flax
graph = graphlib
_sys.modules[__name__ + ".graph"] = graphlib
from flaxen.nnx import compat as compat
from flaxen.nnx.graphlib import (
    GraphDef,
    as_pure,
    pure,
    call,
    clone,
    GraphState,
    PureState,
    find_duplicates,
    flatten,
    is_graph_node,
    is_node,
    iter_children,
    iter_graph,
    iter_modules,
    map,
    merge,
    pop,
    recursive_map,
    split,
    state,
    unflatten,
    unpack,
    update,
    view,
    view_info,
    with_attributes,
)
from flaxen.nnx.graphlib import graphdef as graphdef
from flaxen.nnx._contexts import (
    MergeContext,
    SplitContext,
    UpdateContext,
    current_update_context,
    merge_context,
    split_context,
    update_context,
)
from flaxen.nnx._tree_convert import NodeStates, from_tree, to_tree
from flaxen.nnx.module import Dict, List, Module, Sequential, capture
from flaxen.nnx import pytreelib as pytreelib
from flaxen.nnx.pytreelib import (
    Data,
    Object,
    Pytree,
    PytreeMeta,
    check_pytree,
    data,
    dataclass,
    has_data,
    is_data,
    register_data_type,
    static,
)
from flaxen.nnx.pytreelib import Static as Static
from flaxen.nnx import nn as nn
from flaxen.nnx.nn import initializers as initializers
from flaxen.nnx.nn.activations import PReLU
from flaxen.nnx.nn.attention import (
    MultiHeadAttention,
    combine_masks,
    dot_product_attention,
    dot_product_attention_weights,
    make_attention_mask,
    make_causal_mask,
)
from flaxen.typing import Initializer as Initializer
from flaxen.nnx.nn.linear import Conv, ConvTranspose, Einsum, Embed, Linear, LinearGeneral
from flaxen.nnx.nn.lora import LoRA, LoRALinear, LoRAParam
from flaxen.nnx.nn.normalization import (
    BatchNorm,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    RMSNorm,
    SpectralNorm,
    WeightNorm,
)
from flaxen.nnx.nn.recurrent import (
    RNN,
    Bidirectional,
    GRUCell,
    LSTMCell,
    OptimizedLSTMCell,
    RNNCellBase,
    SimpleCell,
)
from flaxen.nnx.nn.stochastic import Dropout
from flaxen.nnx.rnglib import RngCount, RngKey, Rngs, RngState, RngStream, fork
from flaxen.nnx._rng_ops import (
    SplitBackups,
    backup_keys,
    fork_rngs,
    reseed,
    restore_rngs,
    split_rngs,
    with_rngs,
)
from flaxen.nnx.spmd import (
    PARTITION_NAME,
    abstract_with_sharding,
    as_abstract,
    get_abstract_model,
    get_named_sharding,
    get_partition_spec,
    logical_axis_rules,
    with_partitioning,
    with_sharding_constraint,
)
from flaxen.nnx import statelib as statelib
from flaxen.nnx import traversals as traversals
from flaxen.nnx.statelib import (
    FlatState,
    State,
    filter_state,
    from_flat_state,
    map_state,
    merge_state,
    replace_by_pure_dict,
    restore_int_paths,
    split_state,
    to_flat_state,
    to_pure_dict,
)
from flaxen.nnx._var_tools import set_metadata, with_vars
from flaxen.nnx.graphlib import vars_as  # Flax's deprecated alias: warns, then runs with_vars
from flaxen.nnx.training import metrics as metrics
from flaxen.nnx.training import optimizer as optimizer
from flaxen.nnx.training.ema import EMA
from flaxen.nnx.training.metrics import Accuracy, Average, Metric, MultiMetric
from flaxen.nnx.training.optimizer import (
    ModelAndOptimizer,
    OptArray,
    Optimizer,
    OptState,
    OptVariable,
)
from flaxen.nnx.transforms import eval_shape, grad, jit, value_and_grad
from flaxen.nnx.transforms import (  # today's compilation/autodiff/general faces
    DiffState,
    StateSharding,
    cached_partial,
    checkify,
    custom_vjp,
    jit_partial,
    jvp,
    make_jaxpr,
    vjp,
)
from flaxen.nnx.transforms.iteration import Carry, fori_loop, scan, while_loop
from flaxen.nnx.transforms.iteration import (  # today's vmap family (H4)
    StateAxes,
    pmap,
    prefix,
    transform_metadata,
    vmap,
)
from flaxen.nnx.transforms.transforms import cond, switch
from flaxen.nnx.transforms.autodiff import remat
from flaxen.nnx.transforms.compilation import shard_map
from flaxen.nnx import extract as extract
from flaxen.nnx._modes import set_graph_mode, set_graph_updates
from flaxen.nnx import variablelib as variablelib
from flaxen.nnx.variablelib import A as A  # the type variable of Variable[A]
from flaxen.nnx.variablelib import (
    EMPTY,
    BatchStat,
    Cache,
    Empty,
    Intermediate,
    Param,
    Perturbation,
    Variable,
    VariableMetadata,
    use_eager_sharding,
    using_eager_sharding,
    var_defaults,
    with_metadata,
)

from flaxen.nnx.visualization import display
from flaxen.nnx.summary import tabulate
from flaxen.nnx._variable_names import (
    register_variable_name,
    variable_name_from_type,
    variable_type_from_name,
)
from flaxen.nnx.graphlib import iter_module_children, variables
from flaxen.nnx.module import M as M
from jax.nn import identity
from flaxen.nnx import deprecations as deprecations
from flaxen.nnx import proxy_caller as proxy_caller
from flaxen.nnx import reprlib as reprlib
from flaxen.nnx import tracers as tracers

# the pure functions shared with Linen (flaxen.layer_math: no Linen import)
from flaxen.layer_math import activations as _activations
from flaxen.layer_math.pooling import avg_pool, max_pool, min_pool, pool

_ACTIVATIONS = (
    "celu", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh",
    "leaky_relu", "log_sigmoid", "log_softmax", "logsumexp", "normalize", "one_hot", "relu",
    "relu6", "selu", "sigmoid", "silu", "soft_sign", "softmax", "softplus", "standardize",
    "swish", "tanh",
)
globals().update({name: getattr(_activations, name) for name in _ACTIVATIONS})


# Each class carries the module path Flax 0.12.8 gives it (where it is re-exported), so reprs,
# treescope and pickles name e.g. flaxen.nnx.transforms.iteration.StateAxes as Flax does;
# the code itself lives in flaxen's private files.
def _set_public_homes() -> None:
    homes = {
        "flaxen.nnx.transforms.iteration": (StateAxes, Carry),
        "flaxen.nnx.nn.linear": (Conv, ConvTranspose),
        "flaxen.nnx.nn.recurrent": (RNN, Bidirectional),
        "flaxen.nnx.nn.normalization": (SpectralNorm, WeightNorm),
        "flaxen.nnx.helpers": (Dict, List, Sequential),
        "flaxen.nnx.graphlib": (GraphState, MergeContext, SplitContext, UpdateContext,
                                set_graph_mode, set_graph_updates),
        "flaxen.nnx.extract": (NodeStates,),
        "flaxen.nnx.variablelib": (use_eager_sharding,),
    }
    for module_name, classes in homes.items():
        for cls in classes:
            cls.__module__ = module_name


_set_public_homes()

# Loaded with the package, as in Flax: Dict, List and Sequential name it as their module,
# and tools that resolve a class by its module (treescope's reprs) look in sys.modules.
from flaxen.nnx import helpers as helpers  # noqa: E402
from flaxen.nnx.training.train_state import TrainState as TrainState  # noqa: E402

# Flax 0.12.8 also publishes its pytreelib module under the old name ``nnx.object``
# (``nnx.object.Object``); bound last, as it shadows the builtin in this namespace
from flaxen.nnx import pytreelib as object  # noqa: E402, A004

_LAZY = {
    # loaded on first use: the interop modules need flaxen.linen
    "compatibility": ("flaxen.nnx.compatibility", None),
    "bridge": ("flaxen.nnx.bridge", None),
    "wrappers": ("flaxen.nnx.bridge.wrappers", None),
}


def __getattr__(name: str):
    if name == "VariableState":  # as in Flax 0.12.8: an alias kept for old code, with a notice
        import warnings

        warnings.warn("nnx.VariableState was folded into nnx.Variable (a State's leaves are "
                      "Variables); this name is an alias of Variable. Use nnx.Variable.",
                      DeprecationWarning, stacklevel=2)
        return Variable
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'flaxen.nnx' has no attribute {name!r}")
    import importlib

    module_name, attr = target
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise AttributeError(
            f"module 'flaxen.nnx' has no attribute {name!r} ({module_name} is missing)"
        ) from e
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value
