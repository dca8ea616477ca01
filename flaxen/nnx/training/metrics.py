"""``nnx.metrics``: running metrics as Modules (so they work inside ``nnx.jit``).

Each metric keeps its running sums in :class:`MetricState` Variables: ``update(**kwargs)``
adds a batch, ``compute()`` gives the current value, ``reset()`` starts over. ``Average``
and ``Accuracy`` take an optional ``mask`` (entries where it is 0/False are left out);
``MultiMetric`` forwards one ``update`` to several metrics, with a per-metric ``mask`` dict.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> acc = nnx.metrics.Accuracy()
>>> acc.update(logits=jnp.array([[0.1, 0.9], [0.8, 0.2]]), labels=jnp.array([1, 1]))
>>> float(acc.compute())
0.5
>>> avg = nnx.metrics.Average()
>>> avg.update(values=jnp.array([1., 2., 3.]), mask=jnp.array([True, True, False]))
>>> float(avg.compute())
1.5
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp

from flaxen import struct
from flaxen.errors import InvalidNNXValueError, NNXArgumentError
from flaxen.nnx import filterlib
from flaxen.nnx.pytreelib import Pytree
from flaxen.nnx.variablelib import Variable


class MetricState(Variable):
    """A metric's running value."""

    __slots__ = ()


class Metric(Pytree):
    """Base class: ``reset()``, ``update(**kwargs)``, ``compute()``; ``split(*filters)`` is
    ``nnx.split(self, *filters)``."""

    def __init__(self) -> None:
        # as Flax's: the base holds no state, so building it directly is a mistake
        raise NotImplementedError(
            f"Must override `__init__()` method: {type(self).__name__} is the abstract base. "
            "Subclass it and create the metric's state (nnx.Variable attributes) in your own "
            "__init__, without calling Metric.__init__.")

    def reset(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must override reset()")

    def update(self, **kwargs: tp.Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must override update()")

    def compute(self) -> tp.Any:
        raise NotImplementedError(f"{type(self).__name__} must override compute()")

    def split(self, *filters: filterlib.Filter) -> tuple:  # type: ignore[override]
        from flaxen.nnx import _graph_ops as graph

        return graph.split(self, *filters)


def _values_arg(metric: Metric, argname: str, kwargs: dict) -> tp.Any:
    if argname not in kwargs:
        raise NNXArgumentError(
            "", f"{type(metric).__name__}.update: Expected keyword argument {argname!r}, got "
            f"{sorted(kwargs)}",
            f"Pass the batch as {argname}=..., or build the metric with the name you use, "
            f"e.g. {type(metric).__name__}('loss').")
    return kwargs[argname]


class Average(Metric):
    """Running mean of the values passed as ``argname`` (default ``values``).

    ``update(values=..., mask=None)``: a Python number counts once; an array adds all its
    entries (those where ``mask`` is true, when given).
    """

    def __init__(self, argname: str = "values") -> None:
        self.argname = argname
        self.total = MetricState(jnp.array(0, dtype=jnp.float32))
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))

    def reset(self) -> None:
        self.total.value = jnp.array(0, dtype=jnp.float32)
        self.count.value = jnp.array(0, dtype=jnp.int32)

    def update(self, mask: jax.Array | None = None, **kwargs: tp.Any) -> None:
        values = _values_arg(self, self.argname, kwargs)
        scalar = isinstance(values, (int, float))
        if mask is not None and scalar:
            raise InvalidNNXValueError(
                "", f"{type(self).__name__}.update got a mask, so {self.argname} should be a "
                f"jax array (got the Python number {values!r})",
                "Pass the values as an array of the mask's shape, or drop the mask.")
        if scalar:
            self.total.value = self.total.value + values
            self.count.value = self.count.value + 1
        elif mask is None:
            values = jnp.asarray(values)
            self.total.value = self.total.value + values.sum()
            self.count.value = self.count.value + values.size
        else:
            values = jnp.asarray(values)
            mask = jnp.asarray(mask)
            self.total.value = self.total.value + (values * mask.astype(values.dtype)).sum()
            self.count.value = self.count.value + mask.sum().astype(jnp.int32)

    def compute(self) -> jax.Array:
        return self.total.value / self.count.value


@struct.dataclass
class Statistics:
    """What :class:`Welford` computes: mean, standard error of the mean, standard deviation."""

    mean: jax.Array
    standard_error_of_mean: jax.Array
    standard_deviation: jax.Array


class Welford(Metric):
    """Running mean and variance (Welford's / Chan's parallel update, numerically stable).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> w = nnx.metrics.Welford()
    >>> w.update(values=jnp.array([1., 2., 3., 4.]))
    >>> float(w.compute().mean), round(float(w.compute().standard_deviation), 4)
    (2.5, 1.118)
    """

    def __init__(self, argname: str = "values") -> None:
        self.argname = argname
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))
        self.mean = MetricState(jnp.array(0, dtype=jnp.float32))
        self.m2 = MetricState(jnp.array(0, dtype=jnp.float32))

    def reset(self) -> None:
        self.count.value = jnp.array(0, dtype=jnp.int32)
        self.mean.value = jnp.array(0, dtype=jnp.float32)
        self.m2.value = jnp.array(0, dtype=jnp.float32)

    def update(self, **kwargs: tp.Any) -> None:
        values = _values_arg(self, self.argname, kwargs)
        batch_mean: float | jax.Array
        batch_m2: float | jax.Array
        if isinstance(values, (int, float)):
            n, batch_mean, batch_m2 = 1, values, 0.0
        else:
            values = jnp.asarray(values)
            n, batch_mean = values.size, values.mean()
            batch_m2 = values.var() * values.size
        old_n = self.count.value
        new_n = old_n + n
        delta = batch_mean - self.mean.value
        self.count.value = new_n
        self.mean.value = self.mean.value + delta * n / new_n
        self.m2.value = self.m2.value + batch_m2 + delta * delta * n * old_n / new_n

    def compute(self) -> Statistics:
        var = self.m2.value / self.count.value
        std = var ** 0.5
        return Statistics(mean=self.mean.value, standard_error_of_mean=std / self.count.value
                          ** 0.5, standard_deviation=std)


class Accuracy(Average):
    """Fraction of correct predictions: ``update(logits=..., labels=..., mask=None)``.

    Multi-class (``threshold=None``): ``argmax(logits, -1) == labels``, logits having one more
    axis than labels. Binary (``threshold=0.5``, ...): ``(logits >= threshold) == (labels >
    0)``, same shapes.
    """

    def __init__(self, threshold: float | None = None, *args: tp.Any, **kwargs: tp.Any
                 ) -> None:
        if threshold is not None and not isinstance(threshold, float):
            raise NNXArgumentError(
                "", f"Accuracy: Expected threshold to be a float, got "
                f"{type(threshold).__name__}", "Pass e.g. threshold=0.5, or None for "
                "multi-class accuracy.")
        self.threshold = threshold
        super().__init__(*args, **kwargs)

    def update(self, *, logits: jax.Array, labels: jax.Array,  # type: ignore[override]
               mask: jax.Array | None = None, **_: tp.Any) -> None:
        logits, labels = jnp.asarray(logits), jnp.asarray(labels)
        if self.threshold is not None:
            if logits.ndim != labels.ndim:
                raise InvalidNNXValueError(
                    "", f"For binary classification, expected logits.ndim==labels.ndim; "
                    f"Accuracy.update got logits {logits.shape} and labels {labels.shape}",
                    "Pass one score per label (squeeze a trailing axis of size 1).")
        elif logits.ndim != labels.ndim + 1:
            raise InvalidNNXValueError(
                "", f"For multi-class classification, expected integer labels and "
                f"logits.ndim==labels.ndim+1; "
                f"Accuracy.update got logits {logits.shape} and labels {labels.shape}",
                "Pass class indices as labels, e.g. labels.argmax(-1) for one-hot labels, or "
                "set threshold= for binary accuracy.")
        if jnp.issubdtype(labels.dtype, jnp.integer):
            labels = labels.astype(jnp.int32)
        else:
            raise InvalidNNXValueError(
                "", f"Expected integer labels (labels.dtype==jnp.int32), Accuracy.update got "
                f"{labels.dtype}",
                "Pass integer class indices (labels.astype(jnp.int32)).")
        if self.threshold is not None:
            correct = (logits >= self.threshold) == (labels > 0)
        else:
            correct = jnp.argmax(logits, axis=-1) == labels
        super().update(values=correct, mask=mask)


class MultiMetric(Metric):
    """Several metrics updated together: ``MultiMetric(loss=Average('loss'), acc=Accuracy())``.

    ``update(**kwargs)`` passes every keyword to every metric; ``mask`` may be one array for
    all or a dict ``{metric_name: mask}``. ``compute()`` returns ``{name: value}``.
    """

    def __init__(self, **metrics: Metric) -> None:
        self._metric_names = tuple(metrics)
        for k, m in metrics.items():
            setattr(self, k, m)

    def reset(self) -> None:
        for k in self._metric_names:
            getattr(self, k).reset()

    def update(self, **updates: tp.Any) -> None:
        mask = updates.pop("mask", None)
        for k in self._metric_names:
            m = mask.get(k) if isinstance(mask, dict) else mask
            extra = {} if m is None else {"mask": m}
            getattr(self, k).update(**updates, **extra)

    def compute(self) -> dict[str, tp.Any]:
        return {k: getattr(self, k).compute() for k in self._metric_names}
