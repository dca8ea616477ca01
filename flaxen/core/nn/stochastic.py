"""Functional dropout on Scopes (RNG stream ``'dropout'``)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax, random

from flaxen.core.scope import Scope


def dropout(scope: Scope, inputs: Any, rate: float, deterministic: bool = False,
            rng: Any = None) -> Any:
    """Zeroes each element of ``inputs`` with probability ``rate`` and scales the rest by
    ``1 / (1 - rate)``.

    Returns ``inputs`` unchanged when ``deterministic`` or ``rate == 0``. The mask is drawn
    with ``rng`` or, when it is None, with ``scope.make_rng('dropout')``.
    """
    if rate == 0.0 or deterministic:
        return inputs
    keep_prob = 1.0 - rate
    if rng is None:
        rng = scope.make_rng("dropout")
    mask = random.bernoulli(rng, p=keep_prob, shape=inputs.shape)
    return lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))
