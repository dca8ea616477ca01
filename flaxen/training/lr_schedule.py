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

import logging as _logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

Schedule = Callable[[int], float]

_logger = _logging.getLogger("flaxen.training.lr_schedule")

# Flax checks none of the arguments (a zero steps_per_epoch gives inf/nan rates, unsorted
# steps are counted as given), so neither does this module: code that runs there runs here.


def _note_legacy() -> None:
    # Flax logs (rather than warns) this on every schedule it builds.
    _logger.warning(
        "flax.training's learning-rate schedules are kept for old code; new code should "
        "use an Optax schedule instead (see "
        "https://optax.readthedocs.io/en/latest/api.html#optimizer-schedules)."
    )


def _warmup(lr, step, steps_per_epoch: int, warmup_length: float):
    if not warmup_length > 0.0:  # Flax's test: a NaN length means no warm-up
        return lr
    # The factor saturates at 1 once `warmup_length` epochs have passed.
    return lr * jnp.minimum(1.0, step / float(warmup_length) / steps_per_epoch)


def create_constant_learning_rate_schedule(
    base_learning_rate: float, steps_per_epoch: int, warmup_length: float = 0.0
) -> Schedule:
    """Returns ``f(step)``: ``base_learning_rate``, times the warm-up factor if any.

    >>> f = create_constant_learning_rate_schedule(0.1, 10, warmup_length=2.0)
    >>> [round(float(f(s)), 4) for s in (0, 10, 20, 50)]
    [0.0, 0.05, 0.1, 0.1]
    """
    _note_legacy()

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
    A boundary is the step ``round(epoch * steps_per_epoch)``.

    >>> f = create_stepped_learning_rate_schedule(1.0, 1, [[30, 0.1], [60, 0.01]])
    >>> [round(float(f(s)), 4) for s in (10, 31, 61)]
    [1.0, 0.1, 0.01]
    """
    _note_legacy()
    epochs = [pair[0] for pair in lr_sched_steps]
    factors = [pair[1] for pair in lr_sched_steps]
    # Boundaries are whole steps; the rates are products in float64, rounded to the
    # default float dtype only when indexed (the values Flax returns, to the bit).
    boundaries = np.round(np.array(epochs) * steps_per_epoch).astype(int)
    rates = np.array([1.0, *factors]) * base_learning_rate

    def learning_rate_fn(step):
        # The number of boundaries already passed picks the rate; the pairs are not sorted.
        lr = jnp.take(rates, jnp.sum(boundaries < step))
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
    _note_legacy()
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
