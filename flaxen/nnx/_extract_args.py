"""Argument containers and helpers of ``nnx.extract``: :class:`OrderedDict` (a dict that
flattens in insertion order), :func:`labeled` (a named tuple of keyword arguments whose key
paths name them), :func:`filter_kwargs` and :func:`treemap_copy_args`.

>>> import jax
>>> from flaxen.nnx import extract
>>> jax.tree.leaves(extract.OrderedDict(b=1, a=2))
[1, 2]
>>> args = extract.labeled(inputs=(1,), outputs=2)
>>> args['outputs'], [jax.tree_util.keystr(p) for p, _ in jax.tree.leaves_with_path(args)]
(2, ['.inputs[0]', '.outputs'])
"""

from __future__ import annotations

import collections
import functools
import inspect
import typing as tp

import jax

from flaxen.nnx import reprlib

__all__ = ["OrderedDict", "filter_kwargs", "labeled", "treemap_copy_args"]

A = tp.TypeVar("A")
B = tp.TypeVar("B")
F = tp.TypeVar("F", bound=tp.Callable)


class OrderedDict(reprlib.MappingReprMixin, dict[A, B]):
    """A dict that JAX flattens in insertion order (a plain dict flattens in sorted key
    order), with ``DictKey`` paths.

    >>> import jax
    >>> d = OrderedDict([('z', 1), ('a', 2)])
    >>> out = jax.tree.map(lambda x: x * 10, d)
    >>> jax.tree.leaves(d), type(out).__name__, list(out.items())
    ([1, 2], 'OrderedDict', [('z', 10), ('a', 20)])
    """


def _od_flatten_with_keys(d: OrderedDict) -> tuple[list, tuple]:
    return [(jax.tree_util.DictKey(k), v) for k, v in d.items()], tuple(d.keys())


jax.tree_util.register_pytree_with_keys(
    OrderedDict, _od_flatten_with_keys,
    lambda keys, values: OrderedDict(zip(keys, values)))

_labeled_types: dict[tuple[str, ...], type] = {}


def _labeled_type(keys: tuple[str, ...]) -> type:
    cls = _labeled_types.get(keys)
    if cls is None:
        base: tp.Any = collections.namedtuple("LabeledTuple", keys)  # type: ignore[misc]

        class LabeledTuple(base):
            """A named tuple also indexed by name (``t['x']``), with ``keys()``."""

            __slots__ = ()

            def keys(self) -> tuple[str, ...]:
                return tuple(self._fields)

            def __getitem__(self, key: tp.Any) -> tp.Any:
                return getattr(self, key) if isinstance(key, str) else super().__getitem__(key)

        cls = _labeled_types[keys] = LabeledTuple
    return cls


def labeled(**kwargs: tp.Any) -> tp.Any:
    """The keyword arguments as a named tuple (one class per set of names): its JAX key
    paths start with ``.name``, so error messages name the argument a leaf came from.

    >>> t = labeled(a=1, b=2)
    >>> t.a, t['b'], t[0], t.keys(), type(t) is type(labeled(a=0, b=0))
    (1, 2, 1, ('a', 'b'), True)
    """
    return _labeled_type(tuple(kwargs))(**kwargs)


def filter_kwargs(f: tp.Callable[..., tp.Any], **kwargs: tp.Any) -> dict[str, tp.Any]:
    """The entries of ``kwargs`` that ``f`` accepts by name (all of them when ``f`` takes
    ``**kwargs``).

    >>> filter_kwargs(lambda x, *, y=0: x, x=1, y=2, z=3)
    {'x': 1, 'y': 2}
    >>> filter_kwargs(lambda **kw: kw, z=3)
    {'z': 3}
    """
    params = inspect.signature(f).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return kwargs
    named = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in named}


def treemap_copy_args(f: F) -> F:
    """``f`` called on fresh copies of its arguments' pytree containers (the leaves, and
    Variables' values, are the same objects): ``f`` may mutate the containers it gets.

    >>> @treemap_copy_args
    ... def g(xs):
    ...     xs.append(0)
    ...     return len(xs)
    >>> xs = [1, 2]
    >>> g(xs), xs
    (3, [1, 2])
    """
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        args, kwargs = jax.tree_util.tree_map(lambda x: x, (args, kwargs))
        return f(*args, **kwargs)

    return tp.cast(F, wrapper)
