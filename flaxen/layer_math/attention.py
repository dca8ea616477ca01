"""Pure attention functions: masks, attention weights and dot-product attention.

Nothing here depends on a Module system: ``flaxen.linen.attention`` re-exports these under
Flax's names and ``flaxen.nnx`` uses them directly. A module-like object passed as ``module``
only needs a ``sow`` method.

When nobody asks for the attention weights (no ``module`` to sow them into, no
dropout, no custom einsum) ``dot_product_attention`` does not go through
``dot_product_attention_weights``: short float32 inputs go to JAX's fused
``jax.nn.dot_product_attention`` and long sequences take a memory-lean blockwise path
that computes a block of queries at a time (a ``bias`` is cut into blocks along with the
queries) and, when differentiated, recomputes each block's weights instead of keeping the
whole ``[heads, q_len, kv_len]`` matrix alive for the gradient. Both equal the plain
computation to float rounding; see ``dot_product_attention`` for the exact rule.

>>> import jax.numpy as jnp
>>> q = jnp.ones((2, 3, 4, 8))   # [batch, q_length, num_heads, depth]
>>> k = v = jnp.ones((2, 5, 4, 8))
>>> dot_product_attention(q, k, v).shape
(2, 3, 4, 8)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from flaxen.errors import MissingAxisError
from flaxen.layer_math.dtypes import promote_dtype
from flaxen.layer_math.errors import LayerRankError, LayerShapeError

Array = Any
Dtype = Any
PrecisionLike = Any

__all__ = [
    "combine_masks",
    "dot_product_attention",
    "dot_product_attention_weights",
    "make_attention_mask",
    "make_causal_mask",
]

# Query block of the memory-lean path; below _BLOCKWISE_MIN_ELEMENTS (q_len * kv_len) the
# whole weight matrix is small and the fused (or plain) path is as good.
_Q_BLOCK = 256
_BLOCKWISE_MIN_ELEMENTS = 512 * 512
_SAVE_STATS = jax.checkpoint_policies.save_only_these_names("stats")


# --- masks ------------------------------------------------------------------------------


def make_attention_mask(
    query_input: Array,
    key_input: Array,
    pairwise_fn: Callable[..., Any] = jnp.multiply,
    extra_batch_dims: int = 0,
    dtype: Dtype = jnp.float32,
) -> Array:
    """Builds an attention mask from per-position query and key values.

    ``query_input`` is ``[batch..., len_q]`` and ``key_input`` ``[batch..., len_kv]``;
    the result is ``pairwise_fn(query[..., :, None], key[..., None, :])`` with a head axis
    of size 1 inserted, shape ``[batch..., 1, len_q, len_kv]``, cast to ``dtype``.
    ``extra_batch_dims`` adds that many leading singleton axes.

    >>> import jax.numpy as jnp
    >>> tokens = jnp.array([[5, 7, 0]])          # 0 is padding
    >>> make_attention_mask(tokens > 0, tokens > 0)[0, 0]
    Array([[1., 1., 0.],
           [1., 1., 0.],
           [0., 0., 0.]], dtype=float32)
    """
    mask = pairwise_fn(jnp.expand_dims(query_input, -1), jnp.expand_dims(key_input, -2))
    mask = jnp.expand_dims(mask, -3)
    mask = mask.reshape((1,) * extra_batch_dims + mask.shape)
    return mask.astype(dtype)


def make_causal_mask(x: Array, extra_batch_dims: int = 0, dtype: Dtype = jnp.float32) -> Array:
    """A causal (lower-triangular) mask for self-attention over ``x``'s last axis.

    Only ``x``'s shape ``[batch..., len]`` is used; the result ``[batch..., 1, len, len]``
    lets query ``i`` attend to key ``j`` exactly when ``j <= i``.

    >>> import jax.numpy as jnp
    >>> make_causal_mask(jnp.ones((1, 3)))[0, 0]
    Array([[1., 0., 0.],
           [1., 1., 0.],
           [1., 1., 1.]], dtype=float32)
    """
    positions = jnp.broadcast_to(jnp.arange(x.shape[-1], dtype=jnp.int32), x.shape)
    return make_attention_mask(
        positions, positions, jnp.greater_equal, extra_batch_dims=extra_batch_dims, dtype=dtype
    )


def combine_masks(*masks: Array | None, dtype: Dtype = jnp.float32) -> Array | None:
    """Logical AND of the given masks (``None`` entries are skipped), cast to ``dtype``.

    Returns ``None`` when every mask is ``None``. All masks must have the same rank.

    >>> import jax.numpy as jnp
    >>> combine_masks(jnp.array([1, 1, 0]), None, jnp.array([0, 1, 1]))
    Array([0., 1., 0.], dtype=float32)
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    ranks = [m.ndim for m in present]
    if len(set(ranks)) != 1:
        raise LayerRankError(
            f"combine_masks: masks must have same rank, but got masks of shapes "
            f"{[tuple(m.shape) for m in present]}. Reshape them (e.g. with jnp.expand_dims) "
            "to one rank before combining."
        )
    out = present[0]
    for m in present[1:]:
        out = jnp.logical_and(out, m)
    return out.astype(dtype)


# --- input checks -----------------------------------------------------------------------


def check_qkv(
    fn: str, query: Array, key: Array, value: Array | None, *, grouped_heads: bool = False
) -> None:
    """Checks that ``query``, ``key`` and ``value`` (when given) fit dot-product attention.

    Each must be ``[batch..., length, num_heads, depth]`` with the same rank, batch axes and
    heads; query and key need the same depth, key and value the same length. With
    ``grouped_heads`` (grouped-query attention, before the key/value heads are repeated for
    the query's) only the rank and batch axes are checked here. ``fn`` starts each message.

    >>> import jax.numpy as jnp
    >>> q, k = jnp.ones((1, 3, 4, 8)), jnp.ones((1, 5, 2, 8))
    >>> check_qkv("attn", q, k, None, grouped_heads=True)   # 2 key heads serve 4 query heads
    >>> try:
    ...     check_qkv("attn", q, k, None)
    ... except ValueError as e:
    ...     print(type(e).__name__)
    LayerShapeError
    """
    named = [("query", query), ("key", key)] + ([("value", value)] if value is not None else [])
    layout = "[batch..., length, num_heads, depth]"
    # Ranks are compared before each is checked, in Flax's order, so a mix of ranks reports
    # Flax's "same rank" phrase.
    if len({a.ndim for _, a in named}) != 1:
        shapes = ", ".join(f"{n}={tuple(a.shape)}" for n, a in named)
        which = "q, k, v" if value is not None else "q, k"
        raise LayerRankError(
            f"{fn}: {which} must have same rank, but got {shapes}. Each must be "
            f"{layout} with the same batch axes."
        )
    for name, a in named:
        if a.ndim < 3 and not grouped_heads:
            # Flax indexes the missing axis and fails with an IndexError.
            raise MissingAxisError(
                f"{fn}: {name} must have shape {layout} (rank >= 3), but got shape "
                f"{tuple(a.shape)}. Add the missing axes, e.g. a num_heads axis of size 1."
            )
    batch = query.shape[:-3]
    for name, a in named[1:]:
        if a.shape[:-3] != batch:
            raise LayerShapeError(
                f"{fn}: q, k, v batch dims must match, but query has batch dims {batch} and "
                f"{name} has {tuple(a.shape[:-3])} (full shapes query={tuple(query.shape)}, "
                f"{name}={tuple(a.shape)})."
            )
        if not grouped_heads and a.shape[-2] != query.shape[-2]:
            raise LayerShapeError(
                f"{fn}: q, k, v num_heads must match, but query has {query.shape[-2]} heads "
                f"(axis -2 of {tuple(query.shape)}) and {name} has {a.shape[-2]} "
                f"({tuple(a.shape)})."
            )
    if grouped_heads:
        return
    if key.shape[-1] != query.shape[-1]:
        raise LayerShapeError(
            f"{fn}: q, k depths must match, but query has depth {query.shape[-1]} "
            f"({tuple(query.shape)}) and key has depth {key.shape[-1]} ({tuple(key.shape)}). "
            "Project both to the same qk_depth_per_head."
        )
    if value is not None and value.shape[-3] != key.shape[-3]:
        raise LayerShapeError(
            f"{fn}: k, v lengths must match, but key has length {key.shape[-3]} "
            f"({tuple(key.shape)}) and value has length {value.shape[-3]} ({tuple(value.shape)})."
        )


def _check_broadcastable(fn: str, name: str, arr: Array, target: tuple[int, ...]) -> None:
    shape = tuple(arr.shape)
    ok = len(shape) <= len(target) and all(
        s in (1, t) for s, t in zip(shape[::-1], target[::-1])
    )
    if not ok:
        raise LayerShapeError(
            f"{fn}: {name} of shape {shape} does not broadcast to the attention weights' "
            f"shape {target} = [batch..., num_heads, q_length, kv_length]. Give the {name} "
            "that shape, with size-1 axes where it is shared (e.g. make_attention_mask gives "
            "[batch..., 1, q_length, kv_length])."
        )


def _einsum_fn(einsum_dot_general: Callable[..., Array] | None) -> Callable[..., Array]:
    if einsum_dot_general is None:
        return jnp.einsum
    return functools.partial(jnp.einsum, _dot_general=einsum_dot_general)


# --- attention --------------------------------------------------------------------------


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
    module: Any | None = None,
    force_fp32_for_softmax: bool = False,
    einsum_dot_general: Callable[..., Array] | None = None,
    einsum: Callable[..., Array] | None = None,
) -> Array:
    """Attention weights ``softmax(query . key / sqrt(depth) + bias)`` over the key axis.

    ``query`` is ``[batch..., q_length, num_heads, depth]`` and ``key``
    ``[batch..., kv_length, num_heads, depth]``; the result is
    ``[batch..., num_heads, q_length, kv_length]``. ``bias`` is added to the logits and
    where ``mask`` is False (or 0) the logit becomes the dtype's most negative value; both
    must broadcast to the result's shape. With ``deterministic=False`` and
    ``dropout_rate > 0`` the weights are dropped out with ``dropout_rng`` and rescaled;
    ``broadcast_dropout`` shares one dropout pattern across batch and head axes. ``dtype``
    defaults to the promoted dtype of ``query`` and ``key``. With a ``module``, the
    weights (before dropout) are sown into its ``'intermediates'`` collection as
    ``'attention_weights'``. ``force_fp32_for_softmax`` runs the softmax of half-precision
    logits in float32 (and returns float32 weights).

    >>> import jax.numpy as jnp
    >>> w = dot_product_attention_weights(jnp.ones((3, 2, 4)), jnp.ones((5, 2, 4)))
    >>> w.shape, float(w[0, 0].sum())
    ((2, 3, 5), 1.0)
    """
    fn = "dot_product_attention_weights"
    query, key = promote_dtype(query, key, dtype=dtype)
    dtype = query.dtype
    check_qkv(fn, query, key, None)
    target = query.shape[:-3] + (query.shape[-2], query.shape[-3], key.shape[-3])
    if bias is not None:
        _check_broadcastable(fn, "bias", bias, target)
    if mask is not None:
        _check_broadcastable(fn, "mask", mask, target)
    if einsum is None:
        einsum = _einsum_fn(einsum_dot_general)

    # Scaling the query (not the logits) keeps the product in range for low precision.
    query = query / jnp.sqrt(query.shape[-1]).astype(dtype)
    weights = einsum("...qhd,...khd->...hqk", query, key, precision=precision)
    if bias is not None:
        weights = weights + bias
    if mask is not None:
        weights = jnp.where(mask, weights, jnp.finfo(dtype).min)
    if force_fp32_for_softmax and dtype != jnp.float32:
        weights = jax.nn.softmax(weights.astype(jnp.float32))
    else:
        weights = jax.nn.softmax(weights).astype(dtype)

    if module is not None:
        module.sow("intermediates", "attention_weights", weights)

    if not deterministic and dropout_rate > 0.0:
        if dropout_rng is None:
            raise TypeError(
                f"{fn}: dropout_rate={dropout_rate} with deterministic=False needs a "
                "dropout_rng, but dropout_rng is None. Pass dropout_rng=<PRNG key>, or "
                "deterministic=True to turn dropout off."
            )
        keep_prob = 1.0 - dropout_rate
        if broadcast_dropout:
            # One pattern for all batch and head axes: only (q_length, kv_length) varies.
            shape = (1,) * (key.ndim - 2) + weights.shape[-2:]
        else:
            shape = weights.shape
        keep = jax.random.bernoulli(dropout_rng, keep_prob, shape)
        weights = weights * (keep.astype(weights.dtype) / jnp.asarray(keep_prob, dtype=dtype))
    return weights


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
    module: Any | None = None,
    force_fp32_for_softmax: bool = False,
    einsum_dot_general: Callable[..., Array] | None = None,
    qk_attn_weights_einsum: Callable[..., Array] | None = None,
    attn_weights_value_einsum: Callable[..., Array] | None = None,
) -> Array:
    """Dot-product attention: the attention weights applied to ``value``.

    ``query`` ``[batch..., q_length, num_heads, qk_depth]``, ``key``
    ``[batch..., kv_length, num_heads, qk_depth]`` and ``value``
    ``[batch..., kv_length, num_heads, v_depth]`` (any number of batch axes, including
    none) give ``[batch..., q_length, num_heads, v_depth]``. The other arguments are those
    of :func:`dot_product_attention_weights`; ``qk_attn_weights_einsum`` and
    ``attn_weights_value_einsum`` replace the two einsums.

    Which computation runs (all agree to float rounding; the weights are only ever
    observable through ``module``):

    1. The plain path (the weights from :func:`dot_product_attention_weights`, then an
       einsum with ``value``) whenever the weights are needed or customised: a
       ``module`` to sow them into, dropout (``deterministic=False`` and
       ``dropout_rate > 0``), ``einsum_dot_general`` or either custom einsum, or complex
       inputs.
    2. Otherwise, when ``q_length * kv_length >= 512 ** 2``, the memory-lean blockwise
       path: one block of queries at a time, each block's weights recomputed when
       differentiated, so a forward+backward pass never holds the whole
       ``[heads, q_length, kv_length]`` matrix. JAX's fused function is not used here
       because its default implementation (``implementation=None``, which is XLA on every
       backend as of JAX 0.10) materialises the full logits and probabilities and keeps
       them for the gradient; its flash-style cuDNN kernel accepts only float16/bfloat16,
       which rule 3 excludes.
    3. Otherwise, on an accelerator backend (``jax.default_backend()`` other than
       ``'cpu'``), JAX's fused ``jax.nn.dot_product_attention`` when it computes exactly
       what Flax does: float32 inputs (after ``dtype`` promotion; JAX always runs the
       softmax in float32, Flax in the input dtype), ``precision=None`` (JAX's function
       takes no precision) and ``value`` with the key's depth. Extra batch axes are
       flattened into one and ``mask``/``bias`` reshaped to the 4-D
       ``[batch or 1, heads or 1, q_length or 1, kv_length or 1]`` layout it needs.
       On the CPU it is skipped: there XLA's version needs more temporary memory than the
       plain path (measured 68 vs 57 MiB for a forward+backward pass at length 512) and
       lowers to a larger program, so it would cost memory and compile time for nothing.
    4. Otherwise the plain path.

    >>> import jax.numpy as jnp
    >>> q = k = v = jnp.linspace(-1.0, 1.0, 2 * 6 * 4 * 8).reshape(2, 6, 4, 8)
    >>> causal = make_causal_mask(jnp.ones((2, 6)))
    >>> dot_product_attention(q, k, v, mask=causal).shape
    (2, 6, 4, 8)
    """
    fn = "dot_product_attention"
    query, key, value = promote_dtype(query, key, value, dtype=dtype)
    dtype = query.dtype
    check_qkv(fn, query, key, value)
    target = query.shape[:-3] + (query.shape[-2], query.shape[-3], key.shape[-3])
    if mask is not None:
        _check_broadcastable(fn, "mask", mask, target)

    dropout_active = not deterministic and dropout_rate > 0.0
    plain_only = (
        module is not None
        or dropout_active
        or einsum_dot_general is not None
        or qk_attn_weights_einsum is not None
        or attn_weights_value_einsum is not None
        or jnp.issubdtype(dtype, jnp.complexfloating)
    )
    if not plain_only:
        if bias is not None:
            _check_broadcastable(fn, "bias", bias, target)
        if query.shape[-3] * key.shape[-3] >= _BLOCKWISE_MIN_ELEMENTS:
            return _blockwise(query, key, value, bias, mask, precision, force_fp32_for_softmax)
        if _fused_applies(query, key, value, precision):
            return _fused(query, key, value, bias, mask)

    weights = dot_product_attention_weights(
        query,
        key,
        bias,
        mask,
        broadcast_dropout,
        dropout_rng,
        dropout_rate,
        deterministic,
        dtype,
        precision,
        module,
        force_fp32_for_softmax,
        einsum_dot_general=einsum_dot_general,
        einsum=qk_attn_weights_einsum,
    )
    einsum = attn_weights_value_einsum or _einsum_fn(einsum_dot_general)
    return einsum("...hqk,...khd->...qhd", weights, value, precision=precision)


# --- JAX's fused attention --------------------------------------------------------------


# Backends on which the fused function is worth taking (see rule 3 of dot_product_attention).
_FUSED_BACKENDS = frozenset({"gpu", "cuda", "rocm", "tpu"})


def _fused_applies(query, key, value, precision) -> bool:
    """Whether ``jax.nn.dot_product_attention`` computes what the plain path computes."""
    return (
        jax.default_backend() in _FUSED_BACKENDS
        and precision is None
        and query.dtype == jnp.float32
        and value.shape == key.shape
    )


def _flatten_batch_scaled(query, key, value):
    """Batch axes flattened into one, and the query pre-scaled by 1/sqrt(depth).

    Scaling the query before the product is the plain path's order of operations, so the
    logits round the same way. Returns ``(batch_shape, n, q, k, v)``.
    """
    batch = query.shape[:-3]
    nb = math.prod(batch)
    q = query.reshape((nb,) + query.shape[-3:])
    k = key.reshape((nb,) + key.shape[-3:])
    v = value.reshape((nb,) + value.shape[-3:])
    return batch, nb, q / jnp.sqrt(q.shape[-1]).astype(q.dtype), k, v


def _fused(query, key, value, bias, mask):
    """``jax.nn.dot_product_attention`` on 4-D inputs (batch axes flattened into one).

    The query is scaled before the product and ``scale=1`` passed, the order of operations
    of the plain path, so the logits round the same way.
    """
    batch, nb, q, k, v = _flatten_batch_scaled(query, key, value)
    if mask is not None:
        mask = _weights_layout(jnp.asarray(mask).astype(bool), batch, nb, 0, True)
    if bias is not None:
        bias = _weights_layout(jnp.asarray(bias), batch, nb, 0, 0)
    out = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=1.0)
    return out.reshape(batch + out.shape[1:])


# --- memory-lean blockwise path ---------------------------------------------------------


def _blockwise(query, key, value, bias, mask, precision, force_fp32):
    """Flattens batch axes, pads q_length to whole blocks and runs the blockwise kernel."""
    dtype = query.dtype
    q_len = query.shape[-3]
    batch, nb, q, k, v = _flatten_batch_scaled(query, key, value)

    block = min(_Q_BLOCK, q_len)
    pad = -q_len % block
    if pad:
        q = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0)))
    if mask is not None:
        mask = _weights_layout(jnp.asarray(mask).astype(bool), batch, nb, pad, True)
    if bias is not None:
        bias = _weights_layout(jnp.asarray(bias), batch, nb, pad, 0)
    out = _blockwise_attention(q, k, v, bias, mask, block, precision, force_fp32, dtype)
    out = out[:, :q_len]
    return out.reshape(batch + out.shape[1:])


def _weights_layout(x, batch, nb, pad, pad_value):
    """A mask or bias as ``[1 or nb, heads or 1, q_len(+pad) or 1, kv_len or 1]``."""
    x = x.reshape((1,) * (len(batch) + 3 - x.ndim) + x.shape)
    if all(d == 1 for d in x.shape[: len(batch)]):
        x = x.reshape((1,) + x.shape[len(batch):])
    else:
        x = jnp.broadcast_to(x, batch + x.shape[len(batch):])
        x = x.reshape((nb,) + x.shape[len(batch):])
    if pad and x.shape[-2] != 1:
        x = jnp.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0)), constant_values=pad_value)
    return x


def _to_blocks(x: Array, axis: int, block: int) -> Array:
    """Splits ``axis`` into (n_blocks, block) and moves n_blocks to the front."""
    x = x.reshape(x.shape[:axis] + (x.shape[axis] // block, block) + x.shape[axis + 1:])
    return jnp.moveaxis(x, axis, 0)


def _from_blocks(x: Array, axis: int) -> Array:
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2:])


def _blockwise_attention(q, k, v, bias, mask, block, precision, force_fp32, dtype):
    """Attention one query block at a time; each block's weights are recomputed, not kept.

    The block body is rematerialised under a policy that saves only the softmax row
    statistics, so a gradient pass keeps ``O(q_len)`` residuals instead of the
    ``[heads, q_len, kv_len]`` weights and recomputes one block of logits at a time.
    Built from standard JAX transforms, it supports every kind of differentiation
    (``grad``, ``jvp``, ``hessian``, gradients with respect to ``bias``) and ``vmap``.
    """
    wdtype = jnp.dtype(jnp.float32) if force_fp32 and dtype != jnp.float32 else jnp.dtype(dtype)
    # A mask or bias with a q axis is cut into blocks along with the queries; one without
    # (size 1) is the same for every block and is closed over.
    extras = {"bias": bias, "mask": mask}
    blocked = {n: _to_blocks(x, 2, block) for n, x in extras.items()
               if x is not None and x.shape[-2] != 1}
    shared = {n: x for n, x in extras.items() if n not in blocked}

    @functools.partial(jax.checkpoint, policy=_SAVE_STATS)
    def attend_block(qb, parts):
        parts = {**shared, **parts}
        s = jnp.einsum("bqhd,bkhd->bhqk", qb, k, precision=precision)
        if parts["bias"] is not None:
            s = s + parts["bias"]
        if parts["mask"] is not None:
            s = jnp.where(parts["mask"], s, jnp.finfo(dtype).min)
        if force_fp32 and dtype != jnp.float32:
            s = s.astype(jnp.float32)
        # jax.nn.softmax's arithmetic, with the row max and sum named for the remat policy.
        m = checkpoint_name(lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)), "stats")
        e = jnp.exp(s - m)
        total = checkpoint_name(jnp.sum(e, axis=-1, keepdims=True), "stats")
        p = (e / total).astype(wdtype)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v, precision=precision)

    _, out = lax.scan(lambda c, x: (c, attend_block(*x)), None,
                      (_to_blocks(q, 1, block), blocked))
    return _from_blocks(out, 1)
