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
>>> t = traverse_util.t_identity.each()['w']
>>> t.update(lambda w: w * 10, [{'w': 1}, {'w': 2}])
[{'w': 10}, {'w': 20}]
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax

from flaxen import serialization

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

jax.tree_util.register_pytree_node(_EmptyNode, lambda _: ((), None), lambda _aux, _children: empty_node)
serialization.register_serialization_state(_EmptyNode, lambda _: {}, lambda _target, _state: empty_node)


class _NotADictError(TypeError, AssertionError):
    # A TypeError by meaning; also an AssertionError because Flax reports this
    # mistake with an `assert`, and code written for Flax may catch that.
    pass


_frozen_dict_cls: type | None = None


def _frozen_dict_type() -> type:
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
        def walk(d: dict, prefix: Path) -> None:
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
    if sep is not None and (type(sep) is not str or len(sep) != 1):
        # A longer separator can overlap itself ('//' in 'a///b'): only str.split
        # tells where the parts are.
        xs = _split_keys(xs, sep)
        sep = None
    built = _Built(xs)
    try:
        if sep is None:
            result = _unflatten_paths(iter(xs.items()), built)
        else:
            result = _unflatten_joined(xs, sep, built)
    except (TypeError, IndexError, AttributeError) as e:
        _check_paths(xs if sep is None else _split_keys(xs, sep), e)
        raise
    # Each leaf and each built sub-dict fills one slot of its parent. Fewer filled
    # slots means some key overwrote another entry (a sub-dict or a leaf).
    nodes = built.nodes
    if len(result) + sum(map(len, nodes)) != len(xs) + len(nodes):
        _check_paths(xs if sep is None else _split_keys(xs, sep), None)
        raise ValueError(f"unflatten_dict: two keys name the same entry. {_CONFLICT_FIX}")
    return result


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


class _Built:
    """What one unflatten_dict call built (its sub-dicts), and how to tell leaves from them.

    A key whose parent path exists already meets a dict on the way down: a
    sub-dict built here, or a dict-valued leaf that must not be written into.
    flatten_dict's output meets existing dicts only where keys of different
    lengths share a parent, so the ids of the dict-valued leaves are collected
    lazily, once, by the first such meeting.
    """

    __slots__ = ("nodes", "made", "_xs", "_leaf_ids")

    def __init__(self, xs: Mapping[Any, Any]) -> None:
        self.nodes: list[dict] = []  # sub-dicts built here
        self.made: list[dict] = []  # the empty dicts that stand for empty_node leaves
        self._xs = xs
        self._leaf_ids: set[int] | None = None

    def leaf_ids(self) -> set[int]:
        """The ids of the dict-valued leaves; add the ids of later ``made`` dicts to it."""
        if self._leaf_ids is None:
            ids = {id(v) for v in self._xs.values() if type(v) is dict}
            ids.update(map(id, self.made))
            self._leaf_ids = ids
        return self._leaf_ids

    def made_leaf(self) -> dict:
        """A new empty dict standing for an ``empty_node`` leaf."""
        value: dict = {}
        self.made.append(value)
        if self._leaf_ids is not None:
            self._leaf_ids.add(id(value))
        return value

    def is_leaf(self, node: Any) -> bool:
        """True unless ``node`` (found on the way down) is a sub-dict built here."""
        return type(node) is not dict or id(node) in self.leaf_ids()


_MISSING = object()
_CONFLICT_FIX = "A key cannot be both a leaf and a sub-dict; remove one of the two entries."
# Generated loops by (key kind, key lengths met so far in the order met); see _path_loop.
_LOOPS: dict[tuple[str, tuple[int, ...]], Callable[..., Any]] = {}
_MAX_SPECIALISED = 8  # key lengths per loop; beyond that, a generic loop takes over


def _unflatten_paths(items: Iterator[tuple[Any, Any]], built: _Built) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    pending = next(items, None)
    lengths: tuple[int, ...] = ()
    while pending is not None:
        n = len(pending[0])
        if n == 0:
            raise IndexError("empty path")
        if n in lengths or len(lengths) == _MAX_SPECIALISED:
            # Many lengths, or a key that unpacks to another length than len() says.
            _generic_loop(itertools.chain((pending,), items), result, built)
            break
        lengths += (n,)
        loop = _LOOPS.get(("path", lengths)) or _path_loop("path", lengths)
        # A key of a length not seen yet ends the loop: it comes back to be
        # handled by a loop that also knows its length.
        pending = loop(
            itertools.chain((pending,), items), result, built.nodes, built.made_leaf,
            built.leaf_ids, _MISSING, empty_node,
        )
    return result


def _unflatten_joined(xs: Mapping[str, Any], sep: str, built: _Built) -> dict[Any, Any]:
    # "a/b/c" keys with a one-character separator. The parent is named by the
    # text before the last separator, so a key is split only when that text
    # changes (splitting every key costs more than all the rest).
    result: dict[Any, Any] = {}
    items = iter(xs.items())
    pending = next(items, None)
    depths: tuple[int, ...] = ()
    while pending is not None:
        n = max(1, pending[0].count(sep))  # parts of the parent path (keys without `sep`: any loop)
        if n in depths or len(depths) == _MAX_SPECIALISED:
            _generic_joined(itertools.chain((pending,), items), result, built, sep)
            break
        depths += (n,)
        loop = _LOOPS.get(("joined", depths)) or _path_loop("joined", depths)
        pending = loop(
            itertools.chain((pending,), items), result, built.nodes, built.made_leaf,
            built.leaf_ids, _MISSING, empty_node, sep,
        )
    return result


def _walk_lines(d: int, dmax: int, pad: str, differ: str) -> list[str]:
    # Code that brings the sub-dicts n0..n{d-1} in line with the parts a0..a{d-1}.
    k = [f"k{i}" for i in range(dmax)]
    nodes = [f"n{i}" for i in range(dmax)]
    lines = [pad + "if " + " or ".join(f"a{i}{differ}{k[i]}" for i in reversed(range(d))) + ":"]
    for i in range(d):
        up = "result" if i == 0 else nodes[i - 1]
        p = pad + "    "
        lines += [
            f"{p}if a{i}{differ}{k[i]}:",
            f"{p}    if a{i} not in {up}:",
            f"{p}        {nodes[i]} = {up}[a{i}] = {{}}",
        ]
        lines += [f"{p}        {nodes[m]} = {nodes[m - 1]}[a{m}] = {{}}" for m in range(i + 1, d)]
        lines.append(f"{p}        nodes += ({''.join(f'{nodes[m]}, ' for m in range(i, d))})")
        lines += [f"{p}        {k[m]} = a{m}" for m in range(i, d)]
        if d < dmax:  # what longer keys cached below is stale now
            lines.append(f"{p}        {k[d]} = missing")
        lines += [
            f"{p}    else:",
            f"{p}        {nodes[i]} = {up}[a{i}]",
            f"{p}        if type({nodes[i]}) is not dict:",
            f"{p}            raise TypeError('a leaf is used as a sub-dict')",
            f"{p}        if leaf_ids is None:",
            f"{p}            leaf_ids = leaf_id_set()",
            f"{p}        if id({nodes[i]}) in leaf_ids:",
            f"{p}            raise TypeError('a leaf is used as a sub-dict')",
            f"{p}        {k[i]} = a{i}",
        ]
        if i + 1 < dmax:
            lines.append(f"{p}        {k[i + 1]} = missing")
    return lines


def _path_loop(kind: str, lengths: tuple[int, ...]) -> Callable[..., Any]:
    """Builds (and caches) an unflatten loop for keys of the given lengths.

    ``kind == "path"``: tuple keys of ``lengths`` parts. Per leaf, the loop
    unpacks the key into named parts and compares each with the previous key's
    by identity; only the levels that changed are looked up again, and below a
    new sub-dict everything is new. That is much cheaper than slicing off the
    parent path (a new tuple per leaf) and comparing tuples; parts that are
    equal but not identical just cost a lookup. For ``lengths == (3,)``::

        def loop(items, result, nodes, made_leaf, leaf_id_set, missing, empty):
            leaf_ids = None              # ids of dict-valued leaves, collected on first need
            k0 = k1 = missing            # parts of the previous key
            n0 = n1 = result             # the sub-dicts they lead to
            for path, value in items:
                if value is empty:
                    value = made_leaf()
                try:
                    a0, a1, last, = path
                except ValueError:         # a key of another length: the caller
                    return path, value     # goes on with a loop for both lengths
                if a1 is not k1 or a0 is not k0:
                    if a0 is not k0:
                        if a0 not in result:       # new: so is everything below
                            n0 = result[a0] = {}
                            n1 = n0[a1] = {}
                            nodes += (n0, n1,)
                            k0 = a0
                            k1 = a1
                        else:                      # built here, or a leaf in the way?
                            n0 = result[a0]
                            if type(n0) is not dict:
                                raise TypeError(...)
                            if leaf_ids is None:
                                leaf_ids = leaf_id_set()
                            if id(n0) in leaf_ids:
                                raise TypeError(...)
                            k0 = a0
                            k1 = missing
                    if a1 is not k1:
                        ...  # the same one level down
                n1[last] = value
            return None

    With several lengths, ``n = len(path)`` picks a branch per length; all
    branches share the per-level state (a level re-resolved marks the one below
    stale). A leaf written over a sub-dict (or over another leaf) is caught by
    the caller's final count.

    ``kind == "joined"``: str keys, ``lengths`` being the numbers of parts of
    their parent paths. Per leaf: ``key.rpartition(sep)`` and one comparison of
    the parent text with the previous key's; only when it differs is it split
    and walked as above, comparing parts by value (split makes new strings).
    """
    dmax = max(lengths) - (kind == "path")
    args = "items, result, nodes, made_leaf, leaf_id_set, missing, empty"
    lines = [f"def loop({args}{', sep' if kind == 'joined' else ''}):", "    leaf_ids = None"]
    if dmax:
        lines.append("    " + " = ".join(f"k{i}" for i in range(dmax)) + " = missing")
        lines.append("    " + " = ".join(f"n{i}" for i in range(dmax)) + " = result")
    single = len(lengths) == 1
    if kind == "path":
        lines += [
            "    for path, value in items:",
            "        if value is empty:",
            "            value = made_leaf()",
        ]
        if not single:
            lines.append("        n = len(path)")
        for j, length in enumerate(lengths):
            pad = "        " if single else "            "
            if not single:
                lines.append(f"        {'if' if j == 0 else 'elif'} n == {length}:")
            d = length - 1
            unpack = "".join(f"a{i}, " for i in range(d)) + "last, = path"
            if single:
                # No length test: a key of another length fails to unpack (once).
                lines += [f"{pad}try:", f"{pad}    {unpack}", f"{pad}except ValueError:", f"{pad}    return path, value"]
            else:
                lines.append(pad + unpack)
            if d:
                lines += _walk_lines(d, dmax, pad, " is not ")
            lines.append(f"{pad}{f'n{d - 1}' if d else 'result'}[last] = value")
        if not single:
            lines += ["        else:", "            return path, value"]
    else:
        lines += [
            "    prev = missing",
            "    parent = result",
            "    for key, value in items:",
            "        if value is empty:",
            "            value = made_leaf()",
            "        head, found, last = key.rpartition(sep)",
            "        if head != prev:",
            "            if found:",
            "                parts = head.split(sep)",
            "                n = len(parts)",
        ]
        for j, d in enumerate(lengths):
            pad = "                    "
            lines.append(f"                {'if' if j == 0 else 'elif'} n == {d}:")
            lines.append(pad + "".join(f"a{i}, " for i in range(d)) + "= parts")
            lines += _walk_lines(d, dmax, pad, " != ")
            lines.append(f"{pad}parent = n{d - 1}")
        lines += [
            "                else:",
            "                    return key, value",
            # "" names both the root (key "x") and the path ("",) (key "/x"): never reuse it.
            "                prev = head or missing",
            "            else:",
            "                parent = result",
            "                prev = missing",
            "        parent[last] = value",
        ]
    lines.append("    return None")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # noqa: S102 - the source is built above from ints only
    loop = namespace["loop"]
    if len(_LOOPS) < 256:
        _LOOPS[kind, lengths] = loop
    return loop


def _generic_loop(items: Iterator[tuple[Any, Any]], result: dict, built: _Built) -> None:
    # Any key lengths; walks down from the root whenever the parent path changes.
    empty = empty_node
    add = built.nodes.append
    prev: Any = _MISSING
    parent = result
    for path, value in items:
        if value is empty:
            value = built.made_leaf()
        prefix = path[:-1]
        if prefix != prev:
            parent = result
            for key in prefix:
                if key not in parent:
                    node = parent[key] = {}
                    add(node)
                else:
                    node = parent[key]
                    if built.is_leaf(node):
                        raise TypeError("a leaf is used as a sub-dict")
                parent = node
            prev = prefix
        parent[path[-1]] = value


def _generic_joined(items: Iterator[tuple[str, Any]], result: dict, built: _Built, sep: str) -> None:
    # Like _generic_loop, for "a/b/c" keys.
    _generic_loop(((tuple(k.split(sep)), v) for k, v in items), result, built)


def _check_paths(xs: Mapping[Any, Any], error: BaseException | None) -> None:
    """Raises the error that the keys of ``xs`` deserve (empty path, leaf/sub-dict conflict), if any."""
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
                raise ValueError(
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

    >>> list(t_identity['a'].each().iterate({'a': [1, 2]}))
    [1, 2]
    """

    @abc.abstractmethod
    def update(self, fn: Callable[[Any], Any], inputs: Any) -> Any:
        """Returns a copy of ``inputs`` with ``fn`` applied to every selected value."""

    @abc.abstractmethod
    def iterate(self, inputs: Any) -> Iterator[Any]:
        """Yields the selected values of ``inputs``."""

    def set(self, values: list[Any], inputs: Any) -> Any:
        """Returns a copy of ``inputs`` with the selected values replaced, in traversal order.

        ``ValueError`` if ``values`` has fewer or more items than there are selections.

        >>> t_identity.each().set([5, 6], [1, 2])
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
    """Selects attribute ``attr``; updates build a copy (``dataclasses.replace``, ``_replace`` or ``copy``)."""

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
            items[key] = fn(items[key])
            return type(inputs)(*items) if _is_namedtuple(inputs) else tuple(items)
        if isinstance(inputs, _frozen_dict_type()):
            return inputs.copy({key: fn(inputs[key])})
        out = copy.copy(inputs)
        out[key] = fn(out[key])
        return out

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


def _sorted_nested(xs: Any, frozen: type) -> dict:
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

    >>> kernels = ModelParamTraversal(lambda name, _: name.endswith('kernel'))
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
