"""Today's ``nnx.dot_product_attention`` (``is_causal``, grouped-query heads, weights sown into
an NNX module) and ``nnx.MultiHeadAttention`` with an optional autoregressive cache.

The attention math is :mod:`flaxen.layer_math.attention`, the functions Linen's attention
runs, so ``nnx.MultiHeadAttention`` and ``linen.MultiHeadDotProductAttention`` with the same
parameters compute the same numbers. Grouped-query attention (fewer key/value heads than
query heads) repeats each key/value head for its group of query heads before that math.
Projections are :class:`~flaxen.nnx.LinearGeneral` submodules ``query``, ``key``,
``value`` and ``out``.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> mha = nnx.MultiHeadAttention(2, 4, decode=False, rngs=nnx.Rngs(0))
>>> mha(jnp.ones((1, 3, 4))).shape
(1, 3, 4)
"""

from __future__ import annotations

import functools
import typing as tp
from types import MappingProxyType

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.layer_math import attention as am
from flaxen.layer_math import initializers
from flaxen.layer_math.attention import combine_masks, make_attention_mask, make_causal_mask
from flaxen.layer_math.errors import LayerShapeError
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import data
from flaxen.nnx.nn.linear import LinearGeneral, default_kernel_init
from flaxen.nnx.nn.normalization import LayerNorm
from flaxen.nnx.rnglib import Rngs, RngStream
from flaxen.nnx.variablelib import Cache, Intermediate
from flaxen.typing import DotGeneralT as DotGeneralT  # Flax imports it here from flax.typing
from flaxen.typing import Dtype, Initializer, PrecisionLike, Shape

Array = jax.Array
PromoteDtypeFn = tp.Callable[..., tp.Any]
_NO_META: tp.Mapping[str, tp.Any] = MappingProxyType({})

__all__ = [
    "MultiHeadAttention", "combine_masks", "dot_product_attention",
    "dot_product_attention_weights", "make_attention_mask", "make_causal_mask",
]


def _explicit(sharding: tp.Any) -> bool:
    """Whether ``sharding`` lives on a mesh with explicit axes (then ops need out_sharding)."""
    mesh = getattr(sharding, "mesh", None)
    return bool(getattr(mesh, "explicit_axes", ()))


class _IntermediateSink:
    """Lets the shared attention math sow its weights into an NNX module.

    The math calls ``module.sow('intermediates', name, value)`` (Linen's signature); NNX
    records the value as an :class:`~flaxen.nnx.Intermediate` of the module instead.
    """

    __slots__ = ("module",)

    def __init__(self, module: tp.Any) -> None:
        self.module = module

    def sow(self, collection: str, name: str, value: tp.Any, *args: tp.Any, **kw: tp.Any) -> bool:
        del collection, args, kw
        self.module.sow(Intermediate, name, value)
        return True


def _group_heads(fn: str, query: Array, kv: Array, name: str) -> Array:
    """Repeats the key/value heads of ``kv`` so each query head has its own."""
    q_heads, kv_heads = query.shape[-2], kv.shape[-2]
    if q_heads == kv_heads:
        return kv
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(
            f"{fn}: Query heads ({q_heads}) must be a multiple of {name} heads ({kv_heads}) "
            "for grouped-query attention; give the projections head counts that divide."
        )
    # the repeated heads keep kv's sharding (needed on explicit-sharding meshes)
    sharding = getattr(jax.typeof(kv), "sharding", None)
    kw = {"out_sharding": sharding} if _explicit(sharding) else {}
    return jnp.repeat(kv, q_heads // kv_heads, axis=-2, **kw)


def _causal(mask: Array | None, query: Array, key: Array) -> Array:
    q_len, kv_len = query.shape[-3], key.shape[-3]
    causal = jnp.tril(jnp.ones((q_len, kv_len), dtype=jnp.bool_))
    target = mask.shape if mask is not None else (*query.shape[:-3], query.shape[-2],
                                                  q_len, kv_len)
    return jnp.broadcast_to(causal, target)


def _prepare(fn, query, key, value, mask, module, is_causal, promote_dtype, dtype):
    args = (query, key) if value is None else (query, key, value)
    promoted = promote_dtype(args, dtype=dtype)
    query, key = promoted[0], promoted[1]
    value = promoted[2] if value is not None else None
    am.check_qkv(fn, query, key, value, grouped_heads=True)
    key = _group_heads(fn, query, key, "Key")
    if value is not None:
        value = _group_heads(fn, query, value, "Value")
    if is_causal:
        mask = combine_masks(mask, _causal(mask, query, key), dtype=query.dtype)
    sink = _IntermediateSink(module) if module is not None else None
    return query, key, value, mask, sink


def dot_product_attention_weights(
    query: Array,
    key: Array,
    bias: Array | None = None,
    mask: Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: PrecisionLike = None,
    module: Module | None = None,
    promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
    is_causal: bool = False,
) -> Array:
    """Attention weights ``[batch..., num_heads, q_length, kv_length]``; sown into ``module``
    (as ``Intermediate`` ``'attention_weights'``) when one is given.

    >>> import jax.numpy as jnp
    >>> w = dot_product_attention_weights(jnp.ones((3, 2, 4)), jnp.ones((3, 2, 4)), is_causal=True)
    >>> w[0, 0].tolist()
    [1.0, 0.0, 0.0]
    """
    fn = "dot_product_attention_weights"
    query, key, _, mask, sink = _prepare(
        fn, query, key, None, mask, module, is_causal, promote_dtype, dtype
    )
    return am.dot_product_attention_weights(
        query, key, bias, mask, broadcast_dropout, dropout_rng, dropout_rate, deterministic,
        query.dtype, precision, sink,
    )


def _jax_attention(fn, query, key, value, bias, mask, promote_dtype, dtype, is_causal):
    """``jax.nn.dot_product_attention`` on inputs with their batch axes folded into one.

    Flax's NNX takes JAX's function whenever no dropout and no sown weights are asked for
    (``precision`` is then not used), so its outputs round as JAX's do; taking the same
    function keeps flaxen's bit-identical to them. JAX's function handles grouped heads
    and ``is_causal`` itself.
    """
    query, key, value = promote_dtype((query, key, value), dtype=dtype)
    am.check_qkv(fn, query, key, value, grouped_heads=True)
    if key.shape[-3] != value.shape[-3]:
        raise LayerShapeError(
            f"{fn}: k, v lengths must match, but got {key.shape[-3]} and {value.shape[-3]}. "
            "Give key and value the same length axis.")
    q_heads, kv_heads = query.shape[-2], key.shape[-2]
    if kv_heads == 0 or q_heads % kv_heads or value.shape[-2] != kv_heads:
        raise LayerShapeError(
            f"{fn}: The number of query heads must be a multiple of key/value heads, but got "
            f"{q_heads} query, {kv_heads} key and {value.shape[-2]} value heads. Give key and "
            "value the same head count, one that divides the query's.")
    shape = query.shape
    if len(shape) > 4:  # JAX's function takes one batch axis at most
        def fold(x: Array | None) -> Array | None:
            return None if x is None else x.reshape((-1, *x.shape[-3:]))

        query, key, value, bias, mask = map(fold, (query, key, value, bias, mask))
    if mask is not None:
        mask = mask.astype(jnp.bool_)
    out = jax.nn.dot_product_attention(query, key, value, bias, mask, is_causal=is_causal)
    return out.reshape(shape[:-1] + out.shape[-1:]) if len(shape) > 4 else out


def dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    bias: Array | None = None,
    mask: Array | None = None,
    broadcast_dropout: bool = True,
    dropout_rng: Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: PrecisionLike = None,
    module: Module | None = None,
    promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
    is_causal: bool = False,
) -> Array:
    """Dot-product attention ``[batch..., q_length, num_heads, v_depth]``.

    ``key``/``value`` may have fewer heads than ``query`` (a divisor: grouped-query
    attention); ``is_causal`` adds a lower-triangular mask; ``module`` receives the weights
    as an ``Intermediate`` named ``'attention_weights'``.

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 3, 4, 8)); kv = jnp.ones((1, 5, 2, 8))
    >>> dot_product_attention(q, kv, kv).shape
    (1, 3, 4, 8)
    """
    if dropout_rate == 0.0 and module is None:
        return _jax_attention("dot_product_attention", query, key, value, bias, mask,
                              promote_dtype, dtype, is_causal)
    return weights_then_values(
        query, key, value, bias, mask, broadcast_dropout, dropout_rng, dropout_rate,
        deterministic, dtype, precision, module, promote_dtype, is_causal)


def weights_then_values(
    query: Array, key: Array, value: Array, bias: Array | None = None,
    mask: Array | None = None, broadcast_dropout: bool = True,
    dropout_rng: Array | None = None, dropout_rate: float = 0.0, deterministic: bool = False,
    dtype: Dtype | None = None, precision: PrecisionLike = None, module: Module | None = None,
    promote_dtype: PromoteDtypeFn = dtypes.promote_dtype, is_causal: bool = False,
) -> Array:
    """:func:`dot_product_attention` always computed as Linen does: the weights, then an
    einsum with ``value`` (the 0.8.3 face's attention; today's with dropout or a sow)."""
    fn = "dot_product_attention"
    query, key, value, mask, sink = _prepare(
        fn, query, key, value, mask, module, is_causal, promote_dtype, dtype
    )
    return am.dot_product_attention(
        query, key, value, bias, mask, broadcast_dropout, dropout_rng, dropout_rate,
        deterministic, query.dtype, precision, sink,
    )


class MultiHeadAttention(Module):
    """Multi-head dot-product attention; ``decode=True`` uses the cache from ``init_cache``.

    ``num_kv_heads`` (default ``num_heads``) gives grouped-query attention;
    ``in_kv_features`` the key/value inputs' size. With ``dropout_rate > 0`` and
    ``keep_rngs`` the layer keeps a fork of ``rngs.dropout`` as ``self.rngs``.
    """

    def __init__(
        self,
        num_heads: int,
        in_features: int,
        qkv_features: int | None = None,
        out_features: int | None = None,
        num_kv_heads: int | None = None,
        in_kv_features: int | None = None,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        broadcast_dropout: bool = True,
        dropout_rate: float = 0.0,
        deterministic: bool | None = None,
        precision: PrecisionLike = None,
        kernel_init: Initializer = default_kernel_init,
        out_kernel_init: Initializer | None = None,
        bias_init: Initializer = initializers.zeros_init(),
        out_bias_init: Initializer | None = None,
        use_bias: bool = True,
        attention_fn: tp.Callable[..., Array] = dot_product_attention,
        decode: bool | None = None,
        normalize_qk: bool = False,
        qkv_promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        out_promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        ln_promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        qkv_dot_general: tp.Any = None,
        out_dot_general: tp.Any = None,
        qkv_dot_general_cls: tp.Any = None,
        out_dot_general_cls: tp.Any = None,
        rngs: Rngs,
        keep_rngs: bool = True,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        out_kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        out_bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        query_ln_scale_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        key_ln_scale_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        self.num_heads = num_heads
        self.in_features = in_features
        self.qkv_features = qkv_features if qkv_features is not None else in_features
        self.out_features = out_features if out_features is not None else in_features
        self.in_kv_features = in_kv_features if in_kv_features is not None else in_features
        self.num_kv_heads = num_kv_heads if num_kv_heads is not None else num_heads
        if num_heads % self.num_kv_heads:
            raise ValueError(
                f"MultiHeadAttention: num_heads ({num_heads}) must be divisible by "
                f"num_kv_heads ({self.num_kv_heads}): each key/value head serves a group of "
                "query heads."
            )
        if self.qkv_features % num_heads:
            raise ValueError(
                f"MultiHeadAttention: Memory dimension ({self.qkv_features}) must be divisible "
                f"by 'num_heads' heads ({num_heads}); pick qkv_features as a multiple of it."
            )
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.broadcast_dropout = broadcast_dropout
        self.dropout_rate = dropout_rate
        self.deterministic = deterministic
        self.precision = precision
        self.use_bias = use_bias
        self.attention_fn = attention_fn
        self.decode = decode
        self.normalize_qk = normalize_qk
        self.qkv_promote_dtype = qkv_promote_dtype
        self.out_promote_dtype = out_promote_dtype
        self.ln_promote_dtype = ln_promote_dtype
        self.qkv_dot_general = qkv_dot_general
        self.out_dot_general = out_dot_general
        self.qkv_dot_general_cls = qkv_dot_general_cls
        self.out_dot_general_cls = out_dot_general_cls
        # after the settings, as Flax orders them (repr / treescope list this order)
        self.head_dim = self.qkv_features // num_heads
        proj = functools.partial(
            LinearGeneral, dtype=dtype, param_dtype=param_dtype, kernel_init=kernel_init,
            bias_init=bias_init, use_bias=use_bias, precision=precision,
            promote_dtype=qkv_promote_dtype, dot_general=qkv_dot_general,
            dot_general_cls=qkv_dot_general_cls, kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata,
        )
        self.query = proj(in_features, (num_heads, self.head_dim), rngs=rngs)
        self.key = proj(self.in_kv_features, (self.num_kv_heads, self.head_dim), rngs=rngs)
        self.value = proj(self.in_kv_features, (self.num_kv_heads, self.head_dim), rngs=rngs)
        if normalize_qk:
            ln = functools.partial(
                LayerNorm, self.head_dim, use_bias=False, dtype=dtype, param_dtype=param_dtype,
                promote_dtype=ln_promote_dtype, rngs=rngs,
            )
            self.query_ln = ln(scale_metadata=query_ln_scale_metadata)
            self.key_ln = ln(scale_metadata=key_ln_scale_metadata)
        else:
            self.query_ln = data(None)
            self.key_ln = data(None)
        self.out = LinearGeneral(
            (num_heads, self.head_dim), self.out_features, axis=(-2, -1),
            kernel_init=out_kernel_init or kernel_init, bias_init=out_bias_init or bias_init,
            use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, precision=precision,
            promote_dtype=out_promote_dtype, dot_general=out_dot_general,
            dot_general_cls=out_dot_general_cls, rngs=rngs,
            kernel_metadata=out_kernel_metadata or kernel_metadata,
            bias_metadata=out_bias_metadata or bias_metadata,
        )
        # RngStream.fork explicitly: the 0.8.3 face's stream subclass forks into keys
        keep = keep_rngs and dropout_rate > 0
        self.rngs = RngStream.fork(rngs.dropout) if keep else data(None)
        self.cached_key = data(None)
        self.cached_value = data(None)
        self.cache_index = data(None)

    def init_cache(self, input_shape: Shape, dtype: Dtype = jnp.float32) -> None:
        """Creates zeroed caches for decoding inputs of ``input_shape`` (batch..., length, f)."""
        cache_shape = (*input_shape[:-1], self.num_kv_heads, self.head_dim)
        self.cached_key = Cache(jnp.zeros(cache_shape, dtype))
        self.cached_value = Cache(jnp.zeros(cache_shape, dtype))
        self.cache_index = Cache(jnp.array(0, dtype=jnp.int32))

    def set_view(
        self,
        deterministic: bool | None = None,
        decode: bool | None = None,
        batch_size: int | Shape | None = None,
        max_length: int | None = None,
    ) -> None:
        """Hook of ``nnx.view``.

        Args:
          deterministic: if given, whether attention dropout is off (True) or on.
          decode: if given, whether calls decode one step at a time from the cache.
          batch_size: batch size (int or shape) of the cache a decode view creates when the
            layer has none yet.
          max_length: length of that cache.
        """
        if deterministic is not None:
            self.deterministic = deterministic
        if decode is not None:
            self.decode = decode
            if decode and self.cached_key is None:
                if batch_size is None or max_length is None:
                    raise TypeError(
                        "MultiHeadAttention: 'batch_size' and 'max_length' must be provided "
                        "when initializing cache (nnx.view(model, decode=True, batch_size=..., "
                        "max_length=...)), or call init_cache(input_shape) first."
                    )
                batch = (batch_size,) if isinstance(batch_size, int) else tuple(batch_size)
                self.init_cache((*batch, max_length, self.in_features), self.dtype or jnp.float32)

    def __call__(
        self,
        inputs_q: Array,
        inputs_k: Array | None = None,
        inputs_v: Array | None = None,
        *,
        mask: Array | None = None,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | None = None,
        sow_weights: bool = False,
        decode: bool | None = None,
        is_causal: bool = False,
        out_sharding: tp.Any = None,
        qkv_sharding: tp.Any = None,
    ) -> Array:
        """Attends ``inputs_q`` to ``inputs_k``/``inputs_v`` (self-attention when omitted)."""
        if rngs is None:
            rngs = self.rngs
        elif isinstance(rngs, Rngs):
            rngs = rngs.dropout
        if inputs_k is None:
            if inputs_v is not None:
                raise ValueError(
                    "MultiHeadAttention: `inputs_k` cannot be None if `inputs_v` is not None; "
                    "pass the same array as inputs_k and leave inputs_v as None."
                )
            inputs_k = inputs_q
        if inputs_v is None:
            inputs_v = inputs_k
        if inputs_q.shape[-1] != self.in_features:
            raise ValueError(
                f"MultiHeadAttention: Incompatible input dimension, got {inputs_q.shape[-1]} "
                f"but module expects {self.in_features} (in_features)."
            )
        query = self.query(inputs_q, out_sharding=qkv_sharding)
        key = self.key(inputs_k, out_sharding=qkv_sharding)
        value = self.value(inputs_v, out_sharding=qkv_sharding)
        if self.normalize_qk:
            query = self.query_ln(query)
            key = self.key_ln(key)

        decode = self.decode if decode is None else decode
        if decode:
            mask = self._decode_step(key, value, mask)
            key, value = self.cached_key.value, self.cached_value.value

        if self.dropout_rate > 0.0:
            det = self.deterministic if deterministic is None else deterministic
            if det is None:
                raise ValueError(
                    "No `deterministic` argument was provided to MultiHeadAttention as either "
                    "a __call__ argument or a constructor argument; pass deterministic=True "
                    "(inference) or False (dropout on), or use nnx.view / model.eval()."
                )
            dropout_rng = None
            if not det:
                if rngs is None:
                    raise ValueError(
                        "'rngs' must be provided to __call__ method if MultiHeadAttention "
                        "instance is defined with keep_rngs=False (pass rngs=nnx.Rngs("
                        "dropout=...))."
                    )
                dropout_rng = rngs()
        else:
            det, dropout_rng = True, None

        kwargs: dict = {}
        if is_causal:
            kwargs["is_causal"] = True
        x = self.attention_fn(
            query, key, value, mask=mask, dropout_rng=dropout_rng,
            dropout_rate=self.dropout_rate, broadcast_dropout=self.broadcast_dropout,
            deterministic=det, dtype=self.dtype, precision=self.precision,
            module=self if sow_weights else None, **kwargs,
        )
        return self.out(x, out_sharding=out_sharding)

    def _decode_step(self, key: Array, value: Array, mask: Array | None) -> Array | None:
        if self.cached_key is None or self.cached_value is None or self.cache_index is None:
            raise ValueError(
                "MultiHeadAttention: Autoregressive cache not initialized, call "
                "``init_cache`` first (decode=True needs module.init_cache(input_shape))."
            )
        *batch_dims, max_length, num_kv_heads, depth = self.cached_key.value.shape
        expected = (*batch_dims, 1, num_kv_heads, depth)
        if expected != key.shape:
            raise ValueError(
                "MultiHeadAttention: Autoregressive cache shape error, expected key shape "
                f"{expected} instead got {key.shape}: in decode mode each call takes one step."
            )
        cur = self.cache_index.value
        zero = jnp.array(0, dtype=cur.dtype)
        indices = (zero,) * len(batch_dims) + (cur, zero, zero)
        self.cached_key.value = lax.dynamic_update_slice(self.cached_key.value, key, indices)
        self.cached_value.value = lax.dynamic_update_slice(
            self.cached_value.value, value, indices
        )
        self.cache_index.value = cur + 1
        # attend only to the filled cache positions
        pos_mask = jnp.broadcast_to(
            jnp.arange(max_length) <= cur, (*batch_dims, 1, 1, max_length)
        )
        return combine_masks(mask, pos_mask)
