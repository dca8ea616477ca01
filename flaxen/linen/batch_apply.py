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

__all__ = [
    "BatchApply", "arbitrary_mergeable_leaf", "merge_leading_dims", "ndim_at_least",
    "split_leading_dim",
]


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def ndim_at_least(x: Any, num_dims: int) -> bool:
    """Whether ``x`` (an array, or anything ``jnp.asarray`` takes) has ``num_dims`` axes or more.

    >>> ndim_at_least(np.ones((2, 3)), 2), ndim_at_least(1.0, 1)
    (True, False)
    """
    if not _is_array(x):
        x = jnp.asarray(x)
    return x.ndim >= num_dims


def arbitrary_mergeable_leaf(min_num_dims: int, args: Any, kwargs: Any) -> Any:
    """The first leaf of ``args``, then of ``kwargs``, with at least ``min_num_dims`` axes
    (None when there is none).

    >>> arbitrary_mergeable_leaf(2, (np.ones(3), np.ones((2, 3))), {}).shape
    (2, 3)
    """
    for leaf in (*jax.tree_util.tree_leaves(args), *jax.tree_util.tree_leaves(kwargs)):
        if ndim_at_least(leaf, min_num_dims):
            return leaf
    return None


def merge_leading_dims(x: Any, num_dims: int) -> Any:
    """``x`` with its leading ``num_dims`` axes merged into one (unchanged if it has fewer).

    >>> merge_leading_dims(np.ones((2, 3, 4)), 2).shape
    (6, 4)
    """
    if not ndim_at_least(x, num_dims):
        return x
    return x.reshape((int(np.prod(x.shape[:num_dims])), *x.shape[num_dims:]))


def split_leading_dim(x: Any, to_dim: tuple[int, ...]) -> Any:
    """``x`` with its leading axis split into the axes ``to_dim``.

    >>> split_leading_dim(np.ones((6, 4)), (2, 3)).shape
    (2, 3, 4)
    """
    return x.reshape(tuple(to_dim) + tuple(x.shape[1:]))


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
