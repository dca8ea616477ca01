"""Tests for flaxen.training.early_stopping.EarlyStopping."""

import math

import jax

from flaxen.training.early_stopping import EarlyStopping


def test_defaults():
    es = EarlyStopping()
    assert (es.min_delta, es.patience, es.patience_count) == (0, 0, 0)
    assert math.isinf(es.best_metric) and not es.should_stop and not es.has_improved


def test_stops_after_more_than_patience_updates_without_improvement():
    es = EarlyStopping(min_delta=1e-3, patience=2)
    seen = []
    for loss in [1.0, 0.5, 0.4999, 0.4995, 0.4991]:
        es = es.update(loss)
        seen.append((es.has_improved, es.patience_count, es.should_stop))
    assert seen == [(True, 0, False), (True, 0, False), (False, 1, False),
                    (False, 2, False), (False, 3, True)]
    assert es.best_metric == 0.5


def test_should_stop_is_sticky_and_reset_clears_progress():
    es = EarlyStopping(patience=0).update(1.0).update(1.0)
    assert es.should_stop
    es = es.update(0.1)
    assert es.has_improved and es.should_stop and es.best_metric == 0.1
    fresh = es.reset()
    assert not fresh.should_stop and math.isinf(fresh.best_metric) and fresh.patience == 0


def test_old_tuple_api_unpacks():
    es = EarlyStopping(min_delta=0.1, patience=1)
    has_improved, es = es.update(1.0)
    assert has_improved and isinstance(es, EarlyStopping)
    has_improved, es = es.update(0.95)
    assert not has_improved and es.patience_count == 1


def test_is_a_pytree_and_immutable():
    es = EarlyStopping(patience=3).update(2.0)
    leaves = jax.tree.leaves(es)
    assert 2.0 in leaves
    assert es.update(1.0) is not es and es.best_metric == 2.0
