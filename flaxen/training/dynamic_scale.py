"""``DynamicScale``: dynamic loss scaling for mixed-precision (float16) gradients.

>>> import jax.numpy as jnp
>>> ds = DynamicScale(growth_interval=10)
>>> ds, is_finite, loss, grad = ds.value_and_grad(lambda p: p ** 2)(jnp.float32(3.0))
>>> bool(is_finite), float(loss), float(grad)
(True, 9.0, 6.0)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from flaxen import struct
from flaxen.typing import Array


class DynamicScaleResult(NamedTuple):
    dynamic_scale: DynamicScale
    finite: Array
    aux: Any
    grad: Any


class DynamicScale(struct.PyTreeNode):
    """Finds the largest loss scale at which float16 gradients do not overflow.

    ``value_and_grad`` works like ``jax.value_and_grad`` on the loss multiplied by ``scale``,
    unscales the result, and returns ``DynamicScaleResult(dynamic_scale, finite, aux, grad)``:
    the updated instance, whether every gradient is finite, the loss (or ``(loss, aux)`` with
    ``has_aux``) and the float32 gradients. After ``growth_interval`` finite steps in a row
    the scale grows by ``growth_factor``; a non-finite step shrinks it by ``backoff_factor``
    (not below ``minimum_scale``). Skip the update yourself when ``finite`` is False, e.g.
    with ``jnp.where``; the object is a pytree, so it can be passed through ``jax.jit``.

    Attributes:
      growth_factor: scale multiplier after ``growth_interval`` finite steps.
      backoff_factor: scale multiplier after a non-finite step.
      growth_interval: number of finite steps in a row before the scale grows.
      fin_steps: finite steps in a row so far.
      scale: the current loss scale.
      minimum_scale: lower bound for the scale (None: no bound).
    """

    growth_factor: float = struct.field(pytree_node=False, default=2.0)
    backoff_factor: float = struct.field(pytree_node=False, default=0.5)
    growth_interval: int = struct.field(pytree_node=False, default=2000)
    fin_steps: Array = 0
    scale: Array = 65536.0
    minimum_scale: float | None = struct.field(
        pytree_node=False, default=np.finfo(np.float32).tiny
    )

    def value_and_grad(
        self,
        fun: Callable[..., Any],
        argnums: int | Sequence[int] = 0,
        has_aux: bool = False,
        axis_name: str | None = None,
    ) -> Callable[..., DynamicScaleResult]:
        """Wraps ``fun`` like ``jax.value_and_grad``; see the class docstring.

        With ``axis_name`` the gradients are averaged over that mapped axis (``pmap``).
        """

        @functools.wraps(fun)
        def scaled_loss(*args):
            out = fun(*args)
            loss = out[0] if has_aux else out
            return self.scale * loss, out

        grad_fn = jax.value_and_grad(scaled_loss, argnums, has_aux=True)

        def wrapped(*args) -> DynamicScaleResult:
            (scaled, out), grad = grad_fn(*args)
            loss = scaled / self.scale
            aux = (loss, out[1]) if has_aux else loss
            grad = jax.tree.map(lambda g: jnp.asarray(g, jnp.float32) / self.scale, grad)
            if axis_name is not None:
                grad = lax.pmean(grad, axis_name)
            finite = jnp.array(True)
            for g in jax.tree.leaves(grad):
                finite &= jnp.all(lax.is_finite(g))
            grow = self.fin_steps == self.growth_interval
            grown = jnp.minimum(self.scale * self.growth_factor, jnp.finfo(jnp.float32).max)
            ok_scale = jnp.where(grow, grown, self.scale)
            bad_scale = self.scale * self.backoff_factor
            if self.minimum_scale is not None:
                bad_scale = jnp.maximum(bad_scale, self.minimum_scale)
            new_scale = jnp.where(finite, ok_scale, bad_scale)
            new_fin_steps = jnp.where(grow | ~finite, 0, self.fin_steps + 1)
            new_self = self.replace(fin_steps=new_fin_steps, scale=new_scale)
            return DynamicScaleResult(new_self, finite, aux, grad)

        return wrapped
