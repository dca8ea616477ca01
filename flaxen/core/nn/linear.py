"""Functional linear layers on Scopes: ``dense``, ``conv``, ``embedding``.

>>> import jax, jax.numpy as jnp
>>> from flaxen.core import init
>>> y, v = init(dense)(jax.random.PRNGKey(0), jnp.ones((1, 3)), 4)
>>> v['params']['kernel'].shape, y.shape
((3, 4), (1, 4))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from flaxen.core.scope import Scope

default_kernel_init = jax.nn.initializers.lecun_normal()
zeros = jax.nn.initializers.zeros


def dense(scope: Scope, inputs: Any, features: int, bias: bool = True,
          kernel_init: Callable[..., Any] = default_kernel_init,
          bias_init: Callable[..., Any] = zeros) -> Any:
    """``inputs @ kernel + bias`` with params ``kernel`` (in, features) and ``bias``."""
    kernel = scope.param("kernel", kernel_init, (inputs.shape[-1], features))
    y = jnp.dot(inputs, kernel)
    if bias:
        y = y + scope.param("bias", bias_init, (features,))
    return y


def conv(scope: Scope, inputs: Any, features: int, kernel_size: Sequence[int],
         strides: Sequence[int] | None = None, padding: Any = "SAME",
         bias: bool = True, kernel_init: Callable[..., Any] = default_kernel_init,
         bias_init: Callable[..., Any] = zeros) -> Any:
    """N-d convolution of NH..C ``inputs`` with a ``kernel`` of (*kernel_size, in, features)."""
    kernel_size = tuple(kernel_size)
    strides = tuple(strides) if strides is not None else (1,) * len(kernel_size)
    kernel = scope.param("kernel", kernel_init, kernel_size + (inputs.shape[-1], features))
    dims = jax.lax.conv_dimension_numbers(inputs.shape, kernel.shape,
                                          ("NHWC"[:1] + "HWD"[:len(kernel_size)] + "C",
                                           "HWD"[:len(kernel_size)] + "IO",
                                           "NHWC"[:1] + "HWD"[:len(kernel_size)] + "C"))
    y = jax.lax.conv_general_dilated(inputs, kernel, strides, padding, dimension_numbers=dims)
    if bias:
        y = y + scope.param("bias", bias_init, (features,))
    return y


def embedding(scope: Scope, num_embeddings: int, features: int,
              init_fn: Callable[..., Any] = jax.nn.initializers.normal(stddev=1.0)) -> Embedding:
    """An :class:`Embedding` with a ``table`` param of (num_embeddings, features)."""
    return Embedding(scope.param("table", init_fn, (num_embeddings, features)))


class Embedding:
    """A lookup table: ``lookup(ids)`` gathers rows, ``attend(q)`` is ``q @ table.T``."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def lookup(self, indices: Any) -> Any:
        return self.table[indices]

    def attend(self, query: Any) -> Any:
        return jnp.dot(query, self.table.T)
