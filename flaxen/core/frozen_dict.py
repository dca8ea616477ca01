"""FrozenDict: the immutable, hashable nested mapping that holds Flax variables.

A ``FrozenDict`` stores its content as plain nested ``dict`` objects and wraps a
nested dict in a ``FrozenDict`` only when it is read, so building one from a
large parameter tree costs a single recursive copy. It is a JAX pytree with
keys (``DictKey`` entries, keys sorted the way JAX sorts dict keys), so
``jax.tree_util.tree_flatten_with_path`` and friends work on it.

>>> from flaxen.core import frozen_dict as fd
>>> variables = fd.freeze({'params': {'kernel': 1.0}})
>>> rest, params = variables.pop('params')
>>> params['kernel'], len(rest)
(1.0, 0)
"""

from __future__ import annotations

from collections.abc import Iterator, KeysView, Mapping, ValuesView
from types import MappingProxyType
from typing import Any, TypeVar

import jax

from flaxen import serialization

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["FrozenDict", "copy", "freeze", "pop", "pretty_repr", "unfreeze"]


def _indent(text: str, num_spaces: int) -> str:
    pad = " " * num_spaces
    return "\n".join(pad + line for line in text.split("\n"))


class FrozenKeysView(KeysView):
    """Keys view of a FrozenDict; reprs as ``frozen_dict_keys([...])``."""

    def __repr__(self) -> str:
        return f"frozen_dict_keys({list(self)})"


class FrozenValuesView(ValuesView):
    """Values view of a FrozenDict; reprs as ``frozen_dict_values([...])``."""

    def __repr__(self) -> str:
        return f"frozen_dict_values({list(self)})"


class FrozenDict(Mapping[K, V]):
    """An immutable variant of the Python dict.

    Nested dicts are frozen too: reading a nested mapping returns a
    ``FrozenDict``. Setting a key raises ``ValueError``; as in Flax, there is no
    ``__delitem__`` (``del d[k]`` raises ``AttributeError``) and no ``|``
    (``TypeError``). Use :meth:`copy`, :meth:`pop` or :func:`unfreeze` to derive
    a changed version.

    >>> d = FrozenDict({'a': {'b': 1}})
    >>> d['a']['b']
    1
    >>> d.copy({'c': 2})['c']
    2
    >>> hash(d) == hash(FrozenDict(a={'b': 1}))
    True
    """

    __slots__ = ("_dict", "_hash", "_sorted_keys")
    _dict: dict[Any, Any]
    _hash: int | None
    _sorted_keys: Any

    def __init__(self, *args: Any, __unsafe_skip_copy__: bool = False, **kwargs: Any):
        # The skip-copy path trusts the caller to hand over dicts nobody else
        # mutates; JAX's unflatten and our own copy/pop use it to avoid a
        # second recursive copy.
        if __unsafe_skip_copy__:
            content = dict(*args, **kwargs)
        else:
            content = _prepare_freeze(dict(*args, **kwargs))
        object.__setattr__(self, "_dict", content)
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_sorted_keys", None)

    def __getitem__(self, key: K) -> V:
        value = self._dict[key]
        if isinstance(value, dict):
            return FrozenDict(value, __unsafe_skip_copy__=True)  # type: ignore[return-value]
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        raise ValueError(
            f"FrozenDict is immutable: cannot set key {key!r}. Build a new one "
            "with `d.copy({key: value})`, or `unfreeze(d)` to get a mutable dict."
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"FrozenDict is immutable: cannot set attribute {name!r}. Use "
            "`d.copy(...)` or `unfreeze(d)` instead."
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"FrozenDict is immutable: cannot delete attribute {name!r}.")

    def __contains__(self, key: object) -> bool:
        return key in self._dict

    def __iter__(self) -> Iterator[K]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def __repr__(self) -> str:
        return self.pretty_repr()

    def __reduce__(self):
        return FrozenDict, (self.unfreeze(),)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenDict):
            return self._dict == other._dict
        if isinstance(other, dict):
            # A plain dict may hold FrozenDicts where we hold dicts; the
            # reflected comparison of those handles the mix.
            return self._dict == other
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = 0
            for key, value in self.items():
                h ^= hash((key, value))
            object.__setattr__(self, "_hash", h)
        return h

    def get(self, key: Any, default: Any = None) -> Any:
        """Returns ``self[key]`` if present, else ``default``."""
        if key in self._dict:
            return self[key]
        return default

    def keys(self) -> FrozenKeysView:
        return FrozenKeysView(self)

    def values(self) -> FrozenValuesView:
        return FrozenValuesView(self)

    def items(self) -> Iterator[tuple[K, V]]:  # type: ignore[override]
        """Yields ``(key, value)`` pairs; nested dicts come out as FrozenDicts."""
        for key in self._dict:
            yield (key, self[key])

    def pretty_repr(self, num_spaces: int = 4) -> str:
        """Returns an indented representation of the nested dictionary.

        >>> print(FrozenDict({'a': 1}).pretty_repr(num_spaces=2))
        FrozenDict({
          a: 1,
        })
        """
        return f"FrozenDict({pretty_repr(self._dict, num_spaces)})"

    def copy(self, add_or_replace: Mapping[K, V] = MappingProxyType({})) -> FrozenDict[K, V]:
        """Returns a new FrozenDict with entries of ``add_or_replace`` added or replaced.

        >>> FrozenDict({'a': 1}).copy({'a': 2, 'b': 3})['a']
        2
        """
        merged = dict(self._dict)
        if add_or_replace:
            merged.update(_prepare_freeze(dict(add_or_replace)))
        return FrozenDict(merged, __unsafe_skip_copy__=True)

    def pop(self, key: K) -> tuple[FrozenDict[K, V], V]:
        """Returns ``(new_frozen_dict_without_key, value)``; ``KeyError`` if absent.

        >>> rest, params = FrozenDict({'params': 1, 'stats': 2}).pop('params')
        >>> params, list(rest)
        (1, ['stats'])
        """
        value = self[key]
        remaining = {k: v for k, v in self._dict.items() if k != key}
        return FrozenDict(remaining, __unsafe_skip_copy__=True), value

    def unfreeze(self) -> dict[K, V]:
        """Returns a mutable, nested ``dict`` copy (arrays are shared, not copied).

        >>> FrozenDict({'a': {'b': 1}}).unfreeze()
        {'a': {'b': 1}}
        """
        return unfreeze(self)

    def _keys_in_order(self) -> tuple:
        keys = self._sorted_keys
        if keys is None:
            try:
                keys = tuple(sorted(self._dict))
            except TypeError as e:
                raise TypeError(
                    f"FrozenDict keys must be mutually comparable to be flattened as a pytree "
                    f"(JAX sorts dict keys), got keys {list(self._dict)!r}. Use keys of one type, "
                    "e.g. all strings."
                ) from e
            object.__setattr__(self, "_sorted_keys", keys)
        return keys

    def tree_flatten_with_keys(self) -> tuple[tuple[Any, ...], tuple]:
        """Flattens into ``((DictKey(k), value), ...)`` with keys sorted, plus the keys."""
        keys = self._keys_in_order()
        d = self._dict
        return tuple((jax.tree_util.DictKey(k), d[k]) for k in keys), keys

    def _tree_flatten(self) -> tuple[tuple[Any, ...], tuple]:
        keys = self._keys_in_order()
        d = self._dict
        return tuple(d[k] for k in keys), keys

    @classmethod
    def tree_unflatten(cls, keys: tuple, values: Any) -> FrozenDict:
        return cls(zip(keys, values), __unsafe_skip_copy__=True)


def _prepare_freeze(xs: Any) -> Any:
    """Deep-copies nested dicts, unwrapping FrozenDicts into their plain storage."""
    if isinstance(xs, FrozenDict):
        return xs._dict
    if not isinstance(xs, dict):
        return xs
    return {key: _prepare_freeze(value) for key, value in xs.items()}


def freeze(xs: Mapping[Any, Any]) -> FrozenDict[Any, Any]:
    """Makes a nested dict immutable by transforming it into a ``FrozenDict``.

    >>> freeze({'a': {'b': 1}})['a']
    FrozenDict({
        b: 1,
    })
    """
    if not isinstance(xs, Mapping) and not hasattr(xs, "keys"):
        try:
            return FrozenDict(xs)
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"freeze() expects a dict (or a Mapping / iterable of pairs), got "
                f"{type(xs).__name__}: {xs!r}. Pass the nested dict to freeze."
            ) from e
    return FrozenDict(xs)


def _unfreeze_dict(x: dict) -> dict:
    return {k: _unfreeze_dict(v) if isinstance(v, dict) else _unfreeze_leaf(v)
            for k, v in x.items()}


def _unfreeze_leaf(v: Any) -> Any:
    if isinstance(v, FrozenDict):
        return _sorted_copy(v._dict)
    return v


def _sorted_copy(x: dict) -> dict:
    # Flax's FrozenDict -> dict conversion goes through a JAX tree map, which
    # rebuilds dicts in sorted key order; keep that order for compatibility.
    try:
        keys = sorted(x)
    except TypeError:
        keys = list(x)
    out = {}
    for k in keys:
        v = x[k]
        if isinstance(v, dict):
            v = _sorted_copy(v)
        elif isinstance(v, FrozenDict):
            v = _sorted_copy(v._dict)
        out[k] = v
    return out


def unfreeze(x: FrozenDict | dict[str, Any]) -> dict[Any, Any]:
    """Returns a mutable nested ``dict`` copy of a FrozenDict or dict; other values pass through.

    >>> unfreeze(FrozenDict({'a': {'b': 1}}))
    {'a': {'b': 1}}
    >>> unfreeze(3)
    3
    """
    if isinstance(x, FrozenDict):
        return _sorted_copy(x._dict)
    if isinstance(x, dict):
        return _unfreeze_dict(x)
    return x


def copy(
    x: FrozenDict | dict[str, Any],
    add_or_replace: FrozenDict[str, Any] | dict[str, Any] = FrozenDict({}),
) -> FrozenDict | dict[str, Any]:
    """Like ``FrozenDict.copy`` for a FrozenDict or a plain dict; the result has the input's type.

    >>> copy({'a': 1}, {'b': 2})
    {'a': 1, 'b': 2}
    """
    if isinstance(x, FrozenDict):
        return x.copy(add_or_replace)
    if isinstance(x, dict):
        new_dict = _sorted_copy(x)
        new_dict.update(add_or_replace)
        return new_dict
    raise TypeError(
        f"copy() expects a FrozenDict or a dict, got {type(x).__name__}. "
        "Convert the value to a dict first."
    )


def pop(x: FrozenDict | dict[str, Any], key: str) -> tuple[FrozenDict | dict[str, Any], Any]:
    """Returns ``(x_without_key, x[key])`` for a FrozenDict or a plain dict, leaving ``x`` intact.

    >>> pop({'params': 1, 'stats': 2}, 'params')
    ({'stats': 2}, 1)
    """
    if isinstance(x, FrozenDict):
        return x.pop(key)
    if isinstance(x, dict):
        new_dict = _sorted_copy(x)
        value = new_dict.pop(key)
        return new_dict, value
    raise TypeError(
        f"pop() expects a FrozenDict or a dict, got {type(x).__name__}. "
        "Convert the value to a dict first."
    )


def pretty_repr(x: Any, num_spaces: int = 4) -> str:
    """Indented representation of a nested dict or FrozenDict; ``repr(x)`` for anything else.

    >>> print(pretty_repr({'a': {'b': 1}}, num_spaces=2))
    {
      a: {
        b: 1,
      },
    }
    """
    if isinstance(x, FrozenDict):
        return x.pretty_repr(num_spaces)
    if not isinstance(x, dict):
        return repr(x)
    if not x:
        return "{}"
    rows = []
    for key, value in x.items():
        if isinstance(value, (dict, FrozenDict)):
            inner = value._dict if isinstance(value, FrozenDict) else value
            value_repr = pretty_repr(inner, num_spaces)
        else:
            value_repr = repr(value)
        rows.append(_indent(f"{key}: {value_repr},", num_spaces))
    return "{\n" + "\n".join(rows) + "\n}"


def _frozen_dict_state_dict(xs: FrozenDict) -> dict[str, Any]:
    return {str(key): serialization.to_state_dict(value) for key, value in xs.items()}


def _restore_frozen_dict(xs: FrozenDict, states: dict[str, Any]) -> FrozenDict:
    restored = serialization.from_state_dict(xs.unfreeze(), states)
    return FrozenDict(restored, __unsafe_skip_copy__=True)


jax.tree_util.register_pytree_with_keys(
    FrozenDict,
    lambda d: d.tree_flatten_with_keys(),
    FrozenDict.tree_unflatten,
    flatten_func=lambda d: d._tree_flatten(),
)

serialization.register_serialization_state(
    FrozenDict, _frozen_dict_state_dict, _restore_frozen_dict)
