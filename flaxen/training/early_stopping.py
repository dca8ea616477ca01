"""``EarlyStopping``: stop training once a metric (lower is better) stops improving.

>>> es = EarlyStopping(min_delta=0.1, patience=1)
>>> for loss in [1.0, 0.95, 0.9, 0.93]:
...     es = es.update(loss)
>>> es.should_stop, es.best_metric
(True, 1.0)
"""

from __future__ import annotations

import math

from flaxen import struct


class EarlyStopping(struct.PyTreeNode):
    """Immutable early-stopping state; ``update`` returns the next state.

    A metric improves when it is lower than ``best_metric`` by more than ``min_delta``. When
    more than ``patience`` consecutive updates bring no improvement, ``should_stop`` becomes
    True and stays True.

    ``update`` returns the new ``EarlyStopping`` (as current Flax does); for code written for
    older Flax, which returned ``(has_improved, new_state)``, the result also unpacks that way:
    ``has_improved, es = es.update(loss)``.

    Attributes:
      min_delta: smallest decrease of the metric that counts as an improvement.
      patience: number of updates without improvement before stopping.
      best_metric: best (lowest) metric seen so far.
      patience_count: updates since the last improvement.
      should_stop: whether training should stop.
      has_improved: whether the last update improved ``best_metric``.
    """

    min_delta: float = 0
    patience: int = 0
    best_metric: float = float("inf")
    patience_count: int = 0
    should_stop: bool = False
    has_improved: bool = False

    def reset(self) -> EarlyStopping:
        """The same settings with the progress (best metric, counters) cleared."""
        return self.replace(
            best_metric=float("inf"), patience_count=0, should_stop=False, has_improved=False
        )

    def update(self, metric: float) -> EarlyStopping:
        """Records ``metric``; returns the updated state (unpackable as a pair, see above)."""
        if math.isinf(self.best_metric) or self.best_metric - metric > self.min_delta:
            return self.replace(best_metric=metric, patience_count=0, has_improved=True)
        count = self.patience_count + 1
        # Stopping is sticky: a later improvement does not undo it.
        should_stop = self.should_stop or count > self.patience
        return self.replace(patience_count=count, should_stop=should_stop, has_improved=False)

    def __iter__(self):
        # Unpacking support for the pre-0.7 API: `has_improved, es = es.update(metric)`.
        yield self.has_improved
        yield self
