"""Utilities for walking nested dicts and immutable data: flatten/unflatten and Traversals.

* :func:`flatten_dict` / :func:`unflatten_dict` convert between nested dicts and
  flat dicts keyed by path tuples (or ``sep``-joined strings).
* :func:`path_aware_map` maps a function of ``(path, value)`` over a nested dict.
* The ``Traversal`` family selects parts of an immutable structure, to read them
  (``iterate``) or to build an updated copy (``update``, ``set``). Inputs are
  never mutated.

>>> from flaxen import traverse_util
>>> flat = traverse_util.flatten_dict({'a': {'b': 1}, 'c': 2}, sep='/')
>>> flat
{'a/b': 1, 'c': 2}
>>> traverse_util.unflatten_dict(flat, sep='/')
{'a': {'b': 1}, 'c': 2}
>>> import warnings
>>> with warnings.catch_warnings():  # building a Traversal warns: deprecated, as in Flax
...     warnings.simplefilter('ignore', DeprecationWarning)
...     t = traverse_util.t_identity.each()['w']
>>> t.update(lambda w: w * 10, [{'w': 1}, {'w': 2}])
[{'w': 10}, {'w': 20}]
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax

import flaxen as flax  # noqa: F401 - importable from here in Flax (the package is lazy)
from flaxen import serialization, struct  # noqa: F401 - flax.traverse_util.struct is public
from flaxen.typing import PathParts, VariableDict  # noqa: F401 - importable from here in Flax

__all__ = [
    "ModelParamTraversal",
    "Traversal",
    "TraverseAttr",
    "TraverseCompose",
    "TraverseEach",
    "TraverseFilter",
    "TraverseId",
    "TraverseItem",
    "TraverseMerge",
    "TraverseTree",
    "empty_node",
    "flatten_dict",
    "path_aware_map",
    "t_identity",
    "unflatten_dict",
]

Path = tuple[Any, ...]


class _EmptyNode:
    """Marks an empty dict in a flattened dict (see ``keep_empty_nodes``); a singleton."""

    _instance: _EmptyNode | None = None

    def __new__(cls) -> _EmptyNode:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "_EmptyNode()"

    def __reduce__(self):
        return (_EmptyNode, ())


empty_node = _EmptyNode()

jax.tree_util.register_pytree_node(
    _EmptyNode, lambda _: ((), None), lambda _aux, _children: empty_node)
serialization.register_serialization_state(
    _EmptyNode, lambda _: {}, lambda _target, _state: empty_node)


class _NotADictError(TypeError, AssertionError):
    # A TypeError by meaning; also an AssertionError because Flax reports this
    # mistake with an `assert`, and code written for Flax may catch that.
    pass


_frozen_dict_cls: Any = None


def _frozen_dict_type() -> Any:
    # Imported on first use: flaxen.core's package init pulls in modules that
    # themselves use traverse_util, so a top-level import would be circular.
    global _frozen_dict_cls
    if _frozen_dict_cls is None:
        from flaxen.core.frozen_dict import FrozenDict

        _frozen_dict_cls = FrozenDict
    return _frozen_dict_cls


def flatten_dict(
    xs: Mapping[Any, Any],
    keep_empty_nodes: bool = False,
    is_leaf: Callable[[Path, Any], bool] | None = None,
    sep: str | None = None,
) -> dict[Any, Any]:
    """Flattens a nested dict (or FrozenDict) into a dict keyed by path tuples.

    Args:
      xs: the nested dict.
      keep_empty_nodes: keep empty sub-dicts as ``empty_node`` values, so that
        :func:`unflatten_dict` restores them; by default they are dropped.
      is_leaf: ``is_leaf(path, sub_dict) -> bool``; when true the sub-dict is
        kept whole as a value instead of being descended into.
      sep: if given, keys are ``sep.join(path)`` strings instead of tuples.

    >>> flatten_dict({'foo': 1, 'bar': {'a': 2, 'b': {}}})
    {('foo',): 1, ('bar', 'a'): 2}
    >>> flatten_dict({'bar': {'b': {}}}, keep_empty_nodes=True)
    {('bar', 'b'): _EmptyNode()}
    """
    frozen = _frozen_dict_type()
    if isinstance(xs, frozen):
        xs = xs._dict  # type: ignore[attr-defined]
    elif not isinstance(xs, dict):
        raise _NotADictError(
            f"flatten_dict expects a dict or FrozenDict, got {type(xs).__name__}: {xs!r:.80}. "
            "Wrap the value in a dict, e.g. {'params': value}."
        )
    out: dict[Any, Any] = {}

    if is_leaf is None:
        # Hot path: no per-node callback; plain dicts are by far the common case,
        # so they are tested first and leaves pay one extra isinstance at most.
        def walk(d: Mapping[Any, Any], prefix: Path) -> None:
            for k, v in d.items():
                path = prefix + (k,)
                t = type(v)
                if t is dict or t is frozen:
                    if t is frozen:
                        v = v._dict
                    if v:
                        walk(v, path)
                    elif keep_empty_nodes:
                        out[path] = empty_node
                elif isinstance(v, dict):
                    if v:
                        walk(v, path)
                    elif keep_empty_nodes:
                        out[path] = empty_node
                else:
                    out[path] = v

        walk(xs, ())  # an empty root gives {}: it has no path to mark
    else:
        def walk_checked(d: Any, path: Path) -> None:
            if isinstance(d, frozen):
                d = d._dict
            if not isinstance(d, dict) or is_leaf(path, d):
                out[path] = d
                return
            if not d:
                if keep_empty_nodes and path:
                    out[path] = empty_node
                return
            for k, v in d.items():
                sub = path + (k,)
                if isinstance(v, (dict, frozen)):
                    walk_checked(v, sub)
                else:
                    out[sub] = v

        walk_checked(xs, ())

    if sep is not None:
        try:
            return {sep.join(path): v for path, v in out.items()}
        except TypeError as e:
            bad = next(p for p in out if not all(isinstance(k, str) for k in p))
            raise TypeError(
                f"flatten_dict(sep={sep!r}) needs str keys to join, but path {bad!r} has a "
                f"non-str key ({e}). Use sep=None to get tuple keys."
            ) from e
    return out


def unflatten_dict(xs: Mapping[Any, Any], sep: str | None = None) -> dict[Any, Any]:
    """Turns a flat dict keyed by path tuples (or ``sep``-joined strings) back into a nested dict.

    ``empty_node`` values become empty dicts. A key that is both a leaf and the
    parent of other keys raises ``ValueError``; leaf values are never modified.

    >>> unflatten_dict({('foo',): 1, ('bar', 'a'): 2})
    {'foo': 1, 'bar': {'a': 2}}
    >>> unflatten_dict({'a.b': 1}, sep='.')
    {'a': {'b': 1}}
    """
    if not isinstance(xs, Mapping):
        raise _NotADictError(
            f"unflatten_dict expects a dict of path -> value, got {type(xs).__name__}. "
            "Pass the output of flatten_dict."
        )
    result: dict[Any, Any] = {}
    nodes: list[dict] = []
    keep: list[dict] = []
    try:
        _fill(xs, sep, result, nodes, keep)
    except (TypeError, IndexError, AttributeError) as e:
        paths = xs if sep is None else _split_keys(xs, sep)
        _check_paths(paths, e)
        raise
    # Each leaf and each built sub-dict fills one slot of its parent. Fewer filled
    # slots means some key overwrote another entry (a sub-dict or a leaf).
    if len(result) + sum(map(len, nodes)) != len(xs) + len(nodes):
        _check_paths(xs if sep is None else _split_keys(xs, sep), None)
        raise _PathConflictError(
            f"unflatten_dict: two keys name the same entry. {_CONFLICT_FIX}")
    return result


class _PathConflictError(ValueError, TypeError):
    # A ValueError by meaning; also a TypeError, which is what Flax raises when a leaf is
    # then used as a sub-dict (it tries to assign into the leaf)
    pass


class _SepKeyError(TypeError, AttributeError):
    # A TypeError by meaning; also an AttributeError, which is what Flax raises
    # (calling `.split` on a key that is not a str).
    pass


def _split_keys(xs: Mapping[Any, Any], sep: str) -> dict[Any, Any]:
    try:
        return {tuple(k.split(sep)): v for k, v in xs.items()}
    except AttributeError:
        bad = next(k for k in xs if not isinstance(k, str))
        raise _SepKeyError(
            f"unflatten_dict(sep={sep!r}) needs str keys to split, got {bad!r}. Use sep=None "
            "for tuple keys."
        ) from None


_MISSING = object()
_CONFLICT_FIX = "A key cannot be both a leaf and a sub-dict; remove one of the two entries."


def _fill(xs: Mapping[Any, Any], sep: str | None, result: dict, nodes: list[dict],
          keep: list[dict]) -> None:
    """Writes each ``path: value`` of ``xs`` into ``result``, building sub-dicts into ``nodes``.

    Keys come in flatten_dict's order, so consecutive keys mostly share their parent
    path: the walk down from the root happens only when it changes. A dict met on the
    way down must be one built here, never a dict-valued leaf (which is not written
    into): the ids of those leaves are recorded as they pass, ``keep`` holding the
    empty dicts made for ``empty_node`` alive. A leaf that comes after a key below it
    overwrites a built sub-dict, which the caller's slot count catches.
    """
    empty = empty_node
    add = nodes.append
    dict_leaves: set[int] = set()
    prev: Any = _MISSING
    parent = result
    for path, value in xs.items():
        if sep is not None:
            path = path.split(sep)
        if type(value) is dict:
            dict_leaves.add(id(value))
        elif value is empty:
            value = {}
            keep.append(value)
            dict_leaves.add(id(value))
        prefix = path[:-1]
        if prefix != prev:
            parent = result
            for key in prefix:
                if key in parent:
                    parent = parent[key]
                    if type(parent) is not dict or (dict_leaves and id(parent) in dict_leaves):
                        raise TypeError("a leaf is used as a sub-dict")
                else:
                    node = parent[key] = {}
                    add(node)
                    parent = node
            prev = prefix
        parent[path[-1]] = value


def _check_paths(xs: Mapping[Any, Any], error: BaseException | None) -> None:
    """Raises the error the keys of ``xs`` deserve (empty path, leaf/sub-dict conflict), if any."""
    try:
        keys = {tuple(path) for path in xs}
    except TypeError:
        return  # keys that are not sequences of hashables: the original error says it best
    if () in keys:
        raise ValueError(
            "unflatten_dict got an empty path () as a key; every key needs at least one "
            "part, e.g. ('params',)."
        ) from None
    for path in xs:
        for i in range(1, len(path)):
            if tuple(path[:i]) in keys:
                raise _PathConflictError(
                    f"unflatten_dict: key {tuple(path[:i])!r} holds a leaf, but key {path!r} uses "
                    f"it as a sub-dict. {_CONFLICT_FIX}"
                ) from error


def path_aware_map(
    f: Callable[[Path, Any], Any], nested_dict: Mapping[str, Any]
) -> dict[str, Any]:
    """Maps ``f(path, value)`` over the leaves of a nested dict, keeping empty sub-dicts.

    >>> params = {'a': {'x': 10, 'y': 3}, 'b': {'x': 20}}
    >>> path_aware_map(lambda path, x: x + 5 if 'x' in path else -x, params)
    {'a': {'x': 15, 'y': -3}, 'b': {'x': 25}}
    """
    flat = flatten_dict(nested_dict, keep_empty_nodes=True)
    return unflatten_dict(
        {k: v if v is empty_node else f(k, v) for k, v in flat.items()}
    )


# ----------------------------------------------------------------------------- Traversals


class Traversal(abc.ABC):
    """Base class of traversals: a way to select values inside an immutable structure.

    Chain with ``[key]`` (:class:`TraverseItem`), ``.attr`` (:class:`TraverseAttr`),
    :meth:`each`, :meth:`filter`, :meth:`tree`, :meth:`merge` and :meth:`compose`.

    Deprecated: every construction warns (``DeprecationWarning``, as in Flax, whose
    ``flax.optim`` they served); use Optax's masking (``optax.masked``,
    ``optax.multi_transform``) instead.

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter('ignore', DeprecationWarning)
    ...     print(list(t_identity['a'].each().iterate({'a': [1, 2]})))
    [1, 2]
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Traversal:
        # __new__, not __init__: subclasses define their own __init__ without calling up.
        warnings.warn(
            "`flax.traverse_util.Traversal` will be deprecated: Traversals served the "
            "removed flax.optim. Select parameters for an optimizer with Optax instead "
            "(optax.masked or optax.multi_transform, labels from "
            "flax.traverse_util.path_aware_map).",
            DeprecationWarning,
        )
        return super().__new__(cls)

    @abc.abstractmethod
    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        """Returns a copy of ``inputs`` with ``fn`` applied to every selected value."""

    @abc.abstractmethod
    def iterate(self, inputs: Any) -> Iterator[Any]:
        """Yields the selected values of ``inputs``."""

    def set(self, values: list[Any], inputs: Any) -> Any:
        """Returns a copy of ``inputs`` with the selected values replaced, in traversal order.

        ``ValueError`` if ``values`` has fewer or more items than there are selections.

        >>> import warnings
        >>> with warnings.catch_warnings():  # building a Traversal warns
        ...     warnings.simplefilter('ignore', DeprecationWarning)
        ...     each = t_identity.each()
        >>> each.set([5, 6], [1, 2])
        [5, 6]
        """
        it = iter(values)
        missing = object()

        def next_value(_: Any) -> Any:
            value = next(it, missing)
            if value is missing:
                raise ValueError("Not enough values provided: the traversal selects more values.")
            return value

        result = self.update(next_value, inputs)
        if next(it, missing) is not missing:
            raise ValueError("Too many values provided: the traversal selects fewer values.")
        return result

    def compose(self, other: Traversal) -> Traversal:
        """Returns the traversal applying ``other`` to each value this one selects."""
        return TraverseCompose(self, other)

    def merge(self, *traversals: Traversal) -> Traversal:
        """Selects the union of what ``traversals`` select, relative to this traversal."""
        return self.compose(TraverseMerge(*traversals))

    def each(self) -> Traversal:
        """Selects each item of the selected containers."""
        return self.compose(TraverseEach())

    def filter(self, fn: Callable[[Any], bool]) -> Traversal:
        """Keeps only the selected values for which ``fn(value)`` is true."""
        return self.compose(TraverseFilter(fn))

    def tree(self) -> Traversal:
        """Selects every pytree leaf of the selected values."""
        return self.compose(TraverseTree())

    def __getattr__(self, attr: str) -> Traversal:
        if attr.startswith("__") and attr.endswith("__"):
            # Dunder lookups (copy, pickle, IPython probes) must not turn into traversals.
            raise AttributeError(attr)
        return self.compose(TraverseAttr(attr))

    def __getitem__(self, key: Any) -> Traversal:
        return self.compose(TraverseItem(key))


class TraverseId(Traversal):
    """The identity traversal: selects its input itself."""

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        return fn(inputs)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        yield inputs


with warnings.catch_warnings():  # the module's own instance is not the user's doing
    warnings.simplefilter("ignore", DeprecationWarning)
    t_identity = TraverseId()


class TraverseMerge(Traversal):
    """Selects what each of several traversals selects (updates apply one after another)."""

    def __init__(self, *traversals: Traversal):
        self._traversals = traversals

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        for t in self._traversals:
            inputs = t.update(fn, inputs)
        return inputs

    def iterate(self, inputs: Any) -> Iterator[Any]:
        for t in self._traversals:
            yield from t.iterate(inputs)


class TraverseCompose(Traversal):
    """Applies traversal ``y`` to every value traversal ``x`` selects."""

    def __init__(self, x: Traversal, y: Traversal):
        self._x = x
        self._y = y

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        y = self._y
        return self._x.update(lambda v: y.update(fn, v), inputs)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        for v in self._x.iterate(inputs):
            yield from self._y.iterate(v)


class TraverseFilter(Traversal):
    """Keeps only values for which ``fn(value)`` is true."""

    def __init__(self, fn: Callable[[Any], bool]):
        self._fn = fn

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        return fn(inputs) if self._fn(inputs) else inputs

    def iterate(self, inputs: Any) -> Iterator[Any]:
        if self._fn(inputs):
            yield inputs


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


class TraverseAttr(Traversal):
    """Selects attribute ``attr``; updates build a copy.

    The copy is made with ``dataclasses.replace``, ``_replace`` (named tuples) or ``copy``.
    """

    def __init__(self, attr: str):
        self._attr = attr

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        value = fn(getattr(inputs, self._attr))
        if _is_namedtuple(inputs):
            return inputs._replace(**{self._attr: value})
        if dataclasses.is_dataclass(inputs) and not isinstance(inputs, type):
            return dataclasses.replace(inputs, **{self._attr: value})
        out = copy.copy(inputs)
        setattr(out, self._attr, value)
        return out

    def iterate(self, inputs: Any) -> Iterator[Any]:
        yield getattr(inputs, self._attr)


class TraverseItem(Traversal):
    """Selects ``inputs[key]``; a slice key selects each item of the slice."""

    def __init__(self, key: Any):
        self._key = key

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        key = self._key
        if isinstance(inputs, tuple):
            items = list(inputs)
            self._update_items(fn, items)
            return type(inputs)(*items) if _is_namedtuple(inputs) else tuple(items)
        if isinstance(inputs, _frozen_dict_type()):
            return inputs.copy({key: fn(inputs[key])})
        out = copy.copy(inputs)
        self._update_items(fn, out)
        return out

    def _update_items(self, fn: Callable[[Any], Any], items: Any) -> None:
        # A slice selects several items: fn applies to each of them, not to the sub-list.
        if isinstance(self._key, slice):
            for i in range(len(items))[self._key]:
                items[i] = fn(items[i])
        else:
            items[self._key] = fn(items[self._key])

    def iterate(self, inputs: Any) -> Iterator[Any]:
        if isinstance(self._key, slice):
            yield from inputs[self._key]
        else:
            yield inputs[self._key]


class TraverseEach(Traversal):
    """Selects each item of a container (the values of a dict)."""

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        if isinstance(inputs, _frozen_dict_type()):
            return type(inputs)({k: fn(v) for k, v in inputs.items()})
        if isinstance(inputs, dict):
            return {k: fn(v) for k, v in inputs.items()}
        if _is_namedtuple(inputs):
            return type(inputs)(*(fn(v) for v in inputs))
        if isinstance(inputs, tuple):
            return tuple(fn(v) for v in inputs)
        return [fn(v) for v in inputs]

    def iterate(self, inputs: Any) -> Iterator[Any]:
        if isinstance(inputs, Mapping):
            yield from inputs.values()
        else:
            yield from inputs


class TraverseTree(Traversal):
    """Selects every leaf of a pytree (``jax.tree_util`` order)."""

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        return jax.tree_util.tree_map(fn, inputs)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        yield from jax.tree_util.tree_leaves(inputs)


def _sorted_nested(xs: Any, frozen: Any) -> dict:
    if isinstance(xs, frozen):
        xs = xs._dict
    out = {}
    for k in sorted(xs):
        v = xs[k]
        out[k] = _sorted_nested(v, frozen) if isinstance(v, (dict, frozen)) else v
    return out


class ModelParamTraversal(Traversal):
    """Selects parameters of a nested params dict by name.

    ``filter_fn(name, value) -> bool`` receives each leaf's path joined with ``/``
    and a leading slash, e.g. ``'/Dense_0/kernel'``. Leaves are visited in sorted
    key order; ``update`` returns a dict (a FrozenDict for a FrozenDict input).

    >>> import warnings
    >>> with warnings.catch_warnings():  # building a Traversal warns
    ...     warnings.simplefilter('ignore', DeprecationWarning)
    ...     kernels = ModelParamTraversal(lambda name, _: name.endswith('kernel'))
    >>> kernels.update(lambda k: 0, {'Dense_0': {'bias': 1, 'kernel': 2}})
    {'Dense_0': {'bias': 1, 'kernel': 0}}
    """

    def __init__(self, filter_fn: Callable[[str, Any], bool]):
        self._filter_fn = filter_fn

    def _params(self, inputs: Any) -> dict:
        frozen = _frozen_dict_type()
        if not isinstance(inputs, (dict, frozen)):
            raise ValueError(
                f"ModelParamTraversal can only traverse a nested dict or FrozenDict of params, "
                f"got {type(inputs).__name__}. Pass e.g. variables['params']."
            )
        return _sorted_nested(inputs, frozen)

    def iterate(self, inputs: Any) -> Iterator[Any]:
        flat = flatten_dict(self._params(inputs), keep_empty_nodes=True)
        for path, value in flat.items():
            if value is empty_node:
                continue
            if self._filter_fn("/" + "/".join(map(str, path)), value):
                yield value

    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        flat = flatten_dict(self._params(inputs), keep_empty_nodes=True)
        new_flat = {}
        for path, value in flat.items():
            if value is not empty_node and self._filter_fn("/" + "/".join(map(str, path)), value):
                value = fn(value)
            new_flat[path] = value
        new_params = unflatten_dict(new_flat)
        frozen = _frozen_dict_type()
        if isinstance(inputs, frozen):
            return frozen(new_params)
        return new_params
