"""``nnx.MultiHeadAttention`` with an optional autoregressive key/value cache.

Projections are :class:`~flaxen.nnx.LinearGeneral` submodules ``query``, ``key``, ``value``
(``in_features -> (num_heads, head_dim)``) and ``out``; the attention math is
:mod:`flaxen.layer_math.attention`, the functions Linen's attention uses too.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> mha = nnx.MultiHeadAttention(2, 4, decode=False, rngs=nnx.Rngs(0))
>>> mha(jnp.ones((1, 3, 4))).shape
(1, 3, 4)
"""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.layer_math import initializers
from flaxen.layer_math.attention import combine_masks, dot_product_attention
from flaxen.nnx.module import Module
from flaxen.nnx.nn.linear import LinearGeneral, default_kernel_init
from flaxen.nnx.nn.normalization import LayerNorm
from flaxen.nnx.rnglib import Rngs
from flaxen.nnx.variables import Cache, Intermediate

Array = jax.Array


class _IntermediateSink:
    """Lets the shared attention functions sow their weights into an NNX module.

    They call ``module.sow('intermediates', name, value)`` (Linen's signature); NNX records
    the value as an :class:`~flaxen.nnx.Intermediate` attribute of the layer instead.
    """

    __slots__ = ("module",)

    def __init__(self, module: Module) -> None:
        self.module = module

    def sow(self, collection: str, name: str, value: tp.Any, *args: tp.Any, **kw: tp.Any) -> bool:
        del collection, args, kw
        self.module.sow(Intermediate, name, value)
        return True


class MultiHeadAttention(Module):
    """Multi-head dot-product attention; ``decode=True`` uses the cache from ``init_cache``."""

    def __init__(
        self,
        num_heads: int,
        in_features: int,
        qkv_features: int | None = None,
        out_features: int | None = None,
        *,
        dtype: tp.Any = None,
        param_dtype: tp.Any = jnp.float32,
        broadcast_dropout: bool = True,
        dropout_rate: float = 0.0,
        deterministic: bool | None = None,
        precision: tp.Any = None,
        kernel_init: tp.Callable[..., Array] = default_kernel_init,
        bias_init: tp.Callable[..., Array] = initializers.zeros_init(),
        use_bias: bool = True,
        attention_fn: tp.Callable[..., Array] = dot_product_attention,
        decode: bool | None = None,
        normalize_qk: bool = False,
        rngs: Rngs,
    ) -> None:
        self.num_heads = num_heads
        self.in_features = in_features
        self.qkv_features = qkv_features if qkv_features is not None else in_features
        self.out_features = out_features if out_features is not None else in_features
        if self.qkv_features % num_heads:
            raise ValueError(
                f"MultiHeadAttention: qkv_features ({self.qkv_features}) must be divisible by "
                f"num_heads ({num_heads})."
            )
        self.head_dim = self.qkv_features // num_heads
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.broadcast_dropout = broadcast_dropout
        self.dropout_rate = dropout_rate
        self.deterministic = deterministic
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.use_bias = use_bias
        self.attention_fn = attention_fn
        self.decode = decode
        self.normalize_qk = normalize_qk
        proj = functools.partial(
            LinearGeneral, in_features, (num_heads, self.head_dim), dtype=dtype,
            param_dtype=param_dtype, kernel_init=kernel_init, bias_init=bias_init,
            use_bias=use_bias, precision=precision,
        )
        self.query = proj(rngs=rngs)
        self.key = proj(rngs=rngs)
        self.value = proj(rngs=rngs)
        if normalize_qk:
            self.query_ln = LayerNorm(self.head_dim, use_bias=False, dtype=dtype,
                                      param_dtype=param_dtype, rngs=rngs)
            self.key_ln = LayerNorm(self.head_dim, use_bias=False, dtype=dtype,
                                    param_dtype=param_dtype, rngs=rngs)
        else:
            self.query_ln = None
            self.key_ln = None
        self.out = LinearGeneral(
            (num_heads, self.head_dim), self.out_features, axis=(-2, -1), dtype=dtype,
            param_dtype=param_dtype, kernel_init=kernel_init, bias_init=bias_init,
            use_bias=use_bias, precision=precision, rngs=rngs,
        )
        self.cached_key: Cache | None = None
        self.cached_value: Cache | None = None
        self.cache_index: Cache | None = None

    def init_cache(self, input_shape: tp.Sequence[int], dtype: tp.Any = jnp.float32) -> None:
        """Creates zeroed caches for decoding inputs of ``input_shape`` (batch..., length, f)."""
        cache_shape = (*input_shape[:-1], self.num_heads, self.head_dim)
        self.cached_key = Cache(jnp.zeros(cache_shape, dtype))
        self.cached_value = Cache(jnp.zeros(cache_shape, dtype))
        self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))

    def __call__(
        self,
        inputs_q: Array,
        inputs_k: Array | None = None,
        inputs_v: Array | None = None,
        *,
        mask: Array | None = None,
        deterministic: bool | None = None,
        rngs: Rngs | None = None,
        sow_weights: bool = False,
        decode: bool | None = None,
    ) -> Array:
        if inputs_k is None:
            if inputs_v is not None:
                raise ValueError(
                    "MultiHeadAttention: inputs_v was given without inputs_k; pass both "
                    "(or neither, for self-attention)."
                )
            inputs_k = inputs_q
        if inputs_v is None:
            inputs_v = inputs_k
        if inputs_q.shape[-1] != self.in_features:
            raise ValueError(
                f"MultiHeadAttention: inputs_q has {inputs_q.shape[-1]} features, expected "
                f"in_features={self.in_features}."
            )
        query = self.query(inputs_q)
        key = self.key(inputs_k)
        value = self.value(inputs_v)
        if self.normalize_qk:
            query = self.query_ln(query)
            key = self.key_ln(key)

        decode = self.decode if decode is None else decode
        if decode:
            if self.cached_key is None or self.cache_index is None:
                raise ValueError(
                    "MultiHeadAttention: decode=True needs a cache; call "
                    "module.init_cache(input_shape) first."
                )
            *batch_dims, max_length, num_heads, depth = self.cached_key.value.shape
            expected = (*batch_dims, 1, num_heads, depth)
            if expected != query.shape:
                raise ValueError(
                    "MultiHeadAttention: in decode mode each call takes one step: expected "
                    f"query of shape {expected}, got {query.shape}."
                )
            cur = self.cache_index.value
            zero = jnp.array(0, dtype=cur.dtype)
            indices = (zero,) * len(batch_dims) + (cur, zero, zero)
            key = lax.dynamic_update_slice(self.cached_key.value, key, indices)
            value = lax.dynamic_update_slice(self.cached_value.value, value, indices)
            self.cached_key.value = key
            self.cached_value.value = value
            self.cache_index.value = cur + 1
            # attend only to the filled cache positions
            pos_mask = jnp.broadcast_to(
                jnp.arange(max_length) <= cur, (*batch_dims, 1, 1, max_length)
            )
            mask = combine_masks(mask, pos_mask)

        det = self.deterministic if deterministic is None else deterministic
        if det is None:
            det = True
        dropout_rng = None
        if self.dropout_rate > 0.0 and not det:
            if rngs is None:
                raise ValueError(
                    "MultiHeadAttention: dropout_rate > 0 and not deterministic needs "
                    "rngs=nnx.Rngs(dropout=...) in the call."
                )
            dropout_rng = rngs.dropout()

        # the weights are sown only when asked: passing a module costs the fused paths
        extra = {"module": _IntermediateSink(self)} if sow_weights else {}
        x = self.attention_fn(
            query, key, value, mask=mask, dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate, broadcast_dropout=self.broadcast_dropout,
            deterministic=det, dtype=self.dtype, precision=self.precision, **extra,
        )
        return self.out(x)
