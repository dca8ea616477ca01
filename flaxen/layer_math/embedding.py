"""Embedding-table lookups, shared by Linen's and NNX's ``Embed``.

``lookup`` gathers rows of a ``(num_embeddings, features)`` table; an id outside
``[0, num_embeddings)`` gives a row of NaN (for a float table), whatever the table size,
so a bad id shows up in the output instead of silently reading a clamped row.

>>> import jax.numpy as jnp
>>> table = jnp.arange(4.0).reshape(2, 2)
>>> lookup(table, jnp.array([1, 0])).tolist()
[[2.0, 3.0], [0.0, 1.0]]
>>> bool(jnp.isnan(lookup(table[:1], jnp.array([3]))).all())
True
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["check_ids", "lookup"]


def check_ids(inputs: jax.Array, layer: str = "Embed") -> None:
    """Raises ``ValueError`` unless ``inputs`` holds integers (signed or unsigned)."""
    dtype = jnp.result_type(inputs)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(
            f"Input type must be an integer or unsigned integer. {layer} got inputs of dtype "
            f"{jnp.dtype(dtype).name} and shape {jnp.shape(inputs)}; cast the indices, e.g. "
            "inputs.astype(jnp.int32)."
        )


def lookup(embedding: jax.Array, inputs: jax.Array) -> jax.Array:
    """``embedding[inputs]`` with NaN rows for out-of-range ids; shape ``inputs.shape +
    (features,)``."""
    num_embeddings, features = embedding.shape[0], embedding.shape[-1]
    if num_embeddings == 1:
        # A one-row table needs no gather: id 0 reads the row, anything else is out of range.
        hit = jnp.broadcast_to(jnp.asarray(inputs)[..., None], jnp.shape(inputs) + (features,))
        return jnp.where(hit == 0, embedding[0], jnp.nan)
    return jnp.take(embedding, inputs, axis=0)
