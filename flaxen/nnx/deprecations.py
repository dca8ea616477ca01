"""``nnx.deprecations``: keep an old function name working while pointing users to the new one.

``deprecated(new_fn)`` returns a stand-in for a renamed function: same name, signature and
docstring (with a notice on top), and a ``DeprecationWarning`` on each call before delegating.

>>> import warnings
>>> from flaxen.nnx.deprecations import deprecated
>>> def scale(x):
...     return 2 * x
>>> old_scale = deprecated(scale)
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     old_scale(3)
6
>>> caught[0].category.__name__
'DeprecationWarning'
"""

from __future__ import annotations

import functools
import typing as tp
import warnings
from collections.abc import Callable

F = tp.TypeVar("F", bound=Callable)


def deprecated(new_fn: F) -> F:
    """A wrapper of ``new_fn`` that warns (``DeprecationWarning``) on every call.

    The wrapper carries ``new_fn``'s name, signature and annotations (``functools.wraps``), so
    IDEs and ``inspect.signature`` still see the real parameters; its docstring starts with a
    deprecation notice naming ``new_fn``.

    >>> def area(w, h):
    ...     '''Width times height.'''
    ...     return w * h
    >>> print(deprecated(area).__doc__.splitlines()[1].strip())
    Use :func:`area` instead.
    """
    target = new_fn.__qualname__

    @functools.wraps(new_fn)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        # stacklevel=2 points the warning at the caller's line, where the old name is used
        warnings.warn(f"This function is deprecated. Use {target} instead.",
                      DeprecationWarning, stacklevel=2)
        return new_fn(*args, **kwargs)

    notice = f".. deprecated::\n   Use :func:`{target}` instead.\n\n"
    wrapper.__doc__ = notice + (new_fn.__doc__ or "")
    return tp.cast(F, wrapper)


__all__ = ["deprecated"]
