"""Tests for flaxen.training.prefetch_iterator.PrefetchIterator."""

import threading

import pytest

from flaxen.training.prefetch_iterator import PrefetchIterator


def make(*args, **kwargs):
    with pytest.warns(DeprecationWarning, match="deprecated"):
        return PrefetchIterator(*args, **kwargs)


def test_yields_all_items_in_order_then_stops():
    it = make(iter(range(50)), buffer_size=3)
    assert list(it) == list(range(50))
    with pytest.raises(StopIteration):
        next(it)


def test_reads_ahead_but_bounded_by_buffer_size():
    produced = []
    ready = threading.Event()

    def source():
        for i in range(10):
            produced.append(i)
            if len(produced) == 3:
                ready.set()
            yield i

    it = make(source(), buffer_size=2)
    assert next(it) == 0
    assert ready.wait(5)  # the thread kept reading without being asked
    assert len(produced) <= 4  # one consumed, two buffered, one in hand
    it.close()


def test_source_error_is_raised_to_consumer():
    def source():
        yield 1
        raise RuntimeError("boom")

    it = make(source())
    assert next(it) == 1
    with pytest.raises(RuntimeError, match="boom"):
        next(it)


def test_close_ends_iteration():
    it = make(iter(range(100)))
    assert next(it) == 0
    it.close()
    with pytest.raises(StopIteration):
        next(it)


def test_bad_buffer_size():
    with pytest.raises(ValueError, match="buffer_size"):
        make(iter([]), buffer_size=0)
