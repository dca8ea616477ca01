"""The graph engine: flattening object graphs into a hashable definition plus leaves, and back.

Everything NNX does with state goes through here. :func:`flatten` walks Python objects
(graph nodes, Variables, and containers holding them) depth first, attributes sorted, and
returns a :class:`FlatGraph`: a hashable definition (types, attribute names, static values,
shared-reference indices) plus the Variables in walk order. :func:`unflatten` builds fresh
objects from a definition and leaf values; :func:`apply_update` brings existing objects in
line with a definition produced from (possibly modified) copies of them.

Speed: walking Python objects is the expensive part, so :func:`flatten_cached` remembers the
last walk per tuple of root objects and reuses it while the global structure epoch
(bumped by every graph-node attribute write) is unchanged and mutable containers still hold
the same children. Definitions cache their hash, and equal definitions are interned so that
identity comparison usually settles equality.

A definition entry ("def") is one of these tuples:

- ``('node', type, index, ((name, def), ...), outer)``: a graph node and its attributes
- ``('var', type, index, frozen_metadata, outer)``: a Variable; its value is a leaf
- ``('ref', index)``: an object already seen in this walk (shared reference)
- ``('tree', treedef, (def, ...), mutable, keys)``: a pytree container (list, dict, tuple,
  ...); ``keys`` holds each leaf's key path (a tuple of dict keys / list indices)
- ``('static', value)``: anything else, kept as is (must be hashable, or is held by identity)

``outer`` is the index the same object had in an earlier walk (see ``outer_map``), or -1.
"""

from __future__ import annotations

import typing as tp

import jax
import numpy as np

from flaxen.errors import TraceContextError
from flaxen.nnx import _trace
from flaxen.nnx.state import _sort_keys
from flaxen.nnx.variables import Variable, VariableState

_current_trace = _trace.current_trace
_EPOCH = _trace._EPOCH
_SCALARS = frozenset({int, float, bool, str, complex, type(None), type, bytes})
_tree_flatten = jax.tree_util.tree_flatten


class GraphNode:
    """Base class of objects that NNX walks as graph nodes (``Module``, ``Rngs``, ...).

    Attributes live in ``__dict__``; writing one from a different JAX trace than the one the
    object was created in raises :class:`~flaxen.errors.TraceContextError`.
    """

    __slots__ = ("_nnx_trace", "__dict__", "__weakref__")

    def __new__(cls, *args: tp.Any, **kwargs: tp.Any) -> GraphNode:
        obj = object.__new__(cls)
        object.__setattr__(obj, "_nnx_trace", _current_trace())
        return obj

    def __setattr__(self, name: str, value: tp.Any) -> None:
        if self._nnx_trace is not _current_trace():
            self.check_valid_context(
                f"Cannot set attribute {name!r} of {type(self).__name__}: it was created "
                "under a different JAX trace (probably captured by closure inside a "
                "transform). Pass it as an argument of the nnx transform instead."
            )
        object.__setattr__(self, name, value)
        _EPOCH[0] += 1

    def __delattr__(self, name: str) -> None:
        if self._nnx_trace is not _current_trace():
            self.check_valid_context(
                f"Cannot delete attribute {name!r} of {type(self).__name__} from a different "
                "JAX trace than the one it was created in."
            )
        object.__delattr__(self, name)
        _EPOCH[0] += 1

    def check_valid_context(self, error_msg: str) -> None:
        """Raises TraceContextError(error_msg) unless called in this object's own trace."""
        if self._nnx_trace is not _current_trace():
            raise TraceContextError(error_msg)

    def __getstate__(self) -> dict:
        return dict(self.__dict__)

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "_nnx_trace", _current_trace())
        self.__dict__.update(state)


class _Identity:
    """Holds an unhashable static value; equal only to a holder of the same object."""

    __slots__ = ("obj",)

    def __init__(self, obj: tp.Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<unhashable {type(self.obj).__name__}>"


def _freeze(value: tp.Any) -> tp.Any:
    try:
        hash(value)
        return value
    except TypeError:
        return _Identity(value)


def _freeze_meta(meta: dict) -> tuple:
    if not meta:
        return ()
    return tuple((k, _freeze(v)) for k, v in sorted(meta.items()))


def _key_part(k: tp.Any) -> tp.Any:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return str(k)


def _path_str(path: tuple) -> str:
    return "/" + "/".join(map(str, path))


class FlatGraph:
    """Result of one walk: the definition and, in walk order, the objects and Variables."""

    __slots__ = ("defs", "graphdef", "refs", "variables", "paths", "containers", "epoch",
                 "_state_cache")

    def __init__(self, defs: tuple, refs: list, variables: list, paths: list,
                 containers: list) -> None:
        self.defs = defs
        self.refs = refs
        self.variables = variables
        self.paths = paths
        self.containers = containers
        self.epoch = _EPOCH[0]
        self.graphdef = None  # set by graph.py (a GraphDef wrapper, interned)
        self._state_cache = None

    def still_valid(self) -> bool:
        for obj, treedef, leaves in self.containers:
            new_leaves, new_def = _tree_flatten(obj)
            if new_def != treedef or len(new_leaves) != len(leaves):
                return False
            for a, b in zip(new_leaves, leaves):
                if a is not b:
                    return False
        return True


def flatten(roots: tp.Sequence[tp.Any], outer_map: dict[int, int] | None = None,
            root_paths: tp.Sequence[tuple] | None = None) -> FlatGraph:
    """Walks ``roots`` (graph nodes or containers of them) into a :class:`FlatGraph`."""
    ids: dict[int, int] = {}
    refs: list = []
    variables: list = []
    paths: list = []
    containers: list = []
    omap = outer_map or {}

    def visit(x: tp.Any, path: tuple) -> tuple:
        tx = type(x)
        if tx in _SCALARS:
            return ("static", x)
        if isinstance(x, Variable):
            i = ids.get(id(x))
            if i is not None:
                return ("ref", i)
            i = len(refs)
            ids[id(x)] = i
            refs.append(x)
            variables.append(x)
            paths.append(path)
            return ("var", tx, i, _freeze_meta(x._var_metadata), omap.get(id(x), -1))
        if isinstance(x, GraphNode):
            i = ids.get(id(x))
            if i is not None:
                return ("ref", i)
            i = len(refs)
            ids[id(x)] = i
            refs.append(x)
            d = x.__dict__
            attrs = tuple((k, visit(d[k], (*path, k))) for k in _sort_keys(d))
            return ("node", tx, i, attrs, omap.get(id(x), -1))
        if isinstance(x, (jax.Array, np.ndarray)):
            raise TypeError(
                f"Found a bare array at {_path_str(path)} (shape {np.shape(x)}). Arrays held by "
                "a Module must be wrapped in a Variable so transforms can trace them: e.g. "
                "`self.w = nnx.Param(array)` or `nnx.Variable(array)` for non-trainable state."
            )
        with_path, treedef = jax.tree_util.tree_flatten_with_path(x)
        if treedef.num_nodes == 1 and treedef.num_leaves == 1:  # x itself is a leaf
            return ("static", _freeze(x))
        leaves = [leaf for _, leaf in with_path]
        if not any(isinstance(leaf, (Variable, GraphNode, jax.Array, np.ndarray))
                   for leaf in leaves):
            return ("static", _freeze(x))
        keys = tuple(tuple(_key_part(k) for k in kp) for kp, _ in with_path)
        subs = tuple(visit(leaf, (*path, *kp)) for kp, (_, leaf) in zip(keys, with_path))
        mutable = not isinstance(x, tuple)
        if mutable:
            containers.append((x, treedef, leaves))
        return ("tree", treedef, subs, mutable, keys)

    if root_paths is None:
        defs = tuple(visit(r, ()) for r in roots)
    else:
        defs = tuple(visit(r, p) for r, p in zip(roots, root_paths))
    return FlatGraph(defs, refs, variables, paths, containers)


# -- cached flatten ------------------------------------------------------------------------

_CACHE_SIZE = 64
_cache: dict[tuple, FlatGraph] = {}
_cache_roots: dict[tuple, tuple] = {}


def flatten_cached(roots: tuple, intern: tp.Callable[[FlatGraph, FlatGraph | None], None]
                   ) -> FlatGraph:
    """:func:`flatten` with reuse: the Python walk runs only when the structure changed.

    ``intern`` is called on each fresh walk with the previous walk of the same roots (or
    None), so the caller can reuse the previous definition object when it is equal.
    """
    key = tuple(map(id, roots))
    fg = _cache.get(key)
    if fg is not None:
        for a, b in zip(_cache_roots[key], roots):
            if a is not b:  # an id was reused by a new object
                fg = None
                break
        else:
            if fg.epoch == _EPOCH[0] and (not fg.containers or fg.still_valid()):
                return fg
    new = flatten(roots)
    intern(new, fg)
    if len(_cache) >= _CACHE_SIZE and key not in _cache:
        oldest = next(iter(_cache))
        del _cache[oldest]
        del _cache_roots[oldest]
    _cache[key] = new
    _cache_roots[key] = tuple(roots)
    return new


def clear_cache() -> None:
    _cache.clear()
    _cache_roots.clear()


# -- unflatten -----------------------------------------------------------------------------

def _new_node(typ: type) -> tp.Any:
    obj = object.__new__(typ)
    object.__setattr__(obj, "_nnx_trace", _current_trace())
    return obj


def _new_var(typ: type, value: tp.Any, meta: tuple) -> Variable:
    var = object.__new__(typ)
    object.__setattr__(var, "_var_metadata", {k: _thaw(v) for k, v in meta} if meta else {})
    object.__setattr__(var, "_trace_state", _current_trace())
    object.__setattr__(var, "raw_value", value)
    return var


def _thaw(v: tp.Any) -> tp.Any:
    return v.obj if type(v) is _Identity else v


def unflatten(defs: tuple, leaves: tp.Sequence[tp.Any], refs: list | None = None) -> list:
    """Builds fresh objects for ``defs``; ``leaves[i]`` is the i-th Variable's value.

    A leaf that is a :class:`VariableState` also supplies the Variable's metadata. Returns the
    root objects; ``refs`` (if given) receives every object by index.
    """
    built: dict[int, tp.Any] = {}
    counter = [0]

    def build(d: tuple) -> tp.Any:
        kind = d[0]
        if kind == "static":
            return _thaw(d[1])
        if kind == "var":
            pos = counter[0]
            counter[0] = pos + 1
            leaf = leaves[pos]
            if type(leaf) is VariableState:
                var = object.__new__(d[1])
                object.__setattr__(var, "_var_metadata", dict(leaf._var_metadata))
                object.__setattr__(var, "_trace_state", _current_trace())
                object.__setattr__(var, "raw_value", leaf.value)
            else:
                var = _new_var(d[1], leaf, d[3])
            built[d[2]] = var
            return var
        if kind == "node":
            obj = _new_node(d[1])
            built[d[2]] = obj
            od = obj.__dict__
            for name, sub in d[3]:
                od[name] = build(sub)
            return obj
        if kind == "ref":
            return built[d[1]]
        # tree
        return d[1].unflatten([build(s) for s in d[2]])

    roots = [build(d) for d in defs]
    if refs is not None:
        refs.extend(built[i] for i in sorted(built))
    return roots


def apply_update(defs: tuple, values: tp.Sequence[tp.Any], outer_refs: tp.Sequence[tp.Any],
                 out_vars: list | None = None) -> list:
    """Makes the objects in ``outer_refs`` match ``defs`` (from a walk of their copies).

    Defs whose ``outer`` index is set update that existing object in place: Variables get
    the new value and metadata, nodes get their attribute dicts rewritten (new attributes
    added, removed ones deleted). Defs with ``outer == -1`` are built fresh. Returns the
    root objects (existing where possible), so shared references are preserved.
    """
    built: dict[int, tp.Any] = {}
    counter = [0]

    def build(d: tuple) -> tp.Any:
        kind = d[0]
        if kind == "static":
            return _thaw(d[1])
        if kind == "var":
            pos = counter[0]
            counter[0] = pos + 1
            outer = d[4]
            if outer >= 0:
                var = outer_refs[outer]
                if type(var) is not d[1]:
                    var = _new_var(d[1], values[pos], d[3])
                else:
                    object.__setattr__(var, "raw_value", values[pos])
                    meta = {k: _thaw(v) for k, v in d[3]} if d[3] else {}
                    if meta != var._var_metadata:
                        object.__setattr__(var, "_var_metadata", meta)
            else:
                var = _new_var(d[1], values[pos], d[3])
            built[d[2]] = var
            if out_vars is not None:
                out_vars.append((var, outer))
            return var
        if kind == "node":
            outer = d[4]
            if outer >= 0 and type(outer_refs[outer]) is d[1]:
                obj = outer_refs[outer]
                built[d[2]] = obj
                new_attrs = {name: build(sub) for name, sub in d[3]}
                od = obj.__dict__
                for name in [k for k in od if k not in new_attrs]:
                    del od[name]
                for name, val in new_attrs.items():
                    if od.get(name, _MISSING) is not val:
                        od[name] = val
            else:
                obj = _new_node(d[1])
                built[d[2]] = obj
                od = obj.__dict__
                for name, sub in d[3]:
                    od[name] = build(sub)
            return obj
        if kind == "ref":
            return built[d[1]]
        return d[1].unflatten([build(s) for s in d[2]])

    roots = [build(d) for d in defs]
    _EPOCH[0] += 1
    return roots


_MISSING = object()


def strip_outer(defs: tuple) -> tuple:
    """The same definition with every ``outer`` index reset to -1 (for comparisons)."""

    def strip(d: tuple) -> tuple:
        kind = d[0]
        if kind == "node":
            return ("node", d[1], d[2], tuple((n, strip(s)) for n, s in d[3]), -1)
        if kind == "var":
            return ("var", d[1], d[2], d[3], -1)
        if kind == "tree":
            return ("tree", d[1], tuple(strip(s) for s in d[2]), d[3], d[4])
        return d

    return tuple(strip(d) for d in defs)


def var_outer_indices(defs: tuple) -> list[int]:
    """``outer`` of each Variable def, in walk (leaf) order."""
    out: list[int] = []

    def walk(d: tuple) -> None:
        kind = d[0]
        if kind == "var":
            out.append(d[4])
        elif kind == "node":
            for _, s in d[3]:
                walk(s)
        elif kind == "tree":
            for s in d[2]:
                walk(s)

    for d in defs:
        walk(d)
    return out


def var_def_paths(defs: tuple) -> tuple[list[tuple[tuple, tuple]], int]:
    """``(path, var def)`` of each Variable under the node defs, in walk order, and the
    number of defs visited (nodes, trees and variables alike)."""
    out: list = []
    count = 0

    def walk(d: tuple, path: tuple) -> None:
        nonlocal count
        count += 1
        kind = d[0]
        if kind == "var":
            out.append((path, d))
        elif kind == "node":
            for name, s in d[3]:
                walk(s, (*path, name))
        elif kind == "tree":
            for keys, s in zip(d[4], d[2]):
                walk(s, (*path, *keys))

    for d in defs:
        walk(d, ())
    return out, count
