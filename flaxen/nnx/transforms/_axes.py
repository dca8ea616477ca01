"""Per-Variable prefixes for today's mapped transforms (``vmap``, ``pmap``, ``shard_map``,
``scan``): ``StateAxes``, ``nnx.prefix`` and the resolution of a prefix tree to one value per
lifted leaf.

A transform's ``in_axes``/``out_axes`` (or ``in_specs``) is a prefix of its arguments, as in
JAX. Where the prefix reaches a graph node (or a Variable) it may be a plain value (every
Variable inside gets it), a :class:`StateAxes` (a value per filter, graph mode only) or the
:class:`NodePrefix` that :func:`prefix` computes (a value per Variable path, all modes).
:func:`resolve_inputs` turns it into one value per State leaf of a :class:`~flaxen.nnx._lift.Lift`
(plus one per plain argument leaf) and refuses a Variable reached twice with two different
values ("Inconsistent aliasing").

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> px = nnx.prefix(m, {nnx.PathContains('kernel'): 0, ...: None})
>>> px.map_prefix(('kernel',), m.kernel), px.map_prefix(('bias',), m.bias)
(0, None)
"""

from __future__ import annotations

import typing as tp
from collections.abc import Mapping

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift, filterlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graphdef import NodeDef, NodeRef, VariableDef
from flaxen.nnx._tree_state import TreeState, to_tree2
from flaxen.nnx.transforms._common import PrefixMapping
from flaxen.nnx.variablelib import Variable

__all__ = ["NodePrefix", "StateAxes", "TreeState", "as_node_prefix", "occurrences", "prefix",
           "resolve_inputs", "resolve_outputs"]


class StateAxes(PrefixMapping, Mapping):
    """Maps the Variables of a graph node to axes by filter (first match wins).

    Accepted where ``vmap``/``pmap``/``scan`` take an axis for a graph node, in graph mode
    with graph updates (``graph=True, graph_updates=True``). A ``State`` of axes builds one
    filter per path.

    >>> from flaxen import nnx
    >>> sa = nnx.StateAxes({nnx.Param: 0, ...: None})
    >>> sa.map_prefix(('w',), nnx.Param(1)), sa.map_prefix(('n',), nnx.BatchStat(1))
    (0, None)
    """

    def __init__(self, filter_axes: tp.Any, /) -> None:
        if isinstance(filter_axes, Mapping) and _is_state_like(filter_axes):
            pairs = [(_PathIs(p), a) for p, a in _flat_paths(filter_axes)]
        elif isinstance(filter_axes, Mapping):
            pairs = list(filter_axes.items())
        else:
            pairs = list(filter_axes)
        self._filters = tuple(f for f, _ in pairs)
        self._axes = tuple(a for _, a in pairs)
        self._preds = tuple(to_predicate(f) for f in self._filters)

    @property
    def filters(self) -> tuple:
        return self._filters

    @property
    def axes(self) -> tuple:
        return self._axes

    def map_prefix(self, path: tuple, variable: tp.Any) -> tp.Any:
        """The axis of the Variable at ``path`` (the first filter that matches)."""
        for pred, axis in zip(self._preds, self._axes):
            if pred(path, variable):
                return axis
        raise NNXTransformError(
            "/" + "/".join(map(str, path)),
            f"No axis found for this {type(variable).__name__}: no filter of "
            f"{self!r} matches it", "Add a catch-all entry, e.g. `...: None`.")

    def items(self) -> tp.Any:  # type: ignore[override]
        return zip(self._filters, self._axes)

    def __getitem__(self, key: tp.Any) -> tp.Any:
        return self._axes[self._filters.index(key)]

    def __iter__(self) -> tp.Iterator:
        return iter(self._filters)

    def __len__(self) -> int:
        return len(self._filters)

    def __repr__(self) -> str:
        return f"StateAxes({dict(self.items())})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, StateAxes) and self._filters == other._filters
                and self._axes == other._axes)

    def __hash__(self) -> int:
        return hash((self._filters, self._axes))


to_predicate = filterlib.to_predicate  # Flax's rule: a string is WithTag, as everywhere


def _is_state_like(m: Mapping) -> bool:
    from flaxen.nnx.statelib import State

    return isinstance(m, State)


def _flat_paths(m: tp.Any, path: tuple = ()) -> list[tuple[tuple, tp.Any]]:
    if isinstance(m, Mapping):
        out = []
        for k in m:
            out.extend(_flat_paths(m[k], (*path, k)))
        return out
    return [(path, getattr(m, "value", m) if not isinstance(m, (int, type(None))) else m)]


class _PathIs:
    """Filter: the Variable at exactly ``path``."""

    __slots__ = ("path",)

    def __init__(self, path: tuple) -> None:
        self.path = tuple(path)

    def __call__(self, path: tuple, _value: tp.Any) -> bool:
        return tuple(path) == self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _PathIs) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"PathIs({self.path!r})"


class NodePrefix:
    """The prefix of one graph node (or Variable): a value per Variable path, as computed by
    :func:`prefix`. Accepted by today's transforms in every mode."""

    __slots__ = ("by_path", "node_type")

    def __init__(self, by_path: dict[tuple, tp.Any], node_type: type) -> None:
        self.by_path = by_path
        self.node_type = node_type

    def map_prefix(self, path: tuple, variable: tp.Any) -> tp.Any:
        try:
            return self.by_path[tuple(path)]
        except KeyError:
            raise NNXTransformError(
                "/" + "/".join(map(str, path)),
                f"this prefix of a {self.node_type.__name__} has no entry for the "
                f"{type(variable).__name__} at this path (the node changed since nnx.prefix "
                "was called, or the prefix belongs to another node)",
                "Compute the prefix with nnx.prefix on the node you pass (or on "
                "nnx.eval_shape of its constructor).") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodePrefix) and self.by_path == other.by_path

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.by_path.items(), key=repr)))

    def __repr__(self) -> str:
        inner = ", ".join(f"{'/'.join(map(str, p))}: {v!r}" for p, v in self.by_path.items())
        return f"{self.node_type.__name__}Prefix({{{inner}}})"


def as_node_prefix(pre: tp.Any) -> tp.Any:
    """A tree-mode prefix shaped like a graph node (``nnx.prefix(module, ...,
    graph=False)``: the node with values in place of its Variables) as a
    :class:`NodePrefix`; anything else unchanged."""
    if not isinstance(pre, GraphNode):
        return pre
    by_path = {}
    leaves = jax.tree_util.tree_flatten_with_path(pre, is_leaf=lambda x: x is None)[0]
    for kp, value in leaves:
        by_path[tuple(_key(k) for k in kp)] = value
    return NodePrefix(by_path, type(pre))


# -- walking the definitions of a Lift: every occurrence of every leaf ------------------------

def occurrences(defs: tp.Sequence[tp.Any]) -> list[list[tuple[tuple, int]]]:
    """Per root definition, ``(path, leaf position)`` of every leaf reachable from it, shared
    ones at each of their paths. Leaf positions follow ``var_def_paths`` order."""
    pos_of: dict[int, int] = {}
    node_defs: dict[int, NodeDef] = {}
    counter = [0]

    def number(d: tp.Any) -> None:
        t = type(d)
        if t is VariableDef:
            if d.index >= 0:
                pos_of[d.index] = counter[0]
            counter[0] += 1
        elif t is NodeDef:
            if d.index >= 0:
                node_defs[d.index] = d
            for _, s in d.attributes:
                number(s)

    for d in defs:
        number(d)
    # leaf positions of arrays held as bare attributes: recorded by identity of their def
    counter[0] = 0
    bare: dict[int, int] = {}

    def number_bare(d: tp.Any) -> None:
        t = type(d)
        if t is VariableDef:
            if d.index < 0:
                bare[id(d)] = counter[0]
            counter[0] += 1
        elif t is NodeDef:
            for _, s in d.attributes:
                number_bare(s)

    for d in defs:
        number_bare(d)

    def walk(d: tp.Any, path: tuple, out: list, seen: frozenset) -> None:
        t = type(d)
        if t is VariableDef:
            out.append((path, pos_of[d.index] if d.index >= 0 else bare[id(d)]))
        elif t is NodeRef:
            if d.index in pos_of:
                out.append((path, pos_of[d.index]))
            elif d.index in node_defs and d.index not in seen:
                for k, s in node_defs[d.index].attributes:
                    walk(s, (*path, k), out, seen | {d.index})
        elif t is NodeDef:
            inner = seen | {d.index} if d.index >= 0 else seen
            for k, s in d.attributes:
                walk(s, (*path, k), out, inner)

    result = []
    for d in defs:
        out: list = []
        walk(d, (), out, frozenset())
        result.append(out)
    return result


# -- nnx.prefix ---------------------------------------------------------------------------------

def _is_prefix_leaf(x: tp.Any) -> bool:
    return x is None or isinstance(x, (PrefixMapping, NodePrefix, TreeState, GraphNode,
                                       jax.sharding.PartitionSpec, jax.sharding.Sharding))


def prefix(node: tp.Any, filter_map: tp.Mapping[filterlib.Filter, tp.Any] | tp.Callable, /,
           *, graph: bool | None = None) -> tp.Any:
    """Replaces every Variable in ``node`` (a graph node, or a pytree holding some) with a
    prefix value: ``filter_map(path, variable)``, or the value of the first matching filter
    of a ``{filter: value}`` mapping. Other leaves are mapped the same way.

    In tree mode (``graph=False``) the result has the node's own shape (a Module holding
    values where its Variables were), usable with ``jax.vmap`` too; in graph mode each graph
    node becomes a :class:`~flaxen.nnx.extract.TreeState` (its graph definition and a State
    of values; an object shared with an earlier node appears once, at its first path, as
    ``extract.to_tree2`` numbers them). Today's transforms accept both as
    ``in_axes``/``out_axes``/specs for the node.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> nnx.prefix(m, {nnx.PathContains('kernel'): 0, ...: None}, graph=False).kernel
    0
    >>> axes = nnx.prefix(m, {nnx.Param: 0}, graph=True)
    >>> axes.state['bias']
    0
    >>> f = nnx.vmap(lambda m, x: m(x), in_axes=(axes, None))
    >>> stacked = nnx.vmap(lambda r: nnx.Linear(2, 3, rngs=r))(nnx.Rngs(0).split(4))
    >>> f(stacked, jnp.ones((2,))).shape
    (4, 3)
    """
    from flaxen.nnx._modes import resolve_modes

    graph, _ = resolve_modes(graph, None)
    if isinstance(filter_map, Mapping):
        preds = [(to_predicate(f), v) for f, v in filter_map.items()]
        filters = list(filter_map.keys())

        def prefix_fn(path: tuple, leaf: tp.Any) -> tp.Any:
            for pred, value in preds:
                if pred(path, leaf):
                    return value
            raise NNXTransformError(
                "/" + "/".join(map(str, path)),
                f"No filter matched leaf at path {path!r} (a {type(leaf).__name__}); filters: "
                f"{filters}", "Add a catch-all entry, e.g. `...: None`.")
    else:
        prefix_fn = filter_map

    def node_prefix(outer: tuple, x: tp.Any) -> NodePrefix:
        lift = _lift.Lift((x,), {})
        if lift.flat is None:
            return NodePrefix({}, type(x))
        objs = lift.leaf_objs
        by_path = {path: prefix_fn((*outer, *path), objs[pos])
                   for path, pos in occurrences(lift.flat.defs)[0]}
        return NodePrefix(by_path, type(x))

    if graph:
        # each node as a TreeState holding its Variables, then every leaf (the Variables
        # inside the states too) mapped by its path with the TreeState's own key dropped
        trees = to_tree2(node, prefix_fn=prefix_fn)

        def one(kp: tp.Any, x: tp.Any) -> tp.Any:
            return prefix_fn(tuple(k for k in map(_key, kp) if k != "__state__"), x)

        return jax.tree_util.tree_map_with_path(
            one, trees, is_leaf=lambda x: isinstance(x, Variable))

    def one_tree(kp: tp.Any, x: tp.Any) -> tp.Any:
        outer = tuple(_key(k) for k in kp)
        if isinstance(x, GraphNode):  # a graph node that is not a pytree
            return node_prefix(outer, x)
        return prefix_fn(outer, x)

    return jax.tree_util.tree_map_with_path(
        one_tree, node, is_leaf=lambda x: isinstance(x, Variable))


def _key(k: tp.Any) -> tp.Any:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return k


# -- resolution ---------------------------------------------------------------------------------

def _label(path: tuple) -> str:
    """``args[0].a`` style label of an argument path (``(('args'|'kwargs'), i, ...)``)."""
    out = ""
    for k in path:
        out += f"[{k!r}]" if not isinstance(k, str) or not k.isidentifier() else f".{k}"
    return out.lstrip(".")


def _broadcast(prefix_tree: tp.Any, treedef: tp.Any, what: str, fn_name: str) -> list:
    """One prefix value per leaf of ``treedef`` (JAX's prefix broadcasting)."""
    n = treedef.num_leaves
    full = jax.tree_util.tree_unflatten(treedef, list(range(n)))
    out: list = [None] * n
    try:
        pairs = _prefix_pairs(prefix_tree, full)
    except ValueError as e:
        raise NNXTransformError(
            "", f"nnx.{fn_name}: `{what}` is not a prefix of the arguments: {e}",
            f"Give `{what}` one entry per positional argument (a tuple), or a single "
            "value for all of them.") from None
    for value, sub in pairs:
        value = as_node_prefix(value)
        for i in jax.tree_util.tree_leaves(sub):
            out[i] = value
    return out


def _prefix_pairs(prefix_tree: tp.Any, full: tp.Any) -> list[tuple[tp.Any, tp.Any]]:
    if _is_prefix_leaf(prefix_tree) or jax.tree_util.treedef_is_leaf(
            jax.tree_util.tree_structure(prefix_tree, is_leaf=_is_prefix_leaf)):
        return [(prefix_tree, full)]
    if isinstance(prefix_tree, list):
        prefix_tree = tuple(prefix_tree)
    if isinstance(full, list) and isinstance(prefix_tree, tuple):
        full = tuple(full)
    p_def: tp.Any  # jaxlib's PyTreeDef is untyped here
    f_def: tp.Any
    p_children, p_def = jax.tree_util.tree_flatten(
        prefix_tree, is_leaf=lambda x: x is not prefix_tree)
    f_children, f_def = jax.tree_util.tree_flatten(full, is_leaf=lambda x: x is not full)
    if p_def != f_def:
        raise ValueError(f"expected a structure like {f_def}, got {p_def}")
    out = []
    for p, f in zip(p_children, f_children):
        out.extend(_prefix_pairs(p, f))
    return out


def _resolve_node(pre: tp.Any, path: tuple, var: tp.Any) -> tp.Any:
    if isinstance(pre, (PrefixMapping, NodePrefix, TreeState)) and hasattr(pre, "map_prefix"):
        return pre.map_prefix(path, var)
    return pre


def _arg_paths(treedef: tp.Any) -> list[tuple]:
    """Readable ``('args', i, ...)`` / ``('kwargs', name, ...)`` path of each leaf."""
    n = treedef.num_leaves
    labels = jax.tree_util.tree_unflatten(treedef, list(range(n)))
    out: list = [()] * n
    for kp, i in jax.tree_util.tree_flatten_with_path(labels)[0]:
        parts = tuple(_key(k) for k in kp)
        if parts:
            parts = ("args" if parts[0] == 0 else "kwargs", *parts[1:])
        out[i] = parts
    return out


def _aliasing_error(fn_name: str, what: str, var: tp.Any, seen: list) -> NNXTransformError:
    lines = "\n".join(f"  {type(var).__name__} at {where}: {value!r}" for where, value in seen)
    return NNXTransformError(
        "", f"Inconsistent aliasing detected. The following nodes have different prefixes "
        f"(`{what}` of nnx.{fn_name}; the same {type(var).__name__} is reached at each):\n"
        f"{lines}\n", "Give every occurrence of a shared Variable the same prefix value.")


def resolve_inputs(lift: _lift.Lift, in_prefix: tp.Any, kw_prefix: tp.Any, *, fn_name: str,
                   what: str = "in_axes") -> tuple[list, list, list]:
    """``(value_prefix, leaf_prefix, node_prefix)``: one prefix value per State leaf of
    ``lift``, one per plain argument leaf (``None`` where a graph node sits) and the prefix
    of each graph-node argument."""
    args_def, kwargs_def = lift.treedef.children()
    if isinstance(in_prefix, list):
        in_prefix = tuple(in_prefix)
    per_pos = _broadcast(in_prefix, args_def, what, fn_name)
    per_pos += _broadcast(kw_prefix, kwargs_def, what, fn_name) if kwargs_def.num_leaves else []
    leaf_prefix = list(per_pos)
    for p in lift.node_pos:
        leaf_prefix[p] = None
    for pre in leaf_prefix:
        if isinstance(pre, (PrefixMapping, NodePrefix, TreeState)):
            raise NNXTransformError(
                "", f"nnx.{fn_name}: `{what}` holds a {type(pre).__name__} for an argument "
                "that is not a graph node", "Use a plain value for arrays.")
    node_prefix = [per_pos[p] for p in lift.node_pos]
    flat = lift.flat
    if flat is None:
        return [], leaf_prefix, node_prefix
    objs = lift.leaf_objs
    arg_paths = _arg_paths(lift.treedef)
    value_prefix: list = [_UNSET] * len(objs)
    seen: dict[int, list] = {}
    for p, occ in zip(lift.node_pos, occurrences(flat.defs)):
        pre = per_pos[p]
        for path, pos in occ:
            value = _resolve_node(pre, path, objs[pos])
            where = _label((*arg_paths[p], *path))
            seen.setdefault(pos, []).append((where, value))
            if value_prefix[pos] is _UNSET:
                value_prefix[pos] = value
            elif not _same(value_prefix[pos], value):
                raise _aliasing_error(fn_name, what, objs[pos], seen[pos])
    return value_prefix, leaf_prefix, node_prefix


def resolve_outputs(defs: tp.Sequence[tp.Any], n_inputs: int, in_prefixes: tp.Sequence[tp.Any],
                    out_prefixes: tp.Sequence[tp.Any], objs: tp.Sequence[tp.Any], *,
                    fn_name: str, labels: tp.Sequence[tuple]) -> list:
    """One prefix value per leaf of an output walk whose first ``n_inputs`` roots are the
    input nodes (prefixed by ``in_prefixes``) and the rest output nodes (``out_prefixes``)."""
    value_prefix: list = [_UNSET] * len(objs)
    seen: dict[int, list] = {}
    prefixes = (*in_prefixes, *out_prefixes)
    for root, occ in enumerate(occurrences(defs)):
        pre = prefixes[root]
        what = "in_axes" if root < n_inputs else "out_axes"
        for path, pos in occ:
            value = _resolve_node(pre, path, objs[pos])
            seen.setdefault(pos, []).append((_label((*labels[root], *path)), value))
            if value_prefix[pos] is _UNSET:
                value_prefix[pos] = value
            elif not _same(value_prefix[pos], value):
                raise _aliasing_error(fn_name, what, objs[pos], seen[pos])
    return [None if v is _UNSET else v for v in value_prefix]


def _same(a: tp.Any, b: tp.Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - uncomparable prefix values
        return a is b


_UNSET = object()


def node_prefixes(out_prefix: tp.Any, treedef: tp.Any, node_pos: tp.Sequence[int], what: str,
                  fn_name: str) -> tuple[list, list]:
    """Broadcast ``out_prefix`` over an output: ``(per node, per position)`` values."""
    per_pos = _broadcast(out_prefix, treedef, what, fn_name)
    return [per_pos[p] for p in node_pos], per_pos
