"""``nnx.metrics``: running metrics as Modules (so they work inside ``nnx.jit``).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> acc = nnx.metrics.Accuracy()
>>> acc.update(logits=jnp.array([[0.1, 0.9], [0.8, 0.2]]), labels=jnp.array([1, 1]))
>>> float(acc.compute())
0.5
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp

from flaxen.errors import InvalidNNXValueError, NNXArgumentError
from flaxen.nnx.module import Module
from flaxen.nnx.variables import Variable


class MetricState(Variable):
    """A metric's running value."""

    __slots__ = ()


class Metric(Module):
    """Base class: ``reset()``, ``update(**kwargs)``, ``compute()``."""

    def reset(self) -> None:
        raise NotImplementedError

    def update(self, **kwargs: tp.Any) -> None:
        raise NotImplementedError

    def compute(self) -> tp.Any:
        raise NotImplementedError


class Average(Metric):
    """Running mean of the values passed as ``argname`` (default ``values``)."""

    def __init__(self, argname: str = "values") -> None:
        self.argname = argname
        self.total = MetricState(jnp.array(0, dtype=jnp.float32))
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))

    def reset(self) -> None:
        self.total.value = jnp.array(0, dtype=jnp.float32)
        self.count.value = jnp.array(0, dtype=jnp.int32)

    def update(self, **kwargs: tp.Any) -> None:
        if self.argname not in kwargs:
            raise NNXArgumentError(
                "",
                f"{type(self).__name__}.update expects the keyword argument "
                f"{self.argname!r}, got {sorted(kwargs)}."
            )
        values = kwargs[self.argname]
        values = jnp.asarray(values, jnp.float32)
        self.total.value = self.total.value + values.sum()
        self.count.value = self.count.value + (values.size if values.ndim else 1)

    def compute(self) -> jax.Array:
        return self.total.value / self.count.value


class Accuracy(Average):
    """Fraction of ``argmax(logits, -1) == labels``; ``update(logits=..., labels=...)``."""

    def update(self, *, logits: jax.Array, labels: jax.Array, **_: tp.Any) -> None:  # type: ignore[override]
        if logits.ndim != labels.ndim + 1 or not jnp.issubdtype(labels.dtype, jnp.integer):
            raise InvalidNNXValueError(
                "",
                f"Expected integer labels of shape (...) and logits of shape (..., classes) "
                f"(logits.ndim == labels.ndim + 1); Accuracy.update got logits {logits.shape} "
                f"and labels {labels.shape} ({labels.dtype}). Pass class indices as labels, "
                "e.g. labels.argmax(-1) for one-hot labels."
            )
        super().update(values=(jnp.argmax(logits, axis=-1) == labels))


class MultiMetric(Metric):
    """Several metrics updated together: ``MultiMetric(loss=Average('loss'), acc=Accuracy())``."""

    def __init__(self, **metrics: Metric) -> None:
        self._metric_names = tuple(metrics)
        for k, m in metrics.items():
            setattr(self, k, m)

    def reset(self) -> None:
        for k in self._metric_names:
            getattr(self, k).reset()

    def update(self, **kwargs: tp.Any) -> None:
        for k in self._metric_names:
            getattr(self, k).update(**kwargs)

    def compute(self) -> dict[str, tp.Any]:
        return {k: getattr(self, k).compute() for k in self._metric_names}
