"""Attention: the pure attention functions and masks, and the attention Modules.

The functions live in ``flaxen.linen._attention_fns`` (no Module dependency, shared with
NNX) and are re-exported here under Flax's public path ``flaxen.linen.attention``.

>>> import jax.numpy as jnp
>>> from flaxen.linen.attention import make_causal_mask
>>> make_causal_mask(jnp.ones((2, 4))).shape
(2, 1, 4, 4)
"""

from __future__ import annotations

from flaxen.linen._attention_fns import (
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
