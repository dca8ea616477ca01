"""Attention: the pure attention functions and masks, and the attention Modules.

The functions live in ``flaxen.linen._attention_fns`` (no Module dependency, shared with
NNX) and are re-exported here under Flax's public path ``flaxen.linen.attention``.
``MultiHeadDotProductAttention`` projects inputs to per-head queries, keys and values with
``DenseGeneral`` layers named ``query``, ``key`` and ``value``, attends, and projects back
with ``out``: the parameter tree, names and RNG use are Flax's.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> layer = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8)
>>> x = jnp.ones((1, 5, 6))
>>> variables = layer.init(jax.random.PRNGKey(0), x)
>>> jax.tree.map(jnp.shape, variables['params']['query'])
{'bias': (2, 4), 'kernel': (6, 2, 4)}
>>> layer.apply(variables, x, mask=nn.make_causal_mask(x[..., 0])).shape
(1, 5, 6)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from flaxen import errors
from flaxen.linen import initializers
from flaxen.linen._attention_fns import (
    combine_masks,
    dot_product_attention,
    dot_product_attention_weights,
    make_attention_mask,
    make_causal_mask,
)
from flaxen.linen._layer_errors import LayerShapeError
from flaxen.linen.linear import DenseGeneral, default_kernel_init
from flaxen.linen.module import Module, compact, merge_param

Array = jax.Array
Dtype = Any
PRNGKey = Any
Shape = tuple[int, ...]
PrecisionLike = Any
DotGeneralT = Callable[..., Array]
Initializer = initializers.Initializer

__all__ = [
    "MultiHeadAttention",
    "MultiHeadDotProductAttention",
    "SelfAttention",
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
]


class DecodeCacheNotFoundError(errors.ScopeCollectionNotFound):
    """``decode=True`` attention was applied without its ``'cache'`` collection."""

    def __init__(self, col_name: str, var_name: str, scope_path: str) -> None:
        self.col_name, self.var_name, self.scope_path = col_name, var_name, scope_path
        errors.FlaxError.__init__(
            self,
            f'Tried to access "{var_name}" from collection "{col_name}" in "{scope_path}" '
            "but the collection is empty: attention with decode=True keeps its keys and "
            "values in the 'cache' collection and found none. Create the cache first with "
            "variables = module.init(rng, x) on an input of the full decoding length, then "
            "decode one step at a time with out, mutated = module.apply(variables, x_step, "
            "mutable=['cache']) and pass the returned mutated['cache'] to the next step.",
        )


class MultiHeadDotProductAttention(Module):
    """Multi-head dot-product attention.

    Attributes:
      num_heads: number of heads; ``qkv_features`` must be divisible by it.
      dtype: computation dtype (``None``: inferred from inputs and params).
      param_dtype: dtype of the parameters (float32).
      qkv_features: size of the projected queries/keys/values (default: the last axis of
        ``inputs_q``); ``out_features``: output size (default: the last axis of
        ``inputs_q``).
      broadcast_dropout, dropout_rate, deterministic: dropout on the attention weights
        (``deterministic`` given here or at call time; dropout draws the ``'dropout'``
        RNG).
      precision, kernel_init, out_kernel_init, bias_init, out_bias_init, use_bias: for the
        four ``DenseGeneral`` projections (``out_*`` default to the shared ones).
      attention_fn: ``dot_product_attention`` or a function with its signature.
      decode: autoregressive decoding with a ``'cache'`` collection holding
        ``cached_key``, ``cached_value`` and ``cache_index``.
      normalize_qk: apply a bias-less ``LayerNorm`` (``query_ln``, ``key_ln``) to the
        projected queries and keys.
      force_fp32_for_softmax: run the softmax in float32 for half-precision dtypes.
      qkv_dot_general, out_dot_general, qkv_dot_general_cls, out_dot_general_cls,
      qk_attn_weights_einsum_cls, attn_weights_value_einsum_cls: replace the matmuls.

    ``__call__(inputs_q, inputs_k=None, inputs_v=None, *, inputs_kv=None, mask=None,
    deterministic=None, dropout_rng=None, sow_weights=False)``: ``inputs_k`` defaults to
    ``inputs_q`` and ``inputs_v`` to ``inputs_k``; the documented ``inputs_kv=`` form
    sets both (deprecated, with a ``DeprecationWarning``). The third positional argument is
    ``inputs_v``, never the mask (an ``inputs_v`` square in its last two axes, mask-like, is
    warned about). Inputs are ``[batch..., length, features]``; ``mask`` broadcasts to
    ``[batch..., num_heads, q_length, kv_length]``. ``sow_weights=True`` stores the
    attention weights in the ``'intermediates'`` collection.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> q, kv = jnp.ones((2, 3, 8)), jnp.ones((2, 7, 5))
    >>> layer = nn.MultiHeadDotProductAttention(num_heads=4, out_features=6)
    >>> out, _ = layer.init_with_output(jax.random.PRNGKey(0), q, kv)
    >>> out.shape
    (2, 3, 6)
    """

    num_heads: int
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    qkv_features: int | None = None
    out_features: int | None = None
    broadcast_dropout: bool = True
    dropout_rate: float = 0.0
    deterministic: bool | None = None
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    out_kernel_init: Initializer | None = None
    bias_init: Initializer = initializers.zeros_init()
    out_bias_init: Initializer | None = None
    use_bias: bool = True
    attention_fn: Callable[..., Array] = dot_product_attention
    decode: bool = False
    normalize_qk: bool = False
    force_fp32_for_softmax: bool = False
    qkv_dot_general: DotGeneralT | None = None
    out_dot_general: DotGeneralT | None = None
    qkv_dot_general_cls: Any = None
    out_dot_general_cls: Any = None
    qk_attn_weights_einsum_cls: Callable[..., Callable[..., Array]] | None = None
    attn_weights_value_einsum_cls: Callable[..., Callable[..., Array]] | None = None

    @compact
    def __call__(
        self,
        inputs_q: Array,
        inputs_k: Array | None = None,
        inputs_v: Array | None = None,
        *,
        inputs_kv: Array | None = None,
        mask: Array | None = None,
        deterministic: bool | None = None,
        dropout_rng: PRNGKey | None = None,
        sow_weights: bool = False,
    ) -> Array:
        layer = type(self).__name__
        inputs_k, inputs_v = self._resolve_inputs(layer, inputs_q, inputs_k, inputs_v,
                                                  inputs_kv)
        for name, x in (("inputs_q", inputs_q), ("inputs_k", inputs_k), ("inputs_v", inputs_v)):
            if jnp.ndim(x) < 2:
                raise errors.MissingAxisError(  # an IndexError too, as Flax fails there
                    f"{layer}: {name} of shape {jnp.shape(x)} must be [batch..., length, "
                    "features] (at least 2 dimensions). Add the missing axis, e.g. x[None] "
                    "for a single sequence."
                )
        features = self.out_features or inputs_q.shape[-1]
        qkv_features = self.qkv_features or inputs_q.shape[-1]
        if qkv_features % self.num_heads:
            source = ("qkv_features" if self.qkv_features else
                      f"qkv_features (defaulting to inputs_q.shape[-1] of {inputs_q.shape})")
            raise LayerShapeError(
                f"{layer}: Memory dimension ({qkv_features}) must be divisible by number of "
                f"heads ({self.num_heads}): {source}={qkv_features} cannot be split into "
                f"num_heads={self.num_heads} equal heads. Pick qkv_features as a multiple of "
                "num_heads."
            )
        head_dim = qkv_features // self.num_heads

        def project(name: str, x: Array) -> Array:
            return DenseGeneral(
                features=(self.num_heads, head_dim), axis=-1, dtype=self.dtype,
                param_dtype=self.param_dtype, kernel_init=self.kernel_init,
                bias_init=self.bias_init, use_bias=self.use_bias, precision=self.precision,
                dot_general=self.qkv_dot_general, dot_general_cls=self.qkv_dot_general_cls,
                name=name,
            )(x)

        query = project("query", inputs_q)
        key = project("key", inputs_k)
        value = project("value", inputs_v)

        if self.normalize_qk:
            # Imported here: normalization is a sibling layer file, only needed on request.
            from flaxen.linen.normalization import LayerNorm

            query = LayerNorm(name="query_ln", use_bias=False)(query)
            key = LayerNorm(name="key_ln", use_bias=False)(key)

        if self.decode:
            key, value, mask = self._decode_step(layer, query, key, value, mask)

        if self.dropout_rate > 0.0:
            m_deterministic = merge_param("deterministic", self.deterministic, deterministic)
            if not m_deterministic and dropout_rng is None:
                dropout_rng = self.make_rng("dropout")
        else:
            m_deterministic = True

        extra: dict[str, Any] = {}
        # Passed only when set, so custom attention_fns without these arguments still work.
        if self.force_fp32_for_softmax:
            extra["force_fp32_for_softmax"] = True
        if self.qk_attn_weights_einsum_cls is not None:
            extra["qk_attn_weights_einsum"] = self.qk_attn_weights_einsum_cls()
        if self.attn_weights_value_einsum_cls is not None:
            extra["attn_weights_value_einsum"] = self.attn_weights_value_einsum_cls()
        if sow_weights:
            extra["module"] = self
        x = self.attention_fn(
            query, key, value, mask=mask, dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate, broadcast_dropout=self.broadcast_dropout,
            deterministic=m_deterministic, dtype=self.dtype, precision=self.precision,
            **extra,
        )
        return DenseGeneral(
            features=features, axis=(-2, -1),
            kernel_init=self.out_kernel_init or self.kernel_init,
            bias_init=self.out_bias_init or self.bias_init, use_bias=self.use_bias,
            dtype=self.dtype, param_dtype=self.param_dtype, precision=self.precision,
            dot_general=self.out_dot_general, dot_general_cls=self.out_dot_general_cls,
            name="out",
        )(x)

    @staticmethod
    def _resolve_inputs(layer, inputs_q, inputs_k, inputs_v, inputs_kv):
        if inputs_kv is not None:
            if inputs_k is not None or inputs_v is not None:
                raise ValueError(
                    f"{layer}: If either `inputs_k` or `inputs_v` is not None, `inputs_kv` "
                    "must be None. If `inputs_kv` is not None, both `inputs_k` and "
                    "`inputs_v` must be None. Pass keys and values either as inputs_kv=x "
                    "or as inputs_k=x (and optionally inputs_v=y), not both."
                )
            warnings.warn(
                "The inputs_kv arg will be deprecated soon. Use inputs_k and inputs_v "
                "instead (inputs_k=x alone sets both).",
                DeprecationWarning, stacklevel=3,
            )
            return inputs_kv, inputs_kv
        if inputs_k is None:
            if inputs_v is not None:
                raise ValueError(
                    f"{layer}: `inputs_k` cannot be None if `inputs_v` is not None. To "
                    "have both `inputs_k` and `inputs_v` be the same value, pass in the "
                    "value to `inputs_k` and leave `inputs_v` as None."
                )
            inputs_k = inputs_q
        if inputs_v is None:
            inputs_v = inputs_k
        elif jnp.ndim(inputs_v) >= 2 and inputs_v.shape[-1] == inputs_v.shape[-2]:
            warnings.warn(
                f"{layer}: inputs_v has shape {inputs_v.shape}, square in its last two "
                "axes, like a [q_length, kv_length] mask. As of Flax 0.7.4 the function "
                "signature of MultiHeadDotProductAttention's `__call__` method has changed "
                "to __call__(inputs_q, inputs_k=None, inputs_v=None, *, inputs_kv=None, "
                "mask=None, ...): the third positional argument is inputs_v. If this is a "
                "mask, pass it as mask=... .",
                DeprecationWarning, stacklevel=3,
            )
        return inputs_k, inputs_v

    def _decode_step(self, layer, query, key, value, mask):
        """Writes this step's key/value into the cache; returns the cached ones and mask."""
        is_initialized = self.has_variable("cache", "cached_key")
        if not is_initialized and not self.is_mutable_collection("cache"):
            raise DecodeCacheNotFoundError("cache", "cached_key", "/" + "/".join(self.path))
        cached_key = self.variable("cache", "cached_key", jnp.zeros, key.shape, key.dtype)
        cached_value = self.variable("cache", "cached_value", jnp.zeros, value.shape,
                                     value.dtype)
        cache_index = self.variable("cache", "cache_index",
                                    lambda: jnp.array(0, dtype=jnp.int32))
        if not is_initialized:
            return key, value, mask
        *batch_dims, max_length, num_heads, depth = cached_key.value.shape
        expected = tuple(batch_dims) + (1, num_heads, depth)
        if expected != query.shape:
            raise ValueError(
                f"Autoregressive cache shape error, expected query shape {expected} instead "
                f"got {query.shape}. {layer} with decode=True takes one position per call "
                f"(inputs of shape [batch..., 1, features]); the cache holds {max_length} "
                "positions. Initialize the cache with the full length and feed one step at "
                "a time."
            )
        cur_index = cache_index.value
        zero = jnp.array(0, dtype=lax.dtype(cur_index.dtype))
        indices = (zero,) * len(batch_dims) + (cur_index, zero, zero)
        key = lax.dynamic_update_slice(cached_key.value, key, indices)
        value = lax.dynamic_update_slice(cached_value.value, value, indices)
        cached_key.value = key
        cached_value.value = value
        cache_index.value = cache_index.value + 1
        # Attend only to the positions written so far.
        seen = jnp.broadcast_to(jnp.arange(max_length) <= cur_index,
                                tuple(batch_dims) + (1, 1, max_length))
        return key, value, combine_masks(mask, seen)


class MultiHeadAttention(MultiHeadDotProductAttention):
    """Multi-head attention: today's Flax name of :class:`MultiHeadDotProductAttention`.

    Same attributes, call signature and parameters; auto-named ``MultiHeadAttention_0``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> x = jnp.ones((1, 3, 4))
    >>> nn.MultiHeadAttention(num_heads=2).init_with_output(jax.random.PRNGKey(0), x)[0].shape
    (1, 3, 4)
    """


class SelfAttention(MultiHeadDotProductAttention):
    """Self-attention: :class:`MultiHeadDotProductAttention` with keys and values = queries.

    ``__call__(inputs_q, mask=None, deterministic=None, dropout_rng=None,
    sow_weights=False)``.

    >>> import jax, jax.numpy as jnp, warnings
    >>> import flaxen.linen as nn
    >>> x = jnp.ones((2, 5, 4))
    >>> with warnings.catch_warnings():  # every call warns: deprecated, as in Flax
    ...     warnings.simplefilter('ignore', DeprecationWarning)
    ...     out, _ = nn.SelfAttention(num_heads=2).init_with_output(jax.random.PRNGKey(0), x)
    >>> out.shape
    (2, 5, 4)
    """

    @compact
    def __call__(  # type: ignore[override]
        self,
        inputs_q: Array,
        mask: Array | None = None,
        deterministic: bool | None = None,
        dropout_rng: PRNGKey | None = None,
        sow_weights: bool = False,
    ) -> Array:
        # Every call warns, as in Flax.
        warnings.warn(
            "SelfAttention will be deprecated soon: call MultiHeadDotProductAttention with "
            "the queries alone (`MultiHeadDotProductAttention(...)(inputs_q)`), which attends "
            "the same way.",
            DeprecationWarning,
        )
        return super().__call__(inputs_q, mask=mask, deterministic=deterministic,
                                dropout_rng=dropout_rng, sow_weights=sow_weights)

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen.linen.dtypes import promote_dtype  # noqa: E402, F401
from flaxen.linen.normalization import LayerNorm  # noqa: E402, F401
