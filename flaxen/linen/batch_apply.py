"""``BatchApply``: call a function that takes one batch axis on inputs with several.

The leading ``num_dims`` axes of every array input are merged into one before the call,
and split back out of every array output after it. Inputs that are not arrays (Python
numbers, ``None``, ...) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["BatchApply"]


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


class BatchApply:
    """Wraps ``f`` so it sees the leading ``num_dims`` axes of its array inputs as one.

    >>> import jax.numpy as jnp
    >>> from flaxen import linen as nn
    >>> def dense(x):  # wants rank-2 inputs
    ...     assert x.ndim == 2
    ...     return x @ jnp.ones((4, 5))
    >>> nn.BatchApply(dense)(jnp.ones((2, 3, 4))).shape
    (2, 3, 5)

    Args:
      f: the function to call; it receives the merged inputs.
      num_dims: how many leading axes to merge (2 by default).
    """

    def __init__(self, f: Callable[..., Any], num_dims: int = 2) -> None:
        self._f = f
        self.num_dims = num_dims

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        n = self.num_dims
        leaves = [x for x in jax.tree_util.tree_leaves((args, kwargs))
                  if _is_array(x) and x.ndim >= n]
        if not leaves:
            raise ValueError(
                f"BatchApply requires at least one input that is an array (jax.Array or "
                f"numpy.ndarray) of rank >= num_dims={n}, to read the leading axes from; got "
                "none. Pass the batched inputs as arrays."
            )
        lead = leaves[0].shape[:n]

        def merge(x: Any) -> Any:
            # arrays of lower rank (a bias, a weight vector) are passed as they are
            return jnp.reshape(x, (-1, *x.shape[n:])) if _is_array(x) and x.ndim >= n else x

        def split(y: Any) -> Any:
            return jnp.reshape(y, (*lead, *y.shape[1:])) if _is_array(y) else y

        args, kwargs = jax.tree_util.tree_map(merge, (args, kwargs))
        return jax.tree_util.tree_map(split, self._f(*args, **kwargs))
