"""Learning-rate schedules of the Flax image-classification examples (legacy API).

Each factory returns ``f(step) -> lr``. Optax's schedules (``optax.warmup_cosine_decay_schedule``
and friends) are the recommended replacement (FLIP #1009); these stay for code that uses them.

Warm-up, shared by all three: when ``warmup_length > 0`` the rate is multiplied by a factor that
ramps linearly from 0 to 1 over the first ``warmup_length`` epochs (``epoch = step /
steps_per_epoch``).

>>> sched = create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.5], [2, 0.1]])
>>> [round(float(sched(s)), 4) for s in (0, 11, 21)]
[0.1, 0.05, 0.01]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np  # noqa: F401 - importable from here in Flax

Schedule = Callable[[int], float]


def _check_common(base_learning_rate: float, steps_per_epoch: int, warmup_length: float) -> None:
    if steps_per_epoch <= 0:
        raise ValueError(
            f"steps_per_epoch must be a positive number of steps, got {steps_per_epoch!r}. "
            "Pass the number of optimizer steps in one pass over the training set."
        )
    if warmup_length < 0:
        raise ValueError(
            f"warmup_length must be >= 0 epochs, got {warmup_length!r}. Use 0 for no warm-up."
        )


def _warmup(lr, step, steps_per_epoch: int, warmup_length: float):
    if warmup_length <= 0:
        return lr
    # The factor saturates at 1 once `warmup_length` epochs have passed.
    return lr * jnp.minimum(1.0, step / warmup_length / steps_per_epoch)


def create_constant_learning_rate_schedule(
    base_learning_rate: float, steps_per_epoch: int, warmup_length: float = 0.0
) -> Schedule:
    """Returns ``f(step)``: ``base_learning_rate``, times the warm-up factor if any.

    >>> f = create_constant_learning_rate_schedule(0.1, 10, warmup_length=2.0)
    >>> [round(float(f(s)), 4) for s in (0, 10, 20, 50)]
    [0.0, 0.05, 0.1, 0.1]
    """
    _check_common(base_learning_rate, steps_per_epoch, warmup_length)

    def learning_rate_fn(step):
        return _warmup(base_learning_rate, step, steps_per_epoch, warmup_length)

    return learning_rate_fn


def create_stepped_learning_rate_schedule(
    base_learning_rate: float,
    steps_per_epoch: int,
    lr_sched_steps: Sequence[Sequence[float]],
    warmup_length: float = 0.0,
) -> Schedule:
    """Returns ``f(step)``: piecewise-constant rate set by ``[epoch, factor]`` pairs.

    Once training is past ``epoch`` the rate is ``base_learning_rate * factor`` (factors are
    absolute, not cumulative), e.g. ``[[30, 0.1], [60, 0.01], [80, 0.001]]`` for ImageNet.

    >>> f = create_stepped_learning_rate_schedule(1.0, 1, [[30, 0.1], [60, 0.01]])
    >>> [round(float(f(s)), 4) for s in (10, 31, 61)]
    [1.0, 0.1, 0.01]
    """
    _check_common(base_learning_rate, steps_per_epoch, warmup_length)
    boundaries, factors = [], []
    for i, pair in enumerate(lr_sched_steps):
        if len(pair) != 2:
            raise ValueError(
                f"lr_sched_steps[{i}] must be an [epoch, lr_factor] pair, got {pair!r}. "
                "Example: [[30, 0.1], [60, 0.01]]."
            )
        boundaries.append(float(pair[0]))
        factors.append(float(pair[1]))
    if boundaries != sorted(boundaries):
        raise ValueError(
            f"lr_sched_steps epochs must be increasing, got {boundaries}. Sort the pairs by epoch."
        )
    epochs = jnp.asarray(boundaries, jnp.float32)
    rates = base_learning_rate * jnp.asarray([1.0, *factors], jnp.float32)

    def learning_rate_fn(step):
        epoch = step / steps_per_epoch
        # A boundary applies once the epoch is strictly past it.
        lr = rates[jnp.sum(epochs < epoch)]
        return _warmup(lr, step, steps_per_epoch, warmup_length)

    return learning_rate_fn


def create_cosine_learning_rate_schedule(
    base_learning_rate: float,
    steps_per_epoch: int,
    halfcos_epochs: float,
    warmup_length: float = 0.0,
) -> Schedule:
    """Returns ``f(step)``: half a cosine wave from ``base_learning_rate`` to 0.

    The wave spans ``halfcos_epochs`` epochs (normally the whole training run).

    >>> f = create_cosine_learning_rate_schedule(1.0, 10, halfcos_epochs=2)
    >>> [round(float(f(s)), 4) for s in (0, 10, 20)]
    [1.0, 0.5, 0.0]
    """
    _check_common(base_learning_rate, steps_per_epoch, warmup_length)
    if halfcos_epochs <= 0:
        raise ValueError(
            f"halfcos_epochs must be > 0, got {halfcos_epochs!r}. Pass the number of epochs "
            "over which the rate decays to 0 (usually the training length)."
        )
    half_wave_steps = halfcos_epochs * steps_per_epoch

    def learning_rate_fn(step):
        factor = jnp.cos(step * math.pi / half_wave_steps) * 0.5 + 0.5
        return _warmup(base_learning_rate * factor, step, steps_per_epoch, warmup_length)

    return learning_rate_fn


def __getattr__(name: str) -> Any:
    # absl's logging, importable from here as from Flax's module; imported only when asked for
    if name == "logging":
        from absl import logging

        return logging
    raise AttributeError(f"module 'flaxen.training.lr_schedule' has no attribute {name!r}")
