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
# --- end layers ---
