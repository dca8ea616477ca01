"""Whole-graph Variable tools: ``nnx.with_vars`` (a copy with hijax/ref modes changed) and
``nnx.set_metadata`` (metadata set in place on every selected Variable).

Both walk an object graph (Modules, Pytrees, lists, dicts, tuples, States) with paths;
shared objects are visited once and stay shared in a copy.

>>> import jax
>>> from flaxen import nnx
>>> tree = [nnx.Variable(1.0), nnx.Param(2.0)]
>>> out = nnx.with_vars(tree, ref=True)
>>> [isinstance(v.get_raw_value(), jax.Ref) for v in out]
[True, True]
>>> nnx.set_metadata(tree, frozen=True, only=nnx.Param)
>>> tree[0].has_metadata('frozen'), tree[1].get_metadata('frozen')
(False, True)
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx import _node_protocol as _proto
from flaxen.nnx import filterlib
from flaxen.nnx._graph_node import GraphNode, new_node
from flaxen.nnx.variablelib import Variable

A = tp.TypeVar("A")
Path = tuple[tp.Any, ...]


def _children(x: tp.Any) -> list[tuple[tp.Any, tp.Any]] | None:
    """``[(key, child)]`` of a graph node or pytree container (the node protocol's one
    order); None for a leaf."""
    return _proto.children(x)


def iter_variables(node: tp.Any) -> tp.Iterator[tuple[Path, Variable]]:
    """``(path, variable)`` for every Variable reachable from ``node``, each path once
    (a Variable shared by two attributes appears under both paths)."""
    seen_nodes: set[int] = set()

    def walk(x: tp.Any, path: Path) -> tp.Iterator[tuple[Path, Variable]]:
        if isinstance(x, Variable):
            yield path, x
            return
        children = _children(x)
        if children is None:
            return
        if _proto.is_graph_object(x):
            if id(x) in seen_nodes:
                return
            seen_nodes.add(id(x))
        for key, child in children:
            yield from walk(child, (*path, key))

    yield from walk(node, ())


def map_variables(node: A, fn: tp.Callable[[Path, Variable], tp.Any]) -> A:
    """A copy of the graph (new graph nodes and containers) with each Variable replaced by
    ``fn(path, variable)``; shared objects stay shared, other leaves are kept as they are."""
    memo: dict[int, tp.Any] = {}

    def rebuild(x: tp.Any, path: Path) -> tp.Any:
        if isinstance(x, Variable):
            if id(x) not in memo:
                memo[id(x)] = fn(path, x)
            return memo[id(x)]
        kids = _children(x)
        if kids is None:
            return x
        if _proto.is_graph_object(x):
            if id(x) in memo:
                return memo[id(x)]
            impl = _proto.get_node_impl(x)
            if isinstance(x, GraphNode):
                new = new_node(type(x))
                _copy_slots(x, new)
            else:
                new = impl.create_empty(impl.flatten(x)[1])
            memo[id(x)] = new  # before the children: a node may hold itself
            impl.init(new, [(k, rebuild(c, (*path, k))) for k, c in kids])
            return new
        return _proto.rebuild(x, [(k, rebuild(c, (*path, k))) for k, c in kids])

    return rebuild(node, ())


_SKIP_SLOTS = frozenset({"__dict__", "__weakref__", "_nnx_trace"})


def _copy_slots(src: tp.Any, dst: tp.Any) -> None:
    # bookkeeping kept in slots (e.g. a Pytree's data/static status) travels with the copy
    for cls in type(src).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in _SKIP_SLOTS:
                continue
            try:
                value = object.__getattribute__(src, name)
            except AttributeError:
                continue
            object.__setattr__(dst, name, value)


def _duplicates(node: tp.Any, predicate: filterlib.Predicate) -> list[list[Path]]:
    paths: dict[int, list[Path]] = {}
    for path, var in iter_variables(node):
        if predicate(path, var):
            paths.setdefault(id(var), []).append(path)
    return [p for p in paths.values() if len(p) > 1]


def with_vars(node: A, /, *, hijax: bool | None = None, ref: bool | None = None,
              mutable: bool | None = None, only: filterlib.Filter = ...,
              allow_duplicates: bool = False) -> A:
    """A copy of ``node`` whose selected Variables have the given ``hijax`` / ``ref`` mode.

    Variables that ``only`` selects and whose mode differs are copied with the new mode
    (``ref=True`` moves the value into a ``jax.Ref``); all other Variables are kept (the
    same objects). A Variable reachable from two paths would become two Variables, so that
    is an error unless ``allow_duplicates=True``.

    >>> from flaxen import nnx
    >>> v = nnx.Variable(1.0)
    >>> nnx.with_vars([v, v], ref=True)
    Traceback (most recent call last):
    ...
    ValueError: Found duplicate at paths:
      ---
      0
      1
      ---
    Each Variable selected by `only` must be reachable from one path ...
    """
    changes: dict[str, bool] = {}
    if hijax is not None:
        changes["hijax"] = bool(hijax)
    if ref is not None:
        changes["ref"] = bool(ref)
    if mutable is not None:
        changes["mutable"] = bool(mutable)
    selected = filterlib.to_predicate(only)

    def predicate(path: Path, x: tp.Any) -> bool:
        return (isinstance(x, Variable) and selected(path, x)
                and any(x.get_metadata(k, None) != v for k, v in changes.items()))

    if not allow_duplicates:
        dups = _duplicates(node, predicate)
        if dups:
            lines = ["Found duplicate at paths:", "  ---"]
            for group in dups:
                lines += ["  " + "/".join(map(str, p)) for p in group] + ["  ---"]
            raise ValueError(
                "\n".join(lines) + "\nEach Variable selected by `only` must be reachable from "
                "one path only (a copy would split it in two); narrow `only`, remove the "
                "shared reference, or pass allow_duplicates=True.")

    def convert(path: Path, var: Variable) -> tp.Any:
        return var.copy(**changes) if predicate(path, var) else var

    return map_variables(node, convert)


def set_metadata(node: tp.Any, /, *, only: filterlib.Filter = Variable,
                 **metadata: tp.Any) -> None:
    """Sets ``metadata`` in place on every Variable of ``node`` that ``only`` selects."""
    selected = filterlib.to_predicate(only)
    done: set[int] = set()
    for path, var in iter_variables(node):
        if id(var) not in done and selected(path, var):
            done.add(id(var))
            var.set_metadata(**metadata)
