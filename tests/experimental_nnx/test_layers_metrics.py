"""nnx.metrics: Average, Accuracy and MultiMetric accumulate, reset, and survive split/merge."""

import jax.numpy as jnp
import pytest

from flaxen.experimental import nnx

LOGITS = jnp.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8]])
LABELS = jnp.array([1, 1, 0, 0, 1])  # argmax is [1, 0, 1, 0, 1]: 3 of 5 right
LOGITS2 = jnp.array([[0.9, 0.1], [0.1, 0.9], [0.2, 0.8], [0.7, 0.3], [0.4, 0.6]])
LABELS2 = jnp.array([0, 1, 1, 1, 1])  # argmax is [0, 1, 1, 0, 1]: 4 of 5 right


def test_accuracy_split_merge_keeps_running_totals():
    acc = nnx.metrics.Accuracy()
    acc.update(logits=LOGITS, labels=LABELS)
    graphdef, state = nnx.split(acc)
    acc = nnx.merge(graphdef, state)
    assert float(acc.compute()) == pytest.approx(0.6)
    acc.update(logits=LOGITS2, labels=LABELS2)
    assert float(acc.compute()) == pytest.approx(0.7)


def test_multimetric_averages_each_metric_and_resets_to_nan():
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average())
    assert all(bool(jnp.isnan(v)) for v in metrics.compute().values())
    metrics.update(logits=LOGITS, labels=LABELS, values=jnp.array([1, 2, 3, 4]))
    values = metrics.compute()
    assert float(values["accuracy"]) == pytest.approx(0.6) and float(values["loss"]) == 2.5
    metrics.update(logits=LOGITS2, labels=LABELS2, values=jnp.array([3, 2, 1, 0]))
    values = metrics.compute()
    assert float(values["accuracy"]) == pytest.approx(0.7) and float(values["loss"]) == 2.0
    metrics.reset()
    assert all(bool(jnp.isnan(v)) for v in metrics.compute().values())


def test_average_argname_and_accuracy_input_errors():
    avg = nnx.metrics.Average("loss")
    avg.update(loss=jnp.array([2.0, 4.0]))
    avg.update(loss=jnp.array(6.0))
    assert float(avg.compute()) == 4.0
    with pytest.raises(TypeError, match="'loss'"):
        avg.update(values=1.0)
    acc = nnx.metrics.Accuracy()
    acc.update(logits=LOGITS, labels=LABELS.astype(jnp.int16))  # any integer dtype
    with pytest.raises(ValueError, match="integer labels"):
        acc.update(logits=LOGITS, labels=jnp.ones((5, 2)))
