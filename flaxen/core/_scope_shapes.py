"""The abstract-shape cache behind ``Scope.param``'s shape check (re-exported by ``scope``).

Reading an existing parameter checks that its shape is the one its initializer would produce
(``ScopeParamShapeError`` otherwise). Evaluating the initializer abstractly on every read is
most of the cost of an eager ``apply``, so :func:`_init_shapes` caches the leaf shapes per
(initializer, shape arguments); :func:`static_key` gives re-created closures and partials the
same key each time. Nothing here knows about scopes.

>>> import jax.numpy as jnp
>>> _init_shapes(lambda rng, shape: jnp.zeros(shape), ((2, 3),), {})
[(2, 3)]
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = ["static_key"]

_SHAPE_CACHE: dict = {}
_FN_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # initializer -> static_key
_SHAPE_CACHE_MAX = 4096
_ABSTRACT_KEY: list = []
_FunctionType = types.FunctionType
_MethodType = types.MethodType


def _abstract_key() -> jax.ShapeDtypeStruct:
    if not _ABSTRACT_KEY:
        _ABSTRACT_KEY.append(jax.eval_shape(lambda: jax.random.PRNGKey(0)))
    return _ABSTRACT_KEY[0]


def _leaf_shapes(tree: Any) -> list[tuple]:
    # Metadata boxes are pytree nodes over their value, so flattening reaches the arrays
    # without unbox(), which for a Partitioned with a mesh would apply a sharding
    # constraint to what may be a ShapeDtypeStruct.
    leaves = jax.tree_util.tree_leaves(tree)
    return [tuple(np.shape(leaf)) for leaf in leaves]


def _compute_init_shapes(init_fn: Callable, args: tuple, kwargs: dict) -> list[tuple]:
    abstract = jax.eval_shape(lambda rng: init_fn(rng, *args, **kwargs), _abstract_key())
    return _leaf_shapes(abstract)


def static_key(x: Any, _depth: int = 0) -> Any:
    """A hashable value standing for what a pure function can compute from ``x``.

    Plain values stand for themselves (``TypeError`` when unhashable). A Python function
    stands for its code, defaults and the static keys of its closure cells, so a closure
    re-created on every call (``def init(rng, shape): ...`` inside a layer) has the same key
    each time; a ``functools.partial`` for its function and arguments. Objects may define
    ``_flaxen_static_key()`` (Linen Modules do: their class and field values). Nesting
    deeper than a few levels falls back to the object itself.

    >>> def scaled(c):
    ...     return lambda rng, shape: c * jax.numpy.ones(shape)
    >>> static_key(scaled(2.0)) == static_key(scaled(2.0)) != static_key(scaled(3.0))
    True
    """
    cls = type(x)
    if _depth < 6:
        d = _depth + 1
        if cls is _FunctionType:
            cells, defaults, kwdefaults = x.__closure__, x.__defaults__, x.__kwdefaults__
            return (x.__code__, id(x.__globals__),
                    defaults and tuple(static_key(v, d) for v in defaults),
                    kwdefaults and tuple((k, static_key(v, d)) for k, v in kwdefaults.items()),
                    cells and tuple(static_key(c.cell_contents, d) for c in cells))
        if cls is tuple:
            return tuple(static_key(v, d) for v in x)
        if cls is _MethodType:
            return (_MethodType, static_key(x.__func__, d), static_key(x.__self__, d))
        if cls is functools.partial:
            return (functools.partial, static_key(x.func, d),
                    tuple(static_key(a, d) for a in x.args),
                    tuple((k, static_key(v, d)) for k, v in x.keywords.items()))
        own = getattr(cls, "_flaxen_static_key", None)
        if own is not None:
            return own(x, d)
    hash(x)
    return x


class _HashedKey:
    """A static key with its hash computed once (hashing code objects is not free)."""

    __slots__ = ("key", "hash")

    def __init__(self, key: Any) -> None:
        self.key = key
        self.hash = hash(key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _HashedKey) and self.hash == other.hash
                                 and self.key == other.key)


def _init_shapes(init_fn: Callable, args: tuple, kwargs: dict) -> list[tuple]:
    """Leaf shapes ``init_fn(rng, *args, **kwargs)`` would produce, cached per call signature.

    Initializers are pure in their shape arguments, so the abstract evaluation is done
    once per (initializer, arguments) instead of on every ``param`` read (DESIGN.md,
    "Speed"). The initializer is keyed by :func:`static_key`, so closures re-created on
    every call hit the cache too; the key of one initializer object is memoized (as the
    identity-keyed cache before it, this assumes its closure cells are not rebound later).
    Unhashable arguments or closure contents (arrays, tracers) skip the cache.
    """
    try:
        if type(init_fn) is _FunctionType:  # hashed by identity, weakly referenceable
            fn_key = _FN_KEYS.get(init_fn)
            if fn_key is None:
                fn_key = _FN_KEYS[init_fn] = _HashedKey(static_key(init_fn))
        else:
            fn_key = _HashedKey(static_key(init_fn))
        key = (fn_key, args, tuple(kwargs.items())) if kwargs else (fn_key, args)
        hit = _SHAPE_CACHE.get(key)
    except (TypeError, ValueError):  # unhashable, or an empty closure cell
        return _compute_init_shapes(init_fn, args, kwargs)
    if hit is not None:
        return hit
    shapes = _compute_init_shapes(init_fn, args, kwargs)
    if len(_SHAPE_CACHE) >= _SHAPE_CACHE_MAX:
        _SHAPE_CACHE.clear()
    _SHAPE_CACHE[key] = shapes
    return shapes
