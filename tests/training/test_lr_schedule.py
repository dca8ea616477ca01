"""Tests for flaxen.training.lr_schedule."""

import math

import jax
import numpy as np
import pytest

from flaxen.training import lr_schedule as L


def test_constant_with_and_without_warmup():
    f = L.create_constant_learning_rate_schedule(0.1, 10)
    assert [f(s) for s in (0, 5, 100)] == [0.1, 0.1, 0.1]
    g = L.create_constant_learning_rate_schedule(0.1, 10, warmup_length=2.0)
    np.testing.assert_allclose([g(s) for s in (0, 5, 10, 20, 30)],
                               [0.0, 0.025, 0.05, 0.1, 0.1], rtol=1e-6)


def test_stepped_factors_are_absolute_and_apply_after_the_epoch():
    f = L.create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.5], [2.5, 0.1]])
    got = [float(f(s)) for s in (0, 10, 11, 25, 26, 1000)]
    np.testing.assert_allclose(got, [0.1, 0.1, 0.05, 0.05, 0.01, 0.01], rtol=1e-6)
    w = L.create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.5]], warmup_length=1.0)
    np.testing.assert_allclose([float(w(s)) for s in (0, 5, 10, 11)], [0, 0.05, 0.1, 0.05],
                               rtol=1e-6)
    empty = L.create_stepped_learning_rate_schedule(0.3, 10, [])
    assert float(empty(99)) == pytest.approx(0.3)


def test_cosine_half_wave_and_warmup():
    f = L.create_cosine_learning_rate_schedule(0.1, 10, 3)
    for s in (0, 7, 15, 29, 30):
        expected = 0.1 * (math.cos(math.pi * s / 30) * 0.5 + 0.5)
        assert float(f(s)) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    g = L.create_cosine_learning_rate_schedule(0.1, 10, 3, warmup_length=1.0)
    assert float(g(5)) == pytest.approx(0.5 * float(f(5)), rel=1e-5)


def test_schedules_trace_under_jit():
    f = L.create_stepped_learning_rate_schedule(1.0, 2, [[1, 0.1]], warmup_length=0.5)
    got = jax.jit(f)(np.int32(5))
    assert float(got) == pytest.approx(0.1)


def test_stepped_rates_are_float64_products_rounded_once():
    f = L.create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.1]])
    assert float(f(20)) == float(np.float32(0.1 * 0.1))
    assert float(f(20)) != float(np.float32(0.1) * np.float32(0.1))


def test_stepped_boundaries_are_rounded_to_whole_steps():
    f = L.create_stepped_learning_rate_schedule(1.0, 10, [[0.35, 0.1]])
    # 0.35 epochs of 10 steps is step 4 (rounded): the rate drops after it.
    assert [float(f(s)) for s in (3, 4, 5)] == [1.0, 1.0, float(np.float32(0.1))]


def test_unchecked_arguments_run_as_given():
    # Unsorted pairs: the count of boundaries passed picks the rate.
    f = L.create_stepped_learning_rate_schedule(1.0, 10, [[3, 0.5], [1, 0.1]])
    assert float(f(25)) == 0.5
    # Extra items in a pair are ignored; a pair without a factor is an IndexError.
    g = L.create_stepped_learning_rate_schedule(1.0, 10, [[1, 0.5, 9]])
    assert float(g(11)) == 0.5
    with pytest.raises(IndexError):
        L.create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.5], [2]])
    # No argument is validated: zero steps per epoch or half-wave give inf/nan rates.
    assert L.create_constant_learning_rate_schedule(0.1, 0)(3) == 0.1
    cosine = L.create_cosine_learning_rate_schedule(0.1, 10, 0)
    assert math.isnan(float(cosine(jax.numpy.int32(0))))
    with pytest.raises(ZeroDivisionError):  # a Python step divides in Python
        cosine(0)
