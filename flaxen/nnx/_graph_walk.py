"""Walking an object graph without splitting it (re-exported by :mod:`flaxen.nnx.graphlib`).

``iter_graph``, ``iter_modules``, ``iter_children``, ``recursive_map`` and
``find_duplicates`` visit the graph nodes, containers and Variables under an object (keys
in sorted order, children before their parents) without building a GraphDef. With
``graph=False`` (tree mode) they first run :func:`_check_tree`, the check every tree-mode
entry point shares: it rejects shared Variables or nodes (naming both paths) and graph
nodes that are not pytrees.

>>> from flaxen import nnx
>>> shared = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
>>> model = nnx.Sequential(shared, shared)
>>> [path for path, _ in iter_modules(model)]
[('layers', 0), ('layers',), ()]
>>> find_duplicates(model)
[[('layers', 0), ('layers', 1)]]
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.errors import InvalidNNXValueError
from flaxen.nnx import _codegen, filterlib
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _node_protocol as _proto
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._modes import set_graph_mode
from flaxen.nnx.variablelib import Variable, is_array_ref

__all__ = ["find_duplicates", "iter_children", "iter_graph", "iter_module_children", "iter_modules",
           "recursive_map"]


def _mode(graph: bool | None) -> bool:
    # graph=None means the mode set by nnx.set_graph_mode
    return set_graph_mode.current_value() if graph is None else bool(graph)


# -- tree mode -----------------------------------------------------------------------------

def _key(k: tp.Any) -> tp.Any:
    for attr in ("name", "key", "idx"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return str(k)


def _path_str(path: tuple) -> str:
    return "/" + "/".join(str(k) for k in path)


def _tree_leaf(x: tp.Any) -> bool:
    return isinstance(x, Variable) or (isinstance(x, GraphNode) and not _is_pytree(x))


def _is_pytree(x: tp.Any) -> bool:
    return getattr(type(x), "_pytree__is_pytree", False)


def _check_tree(node: tp.Any) -> None:
    """Rejects shared Variables / nodes (and cycles) and non-pytree graph nodes."""
    seen: dict[int, tuple] = {}

    def walk(x: tp.Any, path: tuple, stack: set) -> None:
        ref = is_array_ref(x)
        if ref or isinstance(x, (Variable, GraphNode)):
            if id(x) in seen:
                what = "jax.Ref" if ref else type(x).__name__
                raise ValueError(
                    f"Tree mode (graph=False) does not support shared references: the same "
                    f"{what} was found at paths {_path_str(seen[id(x)])} and "
                    f"{_path_str(path)}. Use graph=True (or nnx.compat) for graphs with "
                    "shared Variables, Refs or Modules, or remove the sharing.")
            seen[id(x)] = path
            if ref or isinstance(x, Variable):
                return
            if not _is_pytree(x):
                raise ValueError(
                    f"Tree mode (graph=False) needs pytrees, but the {type(x).__name__} "
                    f"declared with pytree=False. Found at path {_path_str(path)}. Use "
                    "graph=True, or make the class a pytree.")
        if id(x) in stack:
            return
        kids, treedef = jax.tree_util.tree_flatten_with_path(
            x, is_leaf=lambda y: y is not x)
        if jax.tree_util.treedef_is_leaf(treedef) and not kids or (
                len(kids) == 1 and kids[0][1] is x):
            return
        stack = stack | {id(x)}
        for kp, child in kids:
            walk(child, (*path, _key(kp[0])), stack)

    walk(node, (), set())


# -- tree mode, cached ----------------------------------------------------------------------

class TreeWalk:
    """A tree-mode flatten (graphdef, sorted paths) tied to one cached graph walk.

    Why: a tree-mode flatten re-walks every object through JAX's Python flatten callbacks
    and re-checks sharing on each call. The graph engine's cached walk already knows when
    a structure changed (any graph-node attribute write, any mutable container whose
    children changed), so a tree-mode flatten is done once per such walk, checked to find
    the same leaves, and reused with it: leaves come from the walk, in tree order.
    """

    __slots__ = ("graphdef", "paths", "perm", "_uses", "_nest", "_lookup")

    def __init__(self, graphdef: tp.Any, paths: tuple, perm: tuple | None) -> None:
        self.graphdef = graphdef
        self.paths = paths
        self.perm = perm  # tree order -> walk order; None when they are the same
        self._uses = 0
        self._nest: tp.Any = None
        self._lookup: tp.Any = None

    def leaves(self, walked: list) -> list:
        perm = self.perm
        return list(walked) if perm is None else [walked[i] for i in perm]

    def nest_fn(self) -> tp.Callable | None:
        """The generated ``leaves -> State`` function, built on the second use."""
        if self._nest is None:
            self._uses += 1
            if self._uses >= 2:
                self._nest = _codegen.make_nest_fn(self.paths) or False
        return self._nest or None


def _tree_view(fg: eng.FlatGraph, graphdef: tp.Any, paths: list, leaves: list
               ) -> TreeWalk | tp.Literal[False]:
    """The TreeWalk of ``fg`` when tree mode found exactly the walk's leaves, else False."""
    walked = fg.leaves
    if fg.has_arrays or len(walked) != len(leaves):
        return False
    pos = {id(x): i for i, x in enumerate(walked)}
    perm = tuple(pos.get(id(x), -1) for x in leaves)
    if -1 in perm or len(set(perm)) != len(perm):
        return False
    identity = perm == tuple(range(len(perm)))
    return TreeWalk(graphdef, tuple(paths), None if identity else perm)


# containers a root may be, beside a graph node: the walk of ``(model, optimizer)`` is
# cached by its items (see _graph_engine.flatten_cached)
_ROOTS = (tuple, list, dict)


def tree_flatten_cached(node: tp.Any, walk: tp.Callable[[tp.Any], eng.FlatGraph],
                        slow: tp.Callable[[tp.Any], tuple[tp.Any, list, list]]
                        ) -> tuple[tp.Any, tuple | list, list, TreeWalk | None]:
    """``(graphdef, paths, leaves, tree_walk)`` of a tree-mode flatten of ``node``.

    ``slow`` is the full tree-mode flatten (checks included) and ``walk`` the cached graph
    walk; a root that is neither a graph node nor a tuple, list or dict, or whose walk holds
    bare arrays, always takes ``slow`` (``tree_walk`` is then None).
    """
    if not (_is_pytree(node) if isinstance(node, GraphNode) else type(node) in _ROOTS):
        return (*slow(node), None)
    fg = walk(node)
    tw = fg.tree
    if tw is None:
        gd, paths, leaves = slow(node)
        view = fg.tree = _tree_view(fg, gd, paths, leaves)
        return gd, paths, leaves, view or None
    if tw is False:
        return (*slow(node), None)
    return tw.graphdef, tw.paths, tw.leaves(fg.leaves), tw


# -- iteration -----------------------------------------------------------------------------

def _node_items(x: tp.Any) -> list[tuple[tp.Any, tp.Any]]:
    # the node protocol's one order (the graph engine walks the same)
    return _proto.children(x) or []


def _is_walked(x: tp.Any) -> bool:
    return isinstance(x, GraphNode) or eng.is_pytree_node(x) or type(x) in eng._USER_TYPES


def iter_graph(node: tp.Any, /, *, graph: bool | None = None
               ) -> tp.Iterator[tuple[tuple, tp.Any]]:
    """``(path, value)`` for every node and leaf under ``node``, children before parents.
    Graph nodes and Variables are visited once; arrays every time they occur. In tree mode
    (``graph=False``) the values are what JAX flattens: static attributes are not visited."""
    if not _mode(graph):
        _check_tree(node)
        return _iter_tree(node)
    return _iter_graph(node)


def _iter_graph(node: tp.Any) -> tp.Iterator[tuple[tuple, tp.Any]]:
    seen: set[int] = set()

    def walk(x: tp.Any, path: tuple) -> tp.Iterator:
        if _proto.is_graph_object(x):
            if id(x) in seen:
                return
            seen.add(id(x))
        if _is_walked(x):
            for k, v in _node_items(x):
                yield from walk(v, (*path, k))
        yield path, x

    yield from walk(node, ())


def _jax_children(x: tp.Any) -> list[tuple[tp.Any, tp.Any]]:
    # one level of JAX's flatten: what tree mode sees as the children of a pytree node
    kids, _ = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    return [(_proto._key_path_to_key(kp[0]), v) for kp, v in kids]


def _iter_tree(node: tp.Any) -> tp.Iterator[tuple[tuple, tp.Any]]:
    # _check_tree already refused shared Variables, Refs and cycles
    def walk(x: tp.Any, path: tuple) -> tp.Iterator:
        if _proto.is_pytree_node(x, check_graph_registry=False):
            for k, v in _jax_children(x):
                yield from walk(v, (*path, k))
        yield path, x

    yield from walk(node, ())


def iter_modules(module: tp.Any, /, *, graph: bool | None = None
                 ) -> tp.Iterator[tuple[tuple, tp.Any]]:
    """``(path, module)`` for every Module under ``module`` (children first)."""
    # upward: only iter_modules needs the Module class, which sits above the walkers
    from flaxen.nnx.module import Module

    for path, x in iter_graph(module, graph=graph):
        if isinstance(x, Module):
            yield path, x


def _direct_children(node: tp.Any, graph: bool | None, fn: str) -> list[tuple[tp.Any, tp.Any]]:
    if _mode(graph):
        if _proto.get_node_impl(node) is None:
            raise InvalidNNXValueError(
                "", f"{fn} expected a graph node, got {type(node).__name__}",
                "Pass a Module, Rngs, nnx.List/Dict or a list/dict/tuple of them; for a "
                "regular pytree use graph=False.")
        return _node_items(node)
    if isinstance(node, GraphNode) and not _is_pytree(node):
        raise InvalidNNXValueError(
            "", f"{fn} with graph=False needs a pytree, but {type(node).__name__} was "
            "declared with pytree=False", "Use graph=True, or make the class a pytree.")
    if not _proto.is_pytree_node(node, check_graph_registry=False):
        raise InvalidNNXValueError(
            "", f"{fn} with graph=False expected a pytree node, got {type(node).__name__}",
            "Pass a pytree (a Module, a list/dict/tuple); for a graph node that is not a "
            "pytree use graph=True.")
    return _jax_children(node)


def iter_children(node: tp.Any, /, *, graph: bool | None = None
                  ) -> tp.Iterator[tuple[tp.Any, tp.Any]]:
    """``(name, child)`` for the graph nodes, Variables and Refs held directly by ``node``,
    a shared child under each of its names (as Flax)."""
    for k, v in _direct_children(node, graph, "iter_children"):
        if _proto.is_graph_object(v) or is_array_ref(v):
            yield k, v


def iter_module_children(node: tp.Any, /, *, graph: bool | None = None
                         ) -> tp.Iterator[tuple[tp.Any, tp.Any]]:
    """``(name, child)`` for the graph nodes (Modules, Rngs, nnx containers...) held directly
    by ``node``, Variables left out."""
    for k, v in _direct_children(node, graph, "iter_module_children"):
        if _proto.is_node_module(v):
            yield k, v


def recursive_map(f: tp.Callable[[tuple, tp.Any], tp.Any], node: tp.Any, /, *,
                  graph: bool | None = None) -> tp.Any:
    """Rebuilds ``node`` bottom-up, replacing every sub-node ``x`` (graph nodes, containers
    and Variables) by ``f(path, x)``; shared objects are mapped once."""
    if not _mode(graph):
        _check_tree(node)
    done: dict[int, tp.Any] = {}

    def walk(x: tp.Any, path: tuple) -> tp.Any:
        if id(x) in done:
            return done[id(x)]
        if isinstance(x, GraphNode):
            done[id(x)] = x
            for k, v in _node_items(x):
                new = walk(v, (*path, k))
                if new is not v:
                    name = str(k) if type(x)._graph_int_keys else k
                    x.__dict__[name] = new
            out = f(path, x)
            done[id(x)] = out
            return out
        if isinstance(x, Variable):
            out = f(path, x)
            done[id(x)] = out
            return out
        if eng.is_pytree_node(x):
            items, treedef = eng.flatten_pytree(x)
            new_items = [(k, walk(v, (*path, k))) for k, v in items]
            rebuilt = treedef.unflatten([v for _, v in new_items])
            return f(path, rebuilt)
        return x

    out = walk(node, ())
    eng._EPOCH[0] += 1
    return out


def find_duplicates(node: tp.Any, /, *, only: filterlib.Filter = ...) -> list[list[tuple]]:
    """Paths of every object (graph node or Variable) reachable along several paths: one
    list of paths per such object."""
    pred = filterlib.to_predicate(only)
    found: dict[int, list] = {}
    order: list[int] = []

    def walk(x: tp.Any, path: tuple, stack: frozenset) -> None:
        if isinstance(x, (Variable, GraphNode)):
            if id(x) in found:
                found[id(x)].append(path)
                return
            found[id(x)] = [path]
            order.append(id(x))
            if isinstance(x, Variable) or not pred(path, x) and False:
                return
        if _is_walked(x) and id(x) not in stack:
            for k, v in _node_items(x):
                walk(v, (*path, k), stack | {id(x)})

    walk(node, (), frozenset())
    return [found[i] for i in order if len(found[i]) > 1]
