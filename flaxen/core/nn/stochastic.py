"""Functional dropout on Scopes (RNG stream ``'dropout'``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flaxen.core.scope import Scope


def dropout(scope: Scope, x: Any, rate: float, deterministic: bool = False,
            rng: Any = None) -> Any:
    """Zeroes each element with probability ``rate`` and scales the rest by 1/(1-rate)."""
    if deterministic or rate == 0.0:
        return x
    if rate == 1.0:
        return jnp.zeros_like(x)
    if rng is None:
        rng = scope.make_rng("dropout")
    keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0)
