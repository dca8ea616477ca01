"""FP8 matrix products with delayed scaling (``flax.linen.fp8_ops``).

Three drop-in ``dot_general`` modules and one ``einsum`` module compute through 8-bit floats,
each tensor with its own per-tensor scale:

* :class:`Fp8DirectDotGeneralOp` (alias :data:`Fp8DotGeneral`) and :class:`Fp8Einsum` hand the
  FP8 operands to ``lax.dot_general`` itself (:func:`fp8_scaled_dot_general`), so hardware with
  FP8 matrix units multiplies them directly;
* :class:`Fp8DotGeneralOp` (deprecated, as in Flax) and :class:`NANOOFp8DotGeneralOp` round the
  operands through FP8 and multiply the rounded values in the compute dtype ("fake quant").

Inputs and kernels use ``float8_e4m3fn`` (more precision), output gradients ``float8_e5m2``
(more range). A tensor's scale comes from the largest absolute value ("amax") seen over its
last ``amax_history_length`` steps. The scales and histories live in the
``_overwrite_with_gradient`` collection: the backward pass returns their *updated* values as
their "gradients", and ``TrainState.apply_gradients`` writes those over the old values instead
of handing them to the optimizer.

When one layer is applied several times in a step, the gradients of its scale and history
would be summed. Converting them to the :data:`fm32` dtype (``lax.convert_element_type(x,
fm32)``) makes JAX combine them with ``max`` instead, which is what a history of maxima needs.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> layer = nn.Dense(4, dot_general_cls=nn.Fp8DirectDotGeneralOp)
>>> v = layer.init(jax.random.key(0), jnp.ones((2, 3)))
>>> sorted(v[OVERWRITE_WITH_GRADIENT]['Fp8DirectDotGeneralOp_0'])  # doctest: +NORMALIZE_WHITESPACE
['input_amax_history', 'input_scale', 'kernel_amax_history', 'kernel_scale',
 'output_grad_amax_history', 'output_grad_scale']
"""

from __future__ import annotations

import dataclasses
import itertools  # noqa: F401 - importable from here in Flax
import warnings
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_jvp, custom_vjp, lax, random

# An extended dtype (fm32) has no public JAX API: the rules class, the dtype base and the
# abstract-value helpers below are the seams JAX itself uses for PRNG key dtypes.
from jax._src import core, dtypes
from jax.typing import DTypeLike

try:
    from jax._src import earray
    from jax._src.interpreters import pxla

    CAN_USE_EARRAY = True
except ImportError:  # a JAX without extended arrays outside jit
    CAN_USE_EARRAY = False

from flaxen.linen import initializers, module

DType = Any

__all__ = [
    "CAN_USE_EARRAY",
    "DType",
    "OVERWRITE_WITH_GRADIENT",
    "Fp8DirectDotGeneralOp",
    "Fp8DotGeneral",
    "Fp8DotGeneralBase",
    "Fp8DotGeneralOp",
    "Fp8Einsum",
    "Fp8MetaTyRules",
    "NANOOFp8DotGeneralOp",
    "compute_amax_history",
    "compute_scale",
    "dequantize",
    "dot_general_transpose_lhs",
    "dot_general_transpose_rhs",
    "dot_general_with_precision",
    "dot_general_with_precision_jvp",
    "fm32",
    "fp32_max_grad",
    "fp8_meta_dtype",
    "fp8_meta_dtype_wrapper",
    "fp8_scaled_dot_general",
    "get_fp8_max",
    "in_q",
    "in_q_bwd",
    "in_q_fwd",
    "in_qdq",
    "in_qdq_bwd",
    "in_qdq_fwd",
    "out_dq",
    "out_dq_bwd",
    "out_dq_fwd",
    "out_qdq",
    "out_qdq_bwd",
    "out_qdq_fwd",
    "qdq",
    "qdq_and_return",
    "quantize",
    "quantize_dequantize",
    "quantize_dequantize_update",
    "quantized_dot",
    "quantized_dot_bwd",
    "quantized_dot_fwd",
    "update_fp8_meta",
]

# The collection whose "gradients" replace the variables (see TrainState.apply_gradients).
OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"



# --- fm32: float32 whose gradients combine by max ----------------------------------------------
class Fp8MetaTyRules:
    """JAX's rules for the :data:`fm32` extended dtype: stored as float32, converted to and from
    it freely, and accumulated by autodiff with ``max`` (its zero is ``-inf``) instead of ``+``.
    """

    @staticmethod
    def physical_element_aval(dtype: Any) -> core.ShapedArray:
        # how the dtype is laid out for XLA: one element of the underlying float type
        return core.ShapedArray((), dtype.float_dtype)

    @staticmethod
    def convert_from(fp8_meta_dtype: Any, other_dtype: Any) -> bool:
        return fp8_meta_dtype.float_dtype == other_dtype

    @staticmethod
    def convert_to(other_dtype: Any, fp8_meta_dtype: Any) -> bool:
        return fp8_meta_dtype.float_dtype == other_dtype

    @staticmethod
    def add(dt: Any, x: Any, y: Any) -> Any:
        # gradient accumulation of two uses of one scale/history: keep the larger
        as_float = partial(lax.convert_element_type, new_dtype=dt.float_dtype)
        return lax.convert_element_type(lax.max(as_float(x), as_float(y)), dt)

    @staticmethod
    def zero(dt: Any) -> Any:
        # the identity of max: -inf, or the lowest finite value of a type without infinities
        low = (-np.inf if dtypes.supports_inf(dt.float_dtype)
               else dtypes.finfo(dt.float_dtype).min)
        return lax.convert_element_type(np.array(low, dt.float_dtype), dt)

    @staticmethod
    def tangent_dtype(dtype: Any) -> Any:
        return dtype

    @staticmethod
    def full(shape: Any, fill_value: Any, dtype: Any) -> Any:
        value = lax.convert_element_type(fill_value, dtype.float_dtype)
        return lax.convert_element_type(lax.full(shape, value, dtype.float_dtype), dtype)

    @staticmethod
    def global_sharded_result_handler(aval: Any, out_sharding: Any, committed: Any) -> Any:
        # lets a jit return fm32 arrays (as extended arrays over float32 buffers)
        if not CAN_USE_EARRAY:
            raise NotImplementedError(
                "This JAX cannot return fm32 arrays from jit; convert them to float32 "
                "(lax.convert_element_type(x, jnp.float32)) inside the jitted function.")
        physical = pxla.global_result_handlers[core.ShapedArray](
            core.physical_aval(aval), out_sharding, committed)
        return lambda bufs: earray.EArray(aval, physical(bufs))


class fp8_meta_dtype(dtypes.extended):  # noqa: N801 - Flax's public name
    """The scalar type of :data:`fm32` (a subtype of ``jax.dtypes.extended``)."""


@dataclasses.dataclass(frozen=True)
class fp8_meta_dtype_wrapper(dtypes.ExtendedDType):  # noqa: N801 - Flax's public name
    """An extended dtype over ``float_dtype`` whose gradients combine by ``max``.

    >>> x = lax.convert_element_type(jnp.ones(2), fm32)
    >>> x.dtype, lax.convert_element_type(x, jnp.float32).tolist()
    (fp8_meta32, [1.0, 1.0])
    """

    float_dtype: Any
    _rules: type = Fp8MetaTyRules
    type: type = fp8_meta_dtype

    def __repr__(self) -> str:
        return f"fp8_meta{dtypes.finfo(self.float_dtype).bits}"

    name = property(__repr__)


fm32 = fp8_meta_dtype_wrapper(jnp.float32)
# the dtype of updated scales/histories computed from fm32 ones (the same dtype as fm32)
fp32_max_grad = fp8_meta_dtype_wrapper(jnp.float32)


# --- scaling arithmetic ---------------------------------------------------------------------------
def get_fp8_max(fp8_dtype: Any, out_dtype: Any) -> jax.Array:
    """The largest finite value of ``fp8_dtype``, as an ``out_dtype`` scalar.

    Any floating dtype is accepted (Flax accepts the four FP8 formats only).

    >>> float(get_fp8_max(jnp.float8_e4m3fn, jnp.float32))
    448.0
    """
    return jnp.asarray(jnp.finfo(fp8_dtype).max, out_dtype)


def quantize(x: jax.Array, q_dtype: Any, scale: jax.Array, compute_dtype: Any) -> jax.Array:
    """``x / scale``, clipped to ``q_dtype``'s finite range and cast to it.

    >>> quantize(jnp.array([3.0, 1e6]), jnp.float8_e4m3fn, jnp.ones(1), jnp.float32).tolist()
    [3.0, 448.0]
    """
    # the bound in the compute dtype keeps the division and clip from widening to float32
    bound = get_fp8_max(q_dtype, jnp.float32).astype(compute_dtype)
    scaled = x / jnp.broadcast_to(scale.astype(compute_dtype), x.shape)
    return jnp.clip(scaled, -bound, bound).astype(q_dtype)


def dequantize(x: jax.Array, dq_dtype: Any, scale: jax.Array) -> jax.Array:
    """``x`` cast to ``dq_dtype`` and multiplied back by ``scale``."""
    return x.astype(dq_dtype) * jnp.broadcast_to(scale.astype(dq_dtype), x.shape)


def qdq(x: jax.Array, q_dtype: Any, scale: jax.Array, compute_dtype: Any) -> jax.Array:
    """``x`` rounded through ``q_dtype`` with ``scale``, returned in ``x``'s dtype.

    >>> qdq(jnp.array([1.0, 1.07]), jnp.float8_e4m3fn, jnp.ones((1,)), jnp.float32).tolist()
    [1.0, 1.125]
    """
    return dequantize(quantize(x, q_dtype, scale, compute_dtype), x.dtype, scale)


quantize_dequantize = qdq  # the name of Flax 0.8.3


def compute_scale(amax: jax.Array, scale: jax.Array, fp8_max: jax.Array,
                  margin: int = 0) -> jax.Array:
    """The scale that maps ``amax`` onto ``fp8_max`` (``amax / fp8_max``, times ``2**margin``).

    Where ``amax`` is zero or not finite the old ``scale`` is kept.

    >>> float(compute_scale(jnp.float32(2.0), jnp.float32(1.0), jnp.float32(448.0)))
    0.004464285913854837
    """
    # Work with the reciprocal (fp8 steps per unit), as NVIDIA's Transformer Engine does, so
    # the result matches its scales bit for bit.
    inv_old = 1.0 / scale
    inv = (fp8_max / amax) / (2.0 ** margin)
    inv = jnp.where(amax > 0.0, inv, inv_old)
    inv = jnp.where(jnp.isfinite(amax), inv, inv_old)
    return 1.0 / inv


def compute_amax_history(x: jax.Array, amax_history: jax.Array) -> jax.Array:
    """``amax_history`` rolled one step, with ``max(|x|)`` written at index 0.

    >>> compute_amax_history(jnp.array([-3.0, 1.0]), jnp.array([1.0, 2.0, 0.0])).tolist()
    [3.0, 0.0, 1.0]
    """
    amax_update = jnp.max(jnp.abs(x)).astype(amax_history.dtype)
    return jnp.roll(amax_history, shift=-1, axis=0).at[0].set(amax_update)


def _fm32_to_float32(value: jax.Array) -> jax.Array:
    return lax.convert_element_type(value, jnp.float32) if value.dtype == fm32 else value


def update_fp8_meta(x: jax.Array, q_dtype: Any, scale: jax.Array,
                    amax_history: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(new scale, new amax history)`` for quantizing ``x`` to ``q_dtype`` (delayed scaling).

    The new scale comes from the largest amax in the *old* history; the new history records
    ``x``'s amax. When both ``scale`` and ``amax_history`` are :data:`fm32` arrays, the results
    are :data:`fp32_max_grad` arrays (gradients combined by ``max``).

    >>> history = jnp.array([4.48, 0.0])
    >>> s, h = update_fp8_meta(jnp.array([2.0]), jnp.float8_e4m3fn, jnp.ones(1), history)
    >>> s.tolist(), h.tolist()
    ([0.009999999776482582], [2.0, 4.480000019073486])
    """
    meta = scale.dtype == fm32 and amax_history.dtype == fm32
    if meta:  # the arithmetic runs in float32
        scale = lax.convert_element_type(scale, jnp.float32)
        amax_history = lax.convert_element_type(amax_history, jnp.float32)
    fp8_max = get_fp8_max(q_dtype, jnp.float32)
    new_scale = compute_scale(jnp.max(amax_history, axis=0), scale, fp8_max)
    new_history = compute_amax_history(x, amax_history)
    if meta:
        new_scale = lax.convert_element_type(new_scale, fp32_max_grad)
        new_history = lax.convert_element_type(new_history, fp32_max_grad)
    return new_scale, new_history


def quantize_dequantize_update(
    x: jax.Array, q_dtype: Any, scale: jax.Array, amax_history: jax.Array, compute_dtype: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(x rounded through q_dtype with the new scale, new scale, new history)``."""
    new_scale, new_history = update_fp8_meta(x, q_dtype, scale, amax_history)
    return qdq(x, q_dtype, _fm32_to_float32(new_scale), compute_dtype), new_scale, new_history


def qdq_and_return(
    x: jax.Array, q_dtype: Any, scale: jax.Array, amax_history: jax.Array, compute_dtype: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Flax 0.8.3's name for :func:`quantize_dequantize_update`."""
    return quantize_dequantize_update(x, q_dtype, scale, amax_history, compute_dtype)


# --- transposes of dot_general (the backward pass of a product) ------------------------------
def _without(axes: Any, *removed: Any) -> list[int]:
    gone = {int(a) for group in removed for a in group}
    return [int(a) for a in axes if int(a) not in gone]


def dot_general_transpose_lhs(g: jax.Array, x: jax.Array, y: jax.Array, *,
                              dimension_numbers: Any, precision: Any,
                              preferred_element_type: DTypeLike | None,
                              swap_ans: bool = False) -> jax.Array:
    """The gradient of ``lax.dot_general(x, y, dimension_numbers)`` with respect to ``x``.

    ``g`` is the gradient of the output; the result has ``x``'s shape. ``swap_ans=True`` reads
    ``g`` with the free axes of ``y`` before those of ``x`` (as :func:`dot_general_transpose_rhs`
    needs when it swaps the operands).

    >>> x, y = jnp.ones((2, 3)), jnp.arange(12.0).reshape(3, 4)
    >>> dn = (((1,), (0,)), ((), ()))
    >>> g = jnp.ones((2, 4))
    >>> dot_general_transpose_lhs(g, x, y, dimension_numbers=dn, precision=None,
    ...                           preferred_element_type=None).tolist()
    [[6.0, 22.0, 38.0], [6.0, 22.0, 38.0]]
    """
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    x_free = _without(range(jnp.ndim(x)), x_contract, x_batch)
    y_free = _without(range(jnp.ndim(y)), y_contract, y_batch)
    # g's axes: the batch axes, then the free axes of the two operands (which first: swap_ans)
    n_batch = len(x_batch)
    first, second = (len(y_free), len(x_free)) if swap_ans else (len(x_free), len(y_free))
    g_batch = list(range(n_batch))
    g_y_free = (list(range(n_batch, n_batch + first)) if swap_ans
                else list(range(n_batch + first, n_batch + first + second)))
    # Contracting g's y-free axes with y's free axes leaves, in order: the batch axes, x's free
    # axes, then y's contracting axes in y's own order, each standing for its x partner.
    partial_x = lax.dot_general(g, y, ((g_y_free, y_free), (g_batch, list(y_batch))),
                                precision=precision,
                                preferred_element_type=preferred_element_type)
    by_y_order = np.argsort(np.asarray(y_contract, dtype=int))
    x_of_result = [*map(int, x_batch), *x_free,
                   *[int(x_contract[i]) for i in by_y_order]]
    return lax.transpose(partial_x, tuple(int(i) for i in np.argsort(x_of_result)))


def dot_general_transpose_rhs(g: jax.Array, x: jax.Array, y: jax.Array, *,
                              dimension_numbers: Any, precision: Any,
                              preferred_element_type: DTypeLike | None) -> jax.Array:
    """The gradient of ``lax.dot_general(x, y, dimension_numbers)`` with respect to ``y``.

    >>> x, y = jnp.arange(6.0).reshape(2, 3), jnp.ones((3, 4))
    >>> dot_general_transpose_rhs(jnp.ones((2, 4)), x, y, dimension_numbers=(((1,), (0,)),
    ...     ((), ())), precision=None, preferred_element_type=None)[:, 0].tolist()
    [3.0, 5.0, 7.0]
    """
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    swapped = ((y_contract, x_contract), (y_batch, x_batch))
    return dot_general_transpose_lhs(g, y, x, dimension_numbers=swapped, precision=precision,
                                     preferred_element_type=preferred_element_type,
                                     swap_ans=True)


# --- custom-gradient building blocks ------------------------------------------------------------
@partial(custom_vjp, nondiff_argnums=(0, 1))
def in_qdq(compute_dtype: Any, q_dtype: Any, inp: jax.Array, scale: jax.Array,
           amax_history: jax.Array) -> jax.Array:
    """``inp`` rounded through ``q_dtype``. Backward: the gradient passes straight through, and
    the new scale and history are returned as the gradients of ``scale``/``amax_history``.

    >>> y = in_qdq(jnp.float32, jnp.float8_e4m3fn, jnp.array([1.07]), jnp.ones(1), jnp.zeros(4))
    >>> y.tolist()
    [1.125]
    """
    return quantize_dequantize_update(inp, q_dtype, scale, amax_history, compute_dtype)[0]


def in_qdq_fwd(compute_dtype: Any, q_dtype: Any, inp: jax.Array, scale: jax.Array,
               amax_history: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Forward rule of :func:`in_qdq`: the rounded input, and the new scale and history."""
    q, new_scale, new_history = quantize_dequantize_update(
        inp, q_dtype, scale, amax_history, compute_dtype)
    return q, (new_scale, new_history)


def in_qdq_bwd(compute_dtype: Any, q_dtype: Any, res: Any, g: jax.Array) -> tuple:
    """Backward rule of :func:`in_qdq`: ``(g, new scale, new history)``."""
    new_scale, new_history = res
    return g, new_scale, new_history


in_qdq.defvjp(in_qdq_fwd, in_qdq_bwd)


@partial(custom_vjp, nondiff_argnums=(0, 1))
def out_qdq(compute_dtype: Any, q_dtype: Any, out: jax.Array, scale: jax.Array,
            amax_history: jax.Array) -> jax.Array:
    """The identity forward. Backward: the output gradient is rounded through ``q_dtype``, and
    the new scale and history are returned as the gradients of ``scale``/``amax_history``."""
    return out


def out_qdq_fwd(compute_dtype: Any, q_dtype: Any, out: jax.Array, scale: jax.Array,
                amax_history: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Forward rule of :func:`out_qdq`: ``out``, keeping the scale and history for backward."""
    return out, (scale, amax_history)


def out_qdq_bwd(compute_dtype: Any, q_dtype: Any, res: Any, g: jax.Array) -> tuple:
    """Backward rule of :func:`out_qdq`: ``(rounded g, new scale, new history)``."""
    scale, amax_history = res
    return quantize_dequantize_update(g, q_dtype, scale, amax_history, compute_dtype)


out_qdq.defvjp(out_qdq_fwd, out_qdq_bwd)


@partial(custom_vjp, nondiff_argnums=(0, 1))
def in_q(compute_dtype: Any, q_dtype: Any, inp: jax.Array, scale: jax.Array,
         amax_history: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(inp quantized to q_dtype, the scale used)``, with the scale from the history.

    Backward: no gradient for ``inp``; the new scale and history are returned as the gradients
    of ``scale``/``amax_history``.

    >>> q, s = in_q(jnp.float32, jnp.float8_e4m3fn, jnp.array([2.0]), jnp.ones(1), jnp.zeros(2))
    >>> q.dtype, s.tolist()
    (dtype(float8_e4m3fn), [1.0])
    """
    new_scale, _ = update_fp8_meta(inp, q_dtype, scale, amax_history)
    return quantize(inp, q_dtype, _fm32_to_float32(new_scale), compute_dtype), new_scale


def in_q_fwd(compute_dtype: Any, q_dtype: Any, inp: jax.Array, scale: jax.Array,
             amax_history: jax.Array) -> tuple:
    """Forward rule of :func:`in_q`."""
    new_scale, new_history = update_fp8_meta(inp, q_dtype, scale, amax_history)
    q = quantize(inp, q_dtype, _fm32_to_float32(new_scale), compute_dtype)
    return (q, new_scale), (new_scale, new_history)


def in_q_bwd(compute_dtype: Any, q_dtype: Any, res: Any, _: Any) -> tuple:
    """Backward rule of :func:`in_q`: ``(None, new scale, new history)`` (the output
    gradient, the last argument, is not used)."""
    new_scale, new_history = res
    return None, new_scale, new_history


in_q.defvjp(in_q_fwd, in_q_bwd)


@partial(custom_vjp, nondiff_argnums=(0,))
def out_dq(dq_type: Any, lhs_scale: jax.Array, rhs_scale: jax.Array,
           out: jax.Array) -> jax.Array:
    """The product of two quantized operands brought back to ``dq_type``: ``out`` times both
    scales. Backward: the gradient goes to ``out`` unchanged (none to the scales)."""
    return dequantize(out, dq_type, _fm32_to_float32(lhs_scale) * _fm32_to_float32(rhs_scale))


def out_dq_fwd(dq_type: Any, lhs_scale: jax.Array, rhs_scale: jax.Array,
               out: jax.Array) -> tuple[jax.Array, None]:
    """Forward rule of :func:`out_dq`."""
    return out_dq(dq_type, lhs_scale, rhs_scale, out), None


def out_dq_bwd(dq_type: Any, _: Any, g: jax.Array) -> tuple:
    """Backward rule of :func:`out_dq`: ``(None, None, g)`` (it keeps no residuals)."""
    return None, None, g


out_dq.defvjp(out_dq_fwd, out_dq_bwd)


@partial(custom_vjp, nondiff_argnums=(8, 9))
def quantized_dot(lhs: jax.Array, q_lhs: jax.Array, lhs_scale: jax.Array, rhs: jax.Array,
                  q_rhs: jax.Array, rhs_scale: jax.Array, out_grad_scale: jax.Array,
                  out_grad_amax_history: jax.Array, dimension_numbers: Any,
                  preferred_element_type: Any = None) -> jax.Array:
    """``lax.dot_general`` of the quantized operands ``q_lhs``/``q_rhs`` (not yet rescaled).

    Backward: the output gradient is quantized to e5m2 with a scale from
    ``out_grad_amax_history``; the gradients of ``lhs`` and ``rhs`` are its products with the
    quantized other operand, rescaled; the new output-gradient scale and history are returned
    as the gradients of ``out_grad_scale``/``out_grad_amax_history``.
    """
    return lax.dot_general(q_lhs, q_rhs, dimension_numbers,
                           preferred_element_type=preferred_element_type,
                           precision=lax.Precision.DEFAULT)


def quantized_dot_fwd(lhs: jax.Array, q_lhs: jax.Array, lhs_scale: jax.Array, rhs: jax.Array,
                      q_rhs: jax.Array, rhs_scale: jax.Array, out_grad_scale: jax.Array,
                      out_grad_amax_history: jax.Array, dimension_numbers: Any,
                      preferred_element_type: Any) -> tuple:
    """Forward rule of :func:`quantized_dot`."""
    out = lax.dot_general(q_lhs, q_rhs, dimension_numbers,
                          preferred_element_type=preferred_element_type,
                          precision=lax.Precision.DEFAULT)
    return out, (lhs, q_lhs, lhs_scale, rhs, q_rhs, rhs_scale, out_grad_scale,
                 out_grad_amax_history)


def quantized_dot_bwd(dimension_numbers: Any, preferred_element_type: Any, res: Any,
                      g: jax.Array) -> tuple:
    """Backward rule of :func:`quantized_dot` (see there)."""
    lhs, q_lhs, lhs_scale, rhs, q_rhs, rhs_scale, g_scale, g_history = res
    new_g_scale, new_g_history = update_fp8_meta(g, jnp.float8_e5m2, g_scale, g_history)
    g_scale32 = _fm32_to_float32(new_g_scale)
    q_g = quantize(g, jnp.float8_e5m2, g_scale32, preferred_element_type)
    transpose = dict(dimension_numbers=dimension_numbers, precision=lax.Precision.HIGHEST,
                     preferred_element_type=preferred_element_type)
    grad_lhs = dequantize(dot_general_transpose_lhs(q_g, lhs, q_rhs, **transpose),
                          preferred_element_type, _fm32_to_float32(rhs_scale) * g_scale32)
    grad_rhs = dequantize(dot_general_transpose_rhs(q_g, q_lhs, rhs, **transpose),
                          preferred_element_type, _fm32_to_float32(lhs_scale) * g_scale32)
    return grad_lhs, None, None, grad_rhs, None, None, new_g_scale, new_g_history


quantized_dot.defvjp(quantized_dot_fwd, quantized_dot_bwd)


def fp8_scaled_dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                           precision: Any = None, preferred_element_type: Any = None, *,
                           lhs_scale: jax.Array | None = None,
                           rhs_scale: jax.Array | None = None,
                           grad_scale: jax.Array | None = None,
                           lhs_amax_history: jax.Array | None = None,
                           rhs_amax_history: jax.Array | None = None,
                           grad_amax_history: jax.Array | None = None,
                           quantize_compute_type: Any = jnp.float32) -> jax.Array:
    """``lax.dot_general`` computed on e4m3 operands, with delayed scaling of every tensor.

    The scales and histories are the six FP8 variables of an :class:`Fp8DotGeneralBase`; their
    gradients are their updated values. ``precision`` is ignored (with a warning): the product
    of FP8 operands has one precision.

    >>> ones, hist = jnp.ones(1), jnp.zeros(4)
    >>> y = fp8_scaled_dot_general(jnp.ones((2, 3)), jnp.ones((3, 4)), (((1,), (0,)), ((), ())),
    ...     preferred_element_type=jnp.float32, lhs_scale=ones, rhs_scale=ones, grad_scale=ones,
    ...     lhs_amax_history=hist, rhs_amax_history=hist, grad_amax_history=hist)
    >>> y.shape, float(y[0, 0])
    ((2, 4), 3.0)
    """
    if precision is not None:
        warnings.warn(
            "fp8_scaled_dot_general ignores the precision argument it was given "
            f"({precision!r}): FP8 operands are multiplied at their own precision.",
            stacklevel=2)
    e4m3 = jnp.float8_e4m3fn
    q_lhs, lhs_scale_now = in_q(quantize_compute_type, e4m3, lhs, lhs_scale, lhs_amax_history)
    q_rhs, rhs_scale_now = in_q(quantize_compute_type, e4m3, rhs, rhs_scale, rhs_amax_history)
    y = quantized_dot(lhs, q_lhs, lhs_scale_now, rhs, q_rhs, rhs_scale_now, grad_scale,
                      grad_amax_history, dimension_numbers, preferred_element_type)
    return out_dq(preferred_element_type, lhs_scale_now, rhs_scale_now, y)


@partial(custom_jvp, nondiff_argnums=(2, 3, 4))
def dot_general_with_precision(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                               precision: Any = None,
                               preferred_element_type: Any = None) -> jax.Array:
    """``lax.dot_general`` at DEFAULT precision forward, HIGHEST for its derivatives.

    ``precision`` and ``preferred_element_type`` are ignored (with a warning).

    >>> dot_general_with_precision(jnp.ones((2, 3)), jnp.ones((3,)), (((1,), (0,)), ((), ())))
    Array([3., 3.], dtype=float32)
    """
    if precision is not None or preferred_element_type is not None:
        warnings.warn(
            "dot_general_with_precision ignores the precision/preferred_element_type it was "
            "given: it runs at DEFAULT precision forward and HIGHEST for derivatives.",
            stacklevel=2)
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=lax.Precision.DEFAULT)


@dot_general_with_precision.defjvp
def dot_general_with_precision_jvp(dimension_numbers: Any, precision: Any,
                                   preferred_element_type: Any, primals: tuple,
                                   tangents: tuple) -> tuple[jax.Array, jax.Array]:
    """JVP rule of :func:`dot_general_with_precision` (product rule at HIGHEST precision)."""
    lhs, rhs = primals
    lhs_dot, rhs_dot = tangents
    out = lax.dot_general(lhs, rhs, dimension_numbers, precision=lax.Precision.DEFAULT)
    highest = partial(lax.dot_general, dimension_numbers=dimension_numbers,
                      precision=lax.Precision.HIGHEST)
    return out, highest(lhs_dot, rhs) + highest(lhs, rhs_dot)


# --- the modules ------------------------------------------------------------------------------
def _parse_dot_inputs(*args: Any, **kwargs: Any) -> tuple[jax.Array, jax.Array, Any, Any]:
    # Called like lax.dot_general(lhs, rhs, dimension_numbers, ...); the kernel's dtype is the
    # layer's computation dtype, so the input is cast to it.
    x, kernel, dimension_numbers = args[0], args[1], args[2]
    compute_dtype = kernel.dtype
    return jnp.asarray(x, compute_dtype), kernel, dimension_numbers, compute_dtype


class Fp8DotGeneralBase(module.Module):
    """The six FP8 variables (scale and amax history of input, kernel and output gradient).

    Attributes:
      amax_history_length: how many past amax values each history keeps (1024).
      e4m3_dtype: the FP8 format of inputs and kernels.
      e5m2_dtype: the FP8 format of output gradients.
    """

    amax_history_length: int = 1024
    e4m3_dtype: DType = jnp.float8_e4m3fn
    e5m2_dtype: DType = jnp.float8_e5m2

    def setup(self) -> None:
        col = OVERWRITE_WITH_GRADIENT
        key = random.PRNGKey(0)  # the initializers ignore it
        hist = (initializers.zeros_init(), key, (self.amax_history_length,), jnp.float32)
        scale = (initializers.ones_init(), key, (1,), jnp.float32)
        self.input_amax_history = self.variable(col, "input_amax_history", *hist)
        self.kernel_amax_history = self.variable(col, "kernel_amax_history", *hist)
        self.output_grad_amax_history = self.variable(col, "output_grad_amax_history", *hist)
        self.input_scale = self.variable(col, "input_scale", *scale)
        self.kernel_scale = self.variable(col, "kernel_scale", *scale)
        self.output_grad_scale = self.variable(col, "output_grad_scale", *scale)


class Fp8DotGeneralOp(Fp8DotGeneralBase):
    """Deprecated (as in Flax 0.12.8): rounds the operands through FP8, multiplies in the
    compute dtype. Use :class:`Fp8DirectDotGeneralOp` or :class:`Fp8Einsum`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if type(self) is Fp8DotGeneralOp:
            warnings.warn("Fp8DotGeneralOp is deprecated: use Fp8DirectDotGeneralOp or "
                          "Fp8Einsum, which multiply the FP8 operands directly.",
                          DeprecationWarning, stacklevel=2)

    def __call__(self, *args: Any, **kwargs: Any) -> jax.Array:
        """Called as ``lax.dot_general(lhs, rhs, dimension_numbers, ...)``; the precision and
        preferred-type arguments are ignored."""
        x, k, dimension_numbers, comp_dtype = _parse_dot_inputs(*args, **kwargs)
        x_qdq = in_qdq(comp_dtype, self.e4m3_dtype, x, self.input_scale.value,
                       self.input_amax_history.value)
        k_qdq = in_qdq(comp_dtype, self.e4m3_dtype, k, self.kernel_scale.value,
                       self.kernel_amax_history.value)
        y = dot_general_with_precision(x_qdq, k_qdq, dimension_numbers)
        return out_qdq(comp_dtype, self.e5m2_dtype, y, self.output_grad_scale.value,
                       self.output_grad_amax_history.value)


class Fp8DirectDotGeneralOp(Fp8DotGeneralBase):
    """A ``lax.dot_general`` replacement that multiplies FP8 operands directly
    (:func:`fp8_scaled_dot_general`); the result has the input's (cast) dtype."""

    def __call__(self, *args: Any, **kwargs: Any) -> jax.Array:
        """Called as ``lax.dot_general(lhs, rhs, dimension_numbers, ...)``; the precision and
        preferred-type arguments are ignored."""
        x, k, dimension_numbers, comp_dtype = _parse_dot_inputs(*args, **kwargs)
        return fp8_scaled_dot_general(
            x, k, dimension_numbers, precision=None, preferred_element_type=x.dtype,
            lhs_scale=self.input_scale.value, rhs_scale=self.kernel_scale.value,
            grad_scale=self.output_grad_scale.value,
            lhs_amax_history=self.input_amax_history.value,
            rhs_amax_history=self.kernel_amax_history.value,
            grad_amax_history=self.output_grad_amax_history.value,
            quantize_compute_type=comp_dtype)


class NANOOFp8DotGeneralOp(Fp8DotGeneralOp):
    """:class:`Fp8DotGeneralOp` with the ``fnuz`` FP8 formats (no negative zero, no infinities)
    used by AMD's accelerators."""

    e4m3_dtype: DType = jnp.float8_e4m3fnuz
    e5m2_dtype: DType = jnp.float8_e5m2fnuz


class Fp8Einsum(Fp8DotGeneralBase):
    """An ``einsum`` replacement (``nn.Einsum(..., einsum_cls=...)``) whose products run on FP8
    operands through :func:`fp8_scaled_dot_general`. The second operand is taken to be the
    kernel: its dtype is the computation dtype, and the first operand is cast to it."""

    def __call__(self, eqn: str, lhs: jax.Array, rhs: jax.Array,
                 precision: lax.Precision | None = None,
                 preferred_element_type: DTypeLike | None = None) -> jax.Array:
        compute_dtype = rhs.dtype
        dot_general = partial(
            fp8_scaled_dot_general,
            lhs_scale=self.input_scale.value, rhs_scale=self.kernel_scale.value,
            grad_scale=self.output_grad_scale.value,
            lhs_amax_history=self.input_amax_history.value,
            rhs_amax_history=self.kernel_amax_history.value,
            grad_amax_history=self.output_grad_amax_history.value,
            quantize_compute_type=compute_dtype)
        return jnp.einsum(eqn, lhs.astype(compute_dtype), rhs, precision=precision,
                          preferred_element_type=preferred_element_type,
                          _dot_general=dot_general)


Fp8DotGeneral = Fp8DirectDotGeneralOp
