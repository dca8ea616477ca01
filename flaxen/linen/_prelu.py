"""``PReLU``: leaky ReLU with a learnable negative slope (exported by ``activation``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flaxen.linen.module import Module, compact


class PReLU(Module):
    """Parametric ReLU: ``x`` where ``x >= 0``, else ``negative_slope * x``.

    The slope is a scalar parameter ``negative_slope`` (dtype ``param_dtype``) that starts
    at ``negative_slope_init``; the output has the dtype of ``inputs``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> y, v = nn.PReLU().init_with_output(jax.random.key(0), jnp.array([-2.0, 3.0]))
    >>> y.tolist(), float(v['params']['negative_slope'])
    ([-0.019999999552965164, 3.0], 0.009999999776482582)
    """

    param_dtype: Any = jnp.float32
    negative_slope_init: float = 0.01

    @compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        """Applies the activation element-wise."""
        negative_slope = self.param(
            "negative_slope",
            lambda _key, _shape, dtype: jnp.asarray(self.negative_slope_init, dtype),
            (),
            self.param_dtype,
        )
        return jnp.where(inputs >= 0, inputs, jnp.asarray(negative_slope, inputs.dtype) * inputs)
