"""Linen's path for the pure attention functions. They live in
:mod:`flaxen.layer_math.attention` (shared with NNX); ``flaxen.linen.attention`` re-exports
them under Flax's public path. Tune or patch the blockwise/fused dispatch there.

>>> import jax.numpy as jnp
>>> from flaxen.linen._attention_fns import dot_product_attention
>>> dot_product_attention(jnp.ones((1, 2, 1, 4)), jnp.ones((1, 3, 1, 4)),
...                       jnp.ones((1, 3, 1, 4))).shape
(1, 2, 1, 4)
"""

from flaxen.layer_math.attention import (
    combine_masks,
    dot_product_attention,
    dot_product_attention_weights,
    make_attention_mask,
    make_causal_mask,
)

__all__ = [
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
]
