"""``PrefetchIterator``: read the next items of an iterator on a background thread.

Deprecated, as in Flax: ``tf.data`` and most loaders prefetch on their own. Kept for code that
uses it.

>>> import warnings
>>> with warnings.catch_warnings():
...     warnings.simplefilter('ignore')
...     it = PrefetchIterator(iter(range(3)), buffer_size=2)
>>> list(it)
[0, 1, 2]
"""

from __future__ import annotations

import collections
import threading
import warnings
from collections.abc import Iterator
from typing import Any


class PrefetchIterator:
    """Wraps ``data_iter``; a daemon thread keeps up to ``buffer_size`` items ready.

    Iterating yields the wrapped iterator's items in order. An exception raised by the wrapped
    iterator is re-raised by the ``next`` call that would have returned the failing item.
    ``close()`` stops the thread; after it, iteration ends.
    """

    def __init__(self, data_iter: Iterator[Any], buffer_size: int = 1) -> None:
        warnings.warn(
            "PrefetchIterator is deprecated. Use the standard `tf.data` prefetch method instead",
            DeprecationWarning,
            stacklevel=2,
        )
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size!r}.")
        self._data_iter = data_iter
        self._buffer_size = buffer_size
        self._buffer: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._active = True
        self._finished = False  # the wrapped iterator is exhausted
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._prefetch_loop, daemon=True)
        self._thread.start()

    def __iter__(self) -> PrefetchIterator:
        return self

    def __next__(self) -> Any:
        with self._cond:
            self._cond.wait_for(
                lambda: self._buffer or self._finished or self._error or not self._active
            )
            if self._buffer:
                item = self._buffer.popleft()
                self._cond.notify_all()
                return item
            if self._error is not None:
                error, self._error = self._error, None
                self._finished = True
                raise error
            raise StopIteration

    def close(self) -> None:
        """Stops prefetching and waits for the background thread to exit."""
        with self._cond:
            self._active = False
            self._buffer.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _prefetch_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: len(self._buffer) < self._buffer_size or not self._active
                )
                if not self._active:
                    return
            try:
                item = next(self._data_iter)
            except StopIteration:
                with self._cond:
                    self._finished = True
                    self._cond.notify_all()
                return
            except BaseException as e:  # handed to the consumer, raised there
                with self._cond:
                    self._error = e
                    self._cond.notify_all()
                return
            with self._cond:
                if not self._active:
                    return
                self._buffer.append(item)
                self._cond.notify_all()
