"""Graph operations: split a module graph into a definition and State, merge it back.

``split(node)`` returns a :class:`GraphDef` (hashable: types, attribute names, static values,
shared references) and a :class:`~flaxen.nnx.State` of VariableStates; ``merge(graphdef,
state)`` builds an equal, independent object graph. Shared submodules and Variables stay
shared (one object in, one object out) and reference cycles are handled.

>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> graphdef, state = nnx.split(model)
>>> copy = nnx.merge(graphdef, state)
>>> copy is model, (copy.kernel.value == model.kernel.value).all()
(False, Array(True, dtype=bool))
>>> params, rest = nnx.split(model, nnx.Param, ...)[1:]
>>> sorted(params.flat_state())
[('bias',), ('kernel',)]
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx import _codegen, filterlib
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx.state import State
from flaxen.nnx.variables import EMPTY, Variable, VariableState, _make_state

GraphNode = eng.GraphNode
_COMPILE_AT = 3
Node = tp.TypeVar("Node")


class GraphDef(tp.Generic[Node]):
    """The static part of a split graph. Hashable; equal graphs give equal GraphDefs."""

    __slots__ = ("defs", "_hash", "_uses", "_states_fn", "_merge_fn", "__weakref__")

    def __init__(self, defs: tuple) -> None:
        self.defs = defs
        self._hash = hash(defs)
        # Generated split/merge code is compiled on the third use: a definition used once or
        # twice (a one-off split, a clone) would not repay the compile.
        self._uses = 0
        self._states_fn: tp.Any = None
        self._merge_fn: tp.Any = None

    def __getstate__(self) -> tuple:
        return (self.defs,)  # generated code is per process and cannot be pickled

    def __setstate__(self, state: tuple) -> None:
        self.__init__(state[0])

    def _compile(self) -> None:
        self._uses += 1
        if self._uses == _COMPILE_AT:
            self._states_fn = _codegen.make_states_fn(self.defs)
            self._merge_fn = _codegen.make_merge_fn(self.defs)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, GraphDef) and self._hash == other._hash and self.defs == other.defs
        )

    def __repr__(self) -> str:
        from flaxen.nnx.visualization import graphdef_repr

        return graphdef_repr(self)

    @property
    def type(self) -> type:
        d = self.defs[0]
        return d[1] if d[0] in ("node", "var") else type(None)

    def merge(self, state: tp.Mapping, /, *states: tp.Mapping) -> Node:
        return merge(self, state, *states)

    def apply(self, state: tp.Mapping, /, *states: tp.Mapping) -> _ApplyCaller:
        """``graphdef.apply(state).method(*args)`` -> ``(out, (graphdef, new_state))``."""
        return _ApplyCaller(self, (state, *states))

    def make_empty(self) -> Node:
        """The node with every Variable holding :data:`~flaxen.nnx.EMPTY`."""
        n = len(eng.var_outer_indices(self.defs))
        return eng.unflatten(self.defs, [EMPTY] * n)[0]


class _ApplyCaller:
    __slots__ = ("_graphdef", "_states")

    def __init__(self, graphdef: GraphDef, states: tuple) -> None:
        self._graphdef = graphdef
        self._states = states

    def _call(self, name: str | None, args: tuple, kwargs: dict) -> tuple:
        node = merge(self._graphdef, *self._states)
        fn = node if name is None else getattr(node, name)
        out = fn(*args, **kwargs)
        return out, split(node)

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tuple:
        return self._call(None, args, kwargs)

    def __getattr__(self, name: str) -> tp.Callable[..., tuple]:
        return lambda *args, **kwargs: self._call(name, args, kwargs)


def _intern(new: eng.FlatGraph, old: eng.FlatGraph | None) -> None:
    gd = GraphDef(new.defs)
    if old is not None and old.graphdef == gd:
        gd = old.graphdef
    new.graphdef = gd


def flatten_node(node: tp.Any) -> eng.FlatGraph:
    """The (cached) walk of one node."""
    return eng.flatten_cached((node,), _intern)


def _check_node(node: tp.Any, fn: str) -> None:
    if not isinstance(node, (GraphNode, Variable, list, dict, tuple)):
        raise TypeError(
            f"nnx.{fn} expects a graph node (an nnx.Module, Rngs, ...) or a container of them, "
            f"got {type(node).__name__}."
        )


def _states_from_flat(fg: eng.FlatGraph, filters: tuple) -> tuple[State, ...]:
    variables = fg.variables
    paths = fg.paths
    if not filters:
        gd = fg.graphdef
        fn = gd._states_fn
        if fn is not None:
            return (fn(variables),)
        if gd._uses < _COMPILE_AT:
            gd._compile()
        items = [(p, _make_state(type(v), v.raw_value, v._var_metadata))
                 for p, v in zip(paths, variables)]
        return (_nest(items),)
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in preds]
    for p, v in zip(paths, variables):
        for i, pred in enumerate(preds):
            if pred(p, v):
                buckets[i].append((p, _make_state(type(v), v.raw_value, v._var_metadata)))
                break
        else:
            raise ValueError(
                f"nnx.split: the {type(v).__name__} at path {eng._path_str(p)} matches none of "
                f"the filters {list(filters)!r}. A list of filters must cover every Variable: "
                "add one for it, or end the list with '...' to take the rest."
            )
    return tuple(_nest(b) for b in buckets)


def _nest(items: list) -> State:
    root: dict = {}
    for path, leaf in items:
        node = root
        for k in path[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            node = nxt
        node[path[-1]] = leaf
    return _to_state(root)


def _to_state(d: dict) -> State:
    return State._from_raw({k: _to_state(v) if type(v) is dict else v for k, v in d.items()})


def split(node: Node, *filters: filterlib.Filter) -> tuple:
    """``(graphdef, state)`` or, with filters, ``(graphdef, state_1, ..., state_n)``."""
    _check_node(node, "split")
    fg = flatten_node(node)
    return (fg.graphdef, *_states_from_flat(fg, filters))


def graphdef(node: Node) -> GraphDef[Node]:
    _check_node(node, "graphdef")
    return flatten_node(node).graphdef


def state(node: Node, *filters: filterlib.Filter) -> State | tuple[State, ...]:
    """The node's State, or one State per filter (variables matching none are left out)."""
    _check_node(node, "state")
    fg = flatten_node(node)
    if not filters:
        return _states_from_flat(fg, ())[0]
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in preds]
    for p, v in zip(fg.paths, fg.variables):
        for i, pred in enumerate(preds):
            if pred(p, v):
                buckets[i].append((p, _make_state(type(v), v.raw_value, v._var_metadata)))
                break
    states = tuple(_nest(b) for b in buckets)
    return states[0] if len(states) == 1 else states


def _leaves_from_states(defs: tuple, states: tp.Sequence[tp.Mapping], what: str,
                        allow_missing: bool = False) -> list:
    """Values for each Variable of ``defs`` (walk order), looked up along the graph's paths."""
    leaves: list = []
    raw = [s._mapping if isinstance(s, State) else s for s in states]

    def sub(ms: list, key: tp.Any) -> list:
        out = []
        for m in ms:
            v = m.get(key, _NONE) if m is not None else _NONE
            out.append(None if v is _NONE else (v._mapping if isinstance(v, State) else v))
        return out

    def walk(d: tuple, ms: list, path: tuple) -> None:
        kind = d[0]
        if kind == "var":
            for m in reversed(ms):  # later states win
                if m is not None:
                    leaves.append(m)
                    return
            if allow_missing:
                leaves.append(_NONE)
                return
            raise ValueError(
                f"nnx.{what}: no value for the {d[1].__name__} at path {eng._path_str(path)}. "
                "The states do not match this graph definition: pass the states split from "
                "the same model (or a model of the same structure)."
            )
        if kind == "node":
            names = set()
            for name, s in d[3]:
                names.add(name)
                walk(s, sub(ms, name), (*path, name))
            _check_extra(ms, names, path, what)
        elif kind == "tree":
            firsts = set()
            for keys, s in zip(d[4], d[2]):
                cur, p = ms, path
                for k in keys:
                    cur, p = sub(cur, k), (*p, k)
                if keys:
                    firsts.add(keys[0])
                walk(s, cur, p)
            _check_extra(ms, firsts, path, what)

    for d in defs:
        walk(d, raw, ())
    return leaves


def _check_extra(ms: list, names: set, path: tuple, what: str) -> None:
    for m in ms:
        if m is None or not isinstance(m, dict):
            continue
        if len(m) > len(names) or not names.issuperset(m):
            extra = [k for k in m if k not in names]
            if extra:
                raise ValueError(
                    f"nnx.{what}: the state has {eng._path_str((*path, extra[0]))}, which the "
                    f"graph definition does not have (it has {sorted(map(str, names))} at "
                    f"{eng._path_str(path)}). The graphdef and state come from models of "
                    "different structure; split them from the same model."
                )


_NONE = object()


def merge(graphdef: GraphDef[Node], state: tp.Mapping, /, *states: tp.Mapping) -> Node:
    """A fresh object graph from ``graphdef`` and the union of the states."""
    if not isinstance(graphdef, GraphDef):
        raise TypeError(f"nnx.merge expects a GraphDef first, got {type(graphdef).__name__}.")
    if not states and type(state) is State:
        fn = graphdef._merge_fn
        if fn is not None:
            node = fn(state)
            if node is not _codegen.MISS:
                return node
        elif graphdef._uses < _COMPILE_AT:
            graphdef._compile()
    leaves = _leaves_from_states(graphdef.defs, (state, *states), "merge")
    return eng.unflatten(graphdef.defs, leaves)[0]


def update(node: Node, state: tp.Mapping, /, *states: tp.Mapping) -> None:
    """Writes the states' values (and metadata) into ``node``'s Variables, in place."""
    _check_node(node, "update")
    fg = flatten_node(node)
    leaves = _leaves_from_states(fg.graphdef.defs, (state, *states), "update",
                                 allow_missing=True)
    for var, leaf in zip(fg.variables, leaves):
        if leaf is _NONE:
            continue
        if isinstance(leaf, VariableState):
            object.__setattr__(var, "raw_value", leaf.value)
            if leaf._var_metadata != var._var_metadata:
                object.__setattr__(var, "_var_metadata", dict(leaf._var_metadata))
                eng._EPOCH[0] += 1
        elif isinstance(leaf, Variable):
            var.copy_from(leaf)
        else:
            var.value = leaf


def pop(node: Node, *filters: filterlib.Filter) -> State | tuple[State, ...]:
    """Removes the Variables matching ``filters`` from ``node`` and returns them as States."""
    _check_node(node, "pop")
    if not filters:
        raise ValueError("nnx.pop needs at least one filter saying which Variables to remove.")
    fg = flatten_node(node)
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in preds]
    removed = []
    for p, v in zip(fg.paths, fg.variables):
        for i, pred in enumerate(preds):
            if pred(p, v):
                buckets[i].append((p, v.to_state()))
                removed.append(p)
                break
    for p in removed:
        parent = node
        for k in p[:-1]:
            parent = parent[k] if isinstance(parent, (list, dict, tuple)) else parent.__dict__[k]
        if isinstance(parent, GraphNode):
            del parent.__dict__[p[-1]]
        else:
            del parent[p[-1]]
    eng._EPOCH[0] += 1
    states = tuple(_nest(b) for b in buckets)
    return states[0] if len(states) == 1 else states


def clone(node: Node) -> Node:
    """A deep, independent copy (shared references inside stay shared)."""
    graphdef_, state_ = split(node)
    return merge(graphdef_, state_)


def iter_graph(node: tp.Any) -> tp.Iterator[tuple[tuple, tp.Any]]:
    """``(path, object)`` for every graph node and Variable reachable from ``node``, once."""
    fg = eng.flatten((node,))
    seen: set[int] = set()

    def walk(d: tuple, path: tuple) -> tp.Iterator:
        kind = d[0]
        if kind in ("node", "var") and d[2] not in seen:
            seen.add(d[2])
            if kind == "node":
                for name, s in d[3]:
                    yield from walk(s, (*path, name))
            yield path, fg.refs[d[2]]
        elif kind == "tree":
            for keys, s in zip(d[4], d[2]):
                yield from walk(s, (*path, *keys))

    yield from walk(fg.defs[0], ())


class UpdateContext:
    """Carries object identities from a split to the matching merge/update (see transforms)."""

    def __init__(self) -> None:
        self.flat: eng.FlatGraph | None = None
        self.inner_index: dict[int, int] = {}

    def split(self, *nodes: tp.Any) -> tuple[GraphDef, State]:
        self.flat = eng.flatten_cached(tuple(nodes), _intern)
        return self.flat.graphdef, _states_from_flat(self.flat, ())[0]
