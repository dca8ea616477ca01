"""Prefix broadcasting and leaf extraction for ``nnx.extract`` (Flax 0.12.8's helpers).

A *prefix* of a pytree is a tree whose leaves each stand for a whole subtree (JAX's
``in_axes`` rule). :func:`broadcast_prefix` repeats each prefix leaf once per leaf of the
subtree it covers; :func:`broadcast_prefix2` also returns the prefix path of each, and
:func:`broadcast_prefix_map` maps a function over ``(path, prefix leaf, leaf, *rest)``.
:func:`extract` pulls the leaves a predicate picks out of a tree (leaving an
:class:`ExtractIndex` behind) and :func:`insert` puts them back. The tuple helpers
(:func:`mask_at`, :func:`slice_at`, :func:`replace_at`, :func:`find`) edit argument tuples
by position.

>>> from flaxen.nnx import extract
>>> extract.broadcast_prefix((0, 1), ([1, 2], {'a': 3}))
[0, 0, 1]
>>> tree, found = extract.extract(lambda path, p, x: p == 0, (0, 1), ([1, 2], 3))
>>> found, extract.insert(tree, found)
([1, 2], ([1, 2], 3))
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx.variablelib import Variable

__all__ = [
    "ExtractIndex", "Mask", "broadcast_prefix", "broadcast_prefix2", "broadcast_prefix_map",
    "extract", "find", "insert", "mask_at", "replace_at", "slice_at",
]

IsLeaf = tp.Callable[[tp.Any], bool]


def _not_a_prefix(prefix_tree: tp.Any, full_tree: tp.Any, err: Exception) -> NNXTransformError:
    return NNXTransformError(
        "", f"the prefix tree {prefix_tree!r} is not a prefix of the tree it is broadcast "
        f"against ({type(full_tree).__name__}): {err}",
        "Give one prefix entry per child where the trees branch (e.g. a tuple with one entry "
        "per argument), or a single value for the whole tree.")


def _num_leaves(tree: tp.Any, is_leaf: IsLeaf | None) -> int:
    structure: tp.Any = jax.tree_util.tree_structure(tree, is_leaf=is_leaf)
    return int(structure.num_leaves)


def broadcast_prefix(prefix_tree: tp.Any, full_tree: tp.Any,
                     prefix_is_leaf: IsLeaf | None = None,
                     tree_is_leaf: IsLeaf | None = None) -> list[tp.Any]:
    """One prefix leaf per leaf of ``full_tree`` (leaves as ``tree_is_leaf`` says), in
    ``full_tree``'s leaf order. Variables and graph nodes of ``prefix_tree`` are always
    prefix leaves; ``prefix_is_leaf`` adds more (e.g. ``lambda x: x is None``).

    Raises :class:`~flaxen.errors.NNXTransformError` when ``prefix_tree`` is not a prefix.

    >>> broadcast_prefix({'a': 1, 'b': None}, {'a': (1, 2), 'b': [3]},
    ...                  prefix_is_leaf=lambda x: x is None)
    [1, 1, None]
    """
    out: list[tp.Any] = []

    def stop(x: tp.Any) -> bool:
        return isinstance(x, (Variable, GraphNode)) or (
            prefix_is_leaf is not None and bool(prefix_is_leaf(x)))

    try:
        jax.tree_util.tree_map(
            lambda p, sub: out.extend([p] * _num_leaves(sub, tree_is_leaf)),
            prefix_tree, full_tree, is_leaf=stop)
    except ValueError as err:
        raise _not_a_prefix(prefix_tree, full_tree, err) from None
    return out


def broadcast_prefix2(prefix_tree: tp.Any, full_tree: tp.Any, is_leaf: IsLeaf | None = None,
                      prefix_leaf: IsLeaf | None = None
                      ) -> tuple[list[tuple[tp.Any, ...]], list[tp.Any]]:
    """``(prefix paths, prefix leaves)``: for each leaf of ``full_tree`` (as ``is_leaf``
    says), the key path of the prefix leaf that covers it and that leaf. ``prefix_leaf``
    marks extra prefix leaves (``is_leaf`` ones are leaves of both trees).

    >>> import jax
    >>> paths, leaves = broadcast_prefix2((0, 1), ([5, 6], 7))
    >>> [jax.tree_util.keystr(p) for p in paths], leaves
    (['[0]', '[0]', '[1]'], [0, 0, 1])
    """
    stop: IsLeaf | None
    if prefix_leaf is not None and is_leaf is not None:
        both: tuple[IsLeaf, IsLeaf] = (prefix_leaf, is_leaf)
        stop = lambda x: bool(both[0](x) or both[1](x))  # noqa: E731
    else:
        stop = prefix_leaf if prefix_leaf is not None else is_leaf
    paths: list[tuple[tp.Any, ...]] = []
    leaves: list[tp.Any] = []

    def add(path: tuple, p: tp.Any, sub: tp.Any) -> None:
        n = _num_leaves(sub, is_leaf)
        paths.extend([path] * n)
        leaves.extend([p] * n)

    try:
        jax.tree_util.tree_map_with_path(add, prefix_tree, full_tree, is_leaf=stop)
    except ValueError as err:
        raise _not_a_prefix(prefix_tree, full_tree, err) from None
    return paths, leaves


def broadcast_prefix_map(f: tp.Callable[..., tp.Any], prefix_tree: tp.Any, full_tree: tp.Any,
                         *rest: tp.Any, is_leaf: IsLeaf | None = None,
                         prefix_leaf: IsLeaf | None = None) -> tp.Any:
    """``full_tree`` with each leaf replaced by ``f(path, prefix leaf, leaf, *rest leaves)``;
    each of ``rest`` must have ``full_tree``'s structure (down to its leaves).

    >>> broadcast_prefix_map(lambda path, p, x, y: x * p + y, (10, 1), ([1, 2], 3), ([0, 0], 5))
    ([10, 20], 8)
    """
    _, prefix_leaves = broadcast_prefix2(prefix_tree, full_tree, is_leaf=is_leaf,
                                         prefix_leaf=prefix_leaf)
    treedef: tp.Any
    keyed, treedef = jax.tree_util.tree_flatten_with_path(full_tree, is_leaf=is_leaf)
    rest_leaves = [treedef.flatten_up_to(r) for r in rest]
    out = [f(path, p, leaf, *more) for (path, leaf), p, *more
           in zip(keyed, prefix_leaves, *rest_leaves)]
    return treedef.unflatten(out)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class ExtractIndex:
    """What :func:`extract` leaves where it took a leaf: its position in the extracted list
    (static for JAX: a tree holding it has no leaf there).

    >>> import jax
    >>> jax.tree.leaves((ExtractIndex(0), 1))
    [1]
    """

    index: int


def extract(f: tp.Callable[[tp.Any, tp.Any, tp.Any], bool], prefix: tp.Any, tree: tp.Any, *,
            is_leaf: IsLeaf | None = None, prefix_leaf: IsLeaf | None = None
            ) -> tuple[tp.Any, list[tp.Any]]:
    """``(tree with the picked leaves replaced by ExtractIndex, picked leaves)``: a leaf is
    picked when ``f(key path, its prefix leaf, leaf)`` is true (``prefix`` is broadcast as
    by :func:`broadcast_prefix_map`). :func:`insert` undoes it.

    >>> tree, found = extract(lambda path, p, x: p, (True, False), ({'a': 1}, 2))
    >>> tree, found
    (({'a': ExtractIndex(index=0)}, 2), [1])
    """
    picked: list[tp.Any] = []

    def one(path: tp.Any, p: tp.Any, leaf: tp.Any) -> tp.Any:
        if not f(path, p, leaf):
            return leaf
        picked.append(leaf)
        return ExtractIndex(len(picked) - 1)

    return broadcast_prefix_map(one, prefix, tree, is_leaf=is_leaf,
                                prefix_leaf=prefix_leaf), picked


def insert(tree: tp.Any, extracted: list[tp.Any]) -> tp.Any:
    """``tree`` with each :class:`ExtractIndex` replaced by its entry of ``extracted``.

    >>> insert([ExtractIndex(1), 'x', ExtractIndex(0)], ['a', 'b'])
    ['b', 'x', 'a']
    """
    def one(x: tp.Any) -> tp.Any:
        if not isinstance(x, ExtractIndex):
            return x
        if not 0 <= x.index < len(extracted):
            raise NNXTransformError(
                "", f"insert: ExtractIndex({x.index}) points past the {len(extracted)} "
                "extracted leaves", "Pass the list that extract returned with this tree.")
        return extracted[x.index]

    return jax.tree_util.tree_map(one, tree, is_leaf=lambda x: isinstance(x, ExtractIndex))


class Mask(tp.NamedTuple):
    """An empty placeholder (a pytree with no leaves) for a masked-out entry or leaf.

    >>> import jax
    >>> jax.tree.leaves((Mask(), 1)), Mask() == ()
    ([1], True)
    """


def mask_at(t: tuple, index: int | None) -> tuple[tp.Any, tuple]:
    """``(t[index], t with a Mask() at index)``; ``(None, t)`` when ``index`` is None or
    ``t`` is not a tuple.

    >>> mask_at((1, 2, 3), 1)
    (2, (1, Mask(), 3))
    """
    if index is None or not isinstance(t, tuple):
        return None, t
    return t[index], tuple(Mask() if i == index else x for i, x in enumerate(t))


def slice_at(t: tuple, index: int | None) -> tuple[tp.Any, tuple]:
    """``(t[index], t without it)``; ``(None, t)`` when ``index`` is None.

    >>> slice_at((1, 2, 3), 0)
    (1, (2, 3))
    """
    if index is None:
        return None, t
    return t[index], t[:index] + t[index + 1:]


def replace_at(t: tuple, index: int | None, value: tp.Any) -> tuple:
    """``t`` with ``t[index]`` replaced by ``value`` (``t`` itself when ``index`` is None).

    >>> replace_at((1, 2, 3), 2, 'x')
    (1, 2, 'x')
    """
    if index is None:
        return t
    out = list(t)
    out[index] = value
    return tuple(out)


def find(t: tuple, value: tp.Any) -> int | None:
    """The first position of an entry equal to ``value`` in the tuple ``t``, else None
    (also None when ``t`` is not a tuple).

    >>> find(('a', 'b', 'b'), 'b'), find(('a',), 'z'), find(['a'], 'a')
    (1, None, None)
    """
    if not isinstance(t, tuple):
        return None
    return next((i for i, x in enumerate(t) if x == value), None)
