"""flaxen.linen: Modules, layers and lifted transforms, with Flax Linen's public names.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> class Scale(nn.Module):
...     @nn.compact
...     def __call__(self, x):
...         return x * self.param('scale', nn.initializers.ones, x.shape[-1:])
>>> variables = Scale().init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
>>> Scale().apply(variables, jnp.ones((1, 2))).shape
(1, 2)
"""

from flaxen.core import DenyList, FrozenDict
from flaxen.linen.module import (
    InterceptorContext,
    Module,
    Variable,
    apply,
    compact,
    compact_name_scope,
    disable_named_call,
    enable_named_call,
    init,
    init_with_output,
    intercept_methods,
    merge_param,
    named_call,
    nowrap,
    override_named_call,
    share_scope,
)
from flaxen.linen.summary import tabulate

# --- layers (edited by the layers helpers) ---
from flaxen.linen import initializers
from flaxen.linen.activation import (
    PReLU,
    celu,
    elu,
    gelu,
    glu,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    logsumexp,
    normalize,
    one_hot,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    standardize,
    swish,
    tanh,
)
from flaxen.linen.initializers import ones, ones_init, zeros, zeros_init
from flaxen.linen.linear import Conv, ConvLocal, ConvTranspose, Dense, DenseGeneral, Einsum, Embed
from flaxen.linen.normalization import (
    BatchNorm,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    RMSNorm,
    SpectralNorm,
    WeightNorm,
)
from flaxen.linen.pooling import avg_pool, max_pool, pool
from flaxen.linen.stochastic import Dropout
from flaxen.linen.combinators import Sequential
from flaxen.linen.attention import (
    MultiHeadAttention,
    MultiHeadDotProductAttention,
    SelfAttention,
    combine_masks,
    dot_product_attention,
    dot_product_attention_weights,
    make_attention_mask,
    make_causal_mask,
)
from flaxen.linen.recurrent import (
    RNN,
    Bidirectional,
    ConvLSTMCell,
    GRUCell,
    LSTMCell,
    MGUCell,
    OptimizedLSTMCell,
    RNNCellBase,
    SimpleCell,
)
from flaxen.linen import fp8_ops, kw_only_dataclasses
from flaxen.linen.batch_apply import BatchApply
from flaxen.linen.fp8_ops import (
    Fp8DirectDotGeneralOp,
    Fp8DotGeneral,
    Fp8DotGeneralOp,
    Fp8Einsum,
    NANOOFp8DotGeneralOp,
)
# --- end layers ---

# --- spmd (edited by the lead) ---
from flaxen.core import meta
from flaxen.core.meta import (
    PARTITION_NAME,
    Partitioned,
    get_partition_spec,
    get_sharding,
    unbox,
    with_partitioning,
)
from flaxen.linen.spmd import (
    LogicallyPartitioned,
    RulesFallback,
    get_logical_axis_rules,
    logical_axis_rules,
    logical_to_mesh,
    logical_to_mesh_axes,
    logical_to_mesh_sharding,
    set_logical_axis_rules,
    with_logical_constraint,
    with_logical_partitioning,
)
# --- end spmd ---

# --- transforms (edited by the transforms helper) ---
from flaxen.core.axes_scan import broadcast
from flaxen.linen import partitioning, transforms
from flaxen.linen.transforms import (
    add_metadata_axis,
    checkpoint,
    cond,
    custom_vjp,
    fold_rngs,
    grad,
    jit,
    jvp,
    map_variables,
    remat,
    remat_scan,
    scan,
    switch,
    value_and_grad,
    vjp,
    vmap,
    while_loop,
)
# --- end transforms ---
