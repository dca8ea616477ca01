"""The pure functions NNX shares with Linen (initializers, activations, dtypes, attention).

One place to import them from, so NNX never depends on Linen's Module system: only on its
stateless helper modules.
"""

from __future__ import annotations

from flaxen.linen import activation, dtypes, initializers, pooling  # noqa: F401

try:  # the public path once Linen's attention module exists
    from flaxen.linen.attention import (  # type: ignore[attr-defined]
        combine_masks,
        dot_product_attention,
        dot_product_attention_weights,
        make_attention_mask,
        make_causal_mask,
    )
except ImportError:
    from flaxen.linen._attention_fns import (
        combine_masks,
        dot_product_attention,
        dot_product_attention_weights,
        make_attention_mask,
        make_causal_mask,
    )

canonicalize_dtype = dtypes.canonicalize_dtype
promote_dtype = dtypes.promote_dtype

default_kernel_init = initializers.lecun_normal()
zeros_init = initializers.zeros_init
ones_init = initializers.ones_init

__all__ = [
    "activation",
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "initializers",
    "make_attention_mask",
    "make_causal_mask",
    "pooling",
]
