"""``nnx.traversals``: flatten nested mappings to ``{path: leaf}`` and back.

Any :class:`~collections.abc.Mapping` is a node (dicts, FrozenDicts, States); everything
else is a leaf. Empty sub-mappings are dropped unless ``keep_empty_nodes=True``, which
keeps them as :data:`empty_node` so that :func:`unflatten_mapping` restores them.

>>> from flaxen.nnx import traversals
>>> flat = traversals.flatten_mapping({'a': 1, 'b': {'c': 2, 'd': {}}})
>>> flat
{('a',): 1, ('b', 'c'): 2}
>>> traversals.unflatten_mapping(flat)
{'a': 1, 'b': {'c': 2}}
>>> traversals.flatten_mapping({'a': {'b': 1}}, sep='/')
{'a/b': 1}
"""

from __future__ import annotations

import typing as tp
from collections.abc import Callable, Mapping

from flaxen.traverse_util import empty_node

__all__ = ["empty_node", "flatten_mapping", "flatten_to_sequence", "unflatten_mapping"]

Path = tuple[tp.Any, ...]
IsLeaf = tp.Callable[[Path, tp.Any], bool]
# Flax's name for the ``is_leaf`` callback type: (path, mapping) -> stop here?
IsLeafCallable = Callable[[tuple[tp.Any, ...], Mapping[tp.Any, tp.Any]], bool]


def _walk(xs: Mapping, prefix: Path, keep_empty_nodes: bool, is_leaf: IsLeaf | None,
          out: list[tuple[Path, tp.Any]]) -> None:
    for key, value in xs.items():
        path = (*prefix, key)
        if isinstance(value, Mapping) and not (is_leaf is not None and is_leaf(path, value)):
            if len(value) == 0:
                if keep_empty_nodes:
                    out.append((path, empty_node))
                continue
            _walk(value, path, keep_empty_nodes, is_leaf, out)
        else:
            out.append((path, value))


def flatten_to_sequence(xs: Mapping[tp.Any, tp.Any], /, *, keep_empty_nodes: bool = False,
                        is_leaf: IsLeaf | None = None) -> list[tuple[Path, tp.Any]]:
    """``[(path tuple, leaf), ...]`` in the mapping's iteration order.

    >>> from flaxen.nnx import traversals
    >>> traversals.flatten_to_sequence({'a': {'b': 1}, 'c': 2})
    [(('a', 'b'), 1), (('c',), 2)]
    """
    if not isinstance(xs, Mapping):
        raise TypeError(f"flatten_to_sequence expects a Mapping, got {type(xs).__name__}.")
    out: list[tuple[Path, tp.Any]] = []
    _walk(xs, (), keep_empty_nodes, is_leaf, out)
    return out


def flatten_mapping(xs: Mapping[tp.Any, tp.Any], /, *, keep_empty_nodes: bool = False,
                    is_leaf: IsLeaf | None = None, sep: str | None = None
                    ) -> dict[tp.Any, tp.Any]:
    """``{path: leaf}``; a path is a tuple of keys, or the keys joined by ``sep``.

    ``is_leaf(path, node)`` may stop the descent at a sub-mapping.
    """
    if not isinstance(xs, Mapping):
        raise TypeError(f"flatten_mapping expects a Mapping, got {type(xs).__name__}.")
    items = flatten_to_sequence(xs, keep_empty_nodes=keep_empty_nodes, is_leaf=is_leaf)
    if sep is None:
        return dict(items)
    return {sep.join(map(str, path)): value for path, value in items}


def unflatten_mapping(xs: tp.Any, /, *, sep: str | None = None) -> dict[tp.Any, tp.Any]:
    """The nested dict for ``{path: leaf}`` (or ``(path, leaf)`` pairs); paths are tuples,
    or strings split on ``sep``. :data:`empty_node` leaves become empty dicts."""
    items = xs.items() if isinstance(xs, Mapping) else xs
    root: dict[tp.Any, tp.Any] = {}
    for path, value in items:
        if sep is not None:
            if not isinstance(path, str):
                raise TypeError(
                    f"unflatten_mapping(sep={sep!r}) needs string paths, got {path!r}.")
            path = tuple(path.split(sep))
        node = root
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = {} if value is empty_node else value
    return root
