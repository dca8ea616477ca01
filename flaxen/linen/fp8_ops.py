"""FP8 matrix products with delayed scaling: ``Fp8DotGeneralOp`` and its quantize helpers.

``Fp8DotGeneralOp`` is a drop-in ``dot_general`` module (``nn.Dense(...,
dot_general_cls=nn.Fp8DotGeneralOp)``). It rounds the input and the kernel through
``float8_e4m3fn`` and, on the backward pass, the output gradient through ``float8_e5m2``,
each with a per-tensor scale. The scales come from a history of recent absolute maxima
("amax"), kept in the ``_overwrite_with_gradient`` collection: the backward pass returns the
*updated* scale and history as their "gradients", and ``TrainState.apply_gradients`` writes
those gradients over the old values instead of applying the optimizer to them.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> layer = nn.Dense(4, dot_general_cls=nn.Fp8DotGeneralOp)
>>> v = layer.init(jax.random.key(0), jnp.ones((2, 3)))
>>> sorted(v[OVERWRITE_WITH_GRADIENT]['Fp8DotGeneralOp_0'])  # doctest: +NORMALIZE_WHITESPACE
['input_amax_history', 'input_scale', 'kernel_amax_history', 'kernel_scale',
 'output_grad_amax_history', 'output_grad_scale']
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from flaxen.linen import initializers
from flaxen.linen.module import Module

__all__ = [
    "OVERWRITE_WITH_GRADIENT",
    "Fp8DotGeneralOp",
    "compute_amax_history",
    "compute_scale",
    "dequantize",
    "get_fp8_max",
    "in_qdq",
    "out_qdq",
    "qdq_and_return",
    "quantize",
    "quantize_dequantize",
]

# The collection whose "gradients" replace the variables (see TrainState.apply_gradients).
OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"


def get_fp8_max(fp8_dtype: Any, out_dtype: Any) -> jax.Array:
    """The largest finite value of ``fp8_dtype``, as an ``out_dtype`` scalar.

    >>> float(get_fp8_max(jnp.float8_e4m3fn, jnp.float32))
    448.0
    """
    return jnp.asarray(jnp.finfo(fp8_dtype).max, out_dtype)


def quantize(x: jax.Array, q_dtype: Any, scale: jax.Array, compute_dtype: Any) -> jax.Array:
    """``x / scale``, clipped to ``q_dtype``'s finite range and cast to it."""
    dtype_max = get_fp8_max(q_dtype, jnp.float32).astype(compute_dtype)
    scaled = x / jnp.broadcast_to(scale.astype(compute_dtype), x.shape)
    return jnp.clip(scaled, -dtype_max, dtype_max).astype(q_dtype)


def dequantize(x: jax.Array, dq_dtype: Any, scale: jax.Array) -> jax.Array:
    """``x`` cast to ``dq_dtype`` and multiplied back by ``scale``."""
    return x.astype(dq_dtype) * jnp.broadcast_to(scale.astype(dq_dtype), x.shape)


def quantize_dequantize(
    x: jax.Array, q_dtype: Any, scale: jax.Array, compute_dtype: Any
) -> jax.Array:
    """``x`` rounded through ``q_dtype`` with ``scale``, returned in ``x``'s dtype.

    >>> y = quantize_dequantize(jnp.array([1.0, 1.07]), jnp.float8_e4m3fn, jnp.ones((1,)),
    ...                         jnp.float32)
    >>> y.tolist()
    [1.0, 1.125]
    """
    return dequantize(quantize(x, q_dtype, scale, compute_dtype), x.dtype, scale)


def compute_scale(amax: jax.Array, scale: jax.Array, fp8_max: jax.Array,
                  margin: int = 0) -> jax.Array:
    """The scale that maps ``amax`` onto ``fp8_max`` (``amax / fp8_max``, times ``2**margin``).

    Where ``amax`` is zero or not finite the old ``scale`` is kept.

    >>> float(compute_scale(jnp.float32(2.0), jnp.float32(1.0), jnp.float32(448.0)))
    0.004464285913854837
    """
    # Work with the reciprocal (how many fp8 steps per unit) as transformer engines do.
    inv_old = 1.0 / scale
    inv = (fp8_max / amax) / (2.0 ** margin)
    inv = jnp.where(amax > 0.0, inv, inv_old)
    inv = jnp.where(jnp.isfinite(amax), inv, inv_old)
    return 1.0 / inv


def compute_amax_history(x: jax.Array, amax_history: jax.Array) -> jax.Array:
    """``amax_history`` rolled one step, with ``max(|x|)`` written at index 0."""
    amax_update = jnp.max(jnp.abs(x)).astype(amax_history.dtype)
    return jnp.roll(amax_history, shift=-1, axis=0).at[0].set(amax_update)


def qdq_and_return(
    x: jax.Array, q_dtype: Any, scale: jax.Array, amax_history: jax.Array, compute_dtype: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(x rounded through q_dtype, the new scale, the new amax history)``.

    The new scale comes from the largest amax in the *old* history (delayed scaling); the
    new history records ``x``'s amax.
    """
    dtype_max = get_fp8_max(q_dtype, jnp.float32)
    new_scale = compute_scale(jnp.max(amax_history, axis=0), scale, dtype_max)
    qx = quantize_dequantize(x, q_dtype, new_scale, compute_dtype)
    return qx, new_scale, compute_amax_history(x, amax_history)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def in_qdq(compute_dtype: Any, inp: jax.Array, scale: jax.Array,
           amax_history: jax.Array) -> jax.Array:
    """``inp`` rounded through e4m3; the backward pass passes the gradient straight through
    and returns the new scale and history as the gradients of ``scale``/``amax_history``."""
    qin, _, _ = qdq_and_return(inp, jnp.float8_e4m3fn, scale, amax_history, compute_dtype)
    return qin


def _in_qdq_fwd(compute_dtype, inp, scale, amax_history):
    qin, new_scale, new_history = qdq_and_return(
        inp, jnp.float8_e4m3fn, scale, amax_history, compute_dtype)
    return qin, (new_scale, new_history)


def _in_qdq_bwd(compute_dtype, res, g):
    new_scale, new_history = res
    return g, new_scale, new_history


in_qdq.defvjp(_in_qdq_fwd, _in_qdq_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def out_qdq(compute_dtype: Any, out: jax.Array, scale: jax.Array,
            amax_history: jax.Array) -> jax.Array:
    """The identity forward; the backward pass rounds the output gradient through e5m2 and
    returns the new scale and history as the gradients of ``scale``/``amax_history``."""
    return out


def _out_qdq_fwd(compute_dtype, out, scale, amax_history):
    return out, (scale, amax_history)


def _out_qdq_bwd(compute_dtype, res, g):
    scale, amax_history = res
    return qdq_and_return(g, jnp.float8_e5m2, scale, amax_history, compute_dtype)


out_qdq.defvjp(_out_qdq_fwd, _out_qdq_bwd)


class Fp8DotGeneralOp(Module):
    """A ``lax.dot_general`` replacement that computes through FP8 with delayed scaling.

    Attributes:
      amax_history_length: how many past amax values each history keeps (1024).
    """

    amax_history_length: int = 1024
    e4m3_dtype: Any = jnp.float8_e4m3fn
    e5m2_dtype: Any = jnp.float8_e5m2

    def setup(self) -> None:
        col = OVERWRITE_WITH_GRADIENT
        key = jax.random.PRNGKey(0)  # the initializers ignore it
        hist = (initializers.zeros_init(), key, (self.amax_history_length,), jnp.float32)
        scale = (initializers.ones_init(), key, (1,), jnp.float32)
        self.input_amax_history = self.variable(col, "input_amax_history", *hist)
        self.kernel_amax_history = self.variable(col, "kernel_amax_history", *hist)
        self.output_grad_amax_history = self.variable(col, "output_grad_amax_history", *hist)
        self.input_scale = self.variable(col, "input_scale", *scale)
        self.kernel_scale = self.variable(col, "kernel_scale", *scale)
        self.output_grad_scale = self.variable(col, "output_grad_scale", *scale)

    def __call__(self, *args: Any, **kwargs: Any) -> jax.Array:
        """Called as ``lax.dot_general(lhs, rhs, dimension_numbers, ...)``; the precision and
        preferred-type arguments are ignored (the product runs on the rounded operands)."""
        x, k, dimension_numbers = args[0], args[1], args[2]
        comp_dtype = k.dtype
        x = jnp.asarray(x, comp_dtype)
        x_qdq = in_qdq(comp_dtype, x, self.input_scale.value, self.input_amax_history.value)
        k_qdq = in_qdq(comp_dtype, k, self.kernel_scale.value, self.kernel_amax_history.value)
        y = lax.dot_general(x_qdq, k_qdq, dimension_numbers)
        return out_qdq(comp_dtype, y, self.output_grad_scale.value,
                       self.output_grad_amax_history.value)
