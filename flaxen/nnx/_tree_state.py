"""``TreeState`` and ``to_tree2`` / ``from_tree2``: graph nodes as pytrees, Flax 0.12.8's
second tree conversion (the one graph-mode prefixes are made of).

:func:`to_tree2` replaces every graph node and Variable of a pytree with a
:class:`TreeState`: its graph definition (static for JAX) and its nested State (the pytree
child, holding the Variables themselves), all numbered in one split context so a node met
again becomes a reference with an empty state. :func:`from_tree2` builds the objects back
(one merge context, the states' Variables used as they are). With ``prefix`` (e.g. the
``in_axes`` of a transform) each node's Variables are checked for consistent aliasing by
:func:`check_consistent_aliasing2`.

``nnx.prefix(node, ..., graph=True)`` returns the same shape with prefix values in place of
the Variables and the prefix function kept in ``prefix_fn`` (an :class:`Opaque`, which
compares equal to any other so two TreeStates of one structure have equal tree
definitions); flaxen's transforms read it through :meth:`TreeState.map_prefix`.

>>> from flaxen import nnx
>>> from flaxen.nnx import extract
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> a, b = extract.to_tree2((m, m))
>>> sorted(a.state), len(b.state)
(['bias', 'kernel'], 0)
>>> m1, m2 = extract.from_tree2((a, b))
>>> m1 is m2, m1.kernel is m.kernel
(True, True)
"""

from __future__ import annotations

import dataclasses
import functools
import typing as tp
from collections.abc import Mapping

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx import _contexts, _graphdef
from flaxen.nnx import _graph_ops as _ops
from flaxen.nnx._extract_prefix import broadcast_prefix
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graph_walk import _key
from flaxen.nnx._graphdef import ArrayLeaf, NodeDef, VariableDef
from flaxen.nnx._tree_convert import aliasing_error
from flaxen.nnx.graphlib import GraphDef, iter_graph
from flaxen.nnx.variablelib import Variable
from flaxen.typing import Missing

__all__ = ["Opaque", "TreeState", "check_consistent_aliasing2", "from_tree2", "to_tree2"]

A = tp.TypeVar("A")
_NOT_FOUND = object()


@dataclasses.dataclass(frozen=True, slots=True)
class Opaque(tp.Generic[A]):
    """A value hidden from comparisons: every ``Opaque`` equals every other of its class
    and hashes alike, so holding one in static pytree data never changes a tree
    definition (a :class:`TreeState` keeps its prefix function in one).

    >>> Opaque(len) == Opaque(print), hash(Opaque(1)) == hash(Opaque(2)), Opaque(3).value
    (True, True, 3)
    """

    value: A

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return 0


@functools.partial(jax.tree_util.register_dataclass, data_fields=["__state__"],
                   meta_fields=["graphdef", "prefix_fn"])
@dataclasses.dataclass(frozen=True, slots=True)
class TreeState:
    """One graph node (or Variable) as a pytree: ``graphdef`` (static) and ``__state__``
    (the nested State, the only child), as :func:`to_tree2` makes it. From
    ``nnx.prefix(..., graph=True)`` the state holds prefix values instead of Variables and
    ``prefix_fn`` the function that computed them.

    Flaxen's transforms take it as the prefix of a graph node in every mode and read one
    value per Variable with :meth:`map_prefix` (Flax matches it leaf by leaf against the
    arguments' own TreeStates, which needs ``graph_updates=False``).

    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> ts = nnx.prefix(m, {nnx.PathContains('kernel'): 0, ...: None}, graph=True)
    >>> ts.state['kernel'], ts.map_prefix(('bias',), m.bias), ts.replace(graphdef=None).graphdef
    (0, None, None)
    """

    graphdef: tp.Any
    __state__: tp.Any
    prefix_fn: Opaque[tp.Callable[[tuple, tp.Any], tp.Any] | None] = Opaque(None)

    @property
    def state(self) -> tp.Any:
        return self.__state__

    def replace(self, **kwargs: tp.Any) -> TreeState:
        """A copy with the given fields replaced (``dataclasses.replace``)."""
        return dataclasses.replace(self, **kwargs)

    def map_prefix(self, path: tuple, variable: tp.Any, /) -> tp.Any:
        """The prefix value of the Variable at ``path`` (relative to this node): its entry in
        the state, else ``prefix_fn(path, variable)`` (a Variable shared with an earlier
        node has no entry of its own)."""
        found = _lookup(self.__state__, tuple(path))
        if found is not _NOT_FOUND:
            return found
        fn = self.prefix_fn.value if isinstance(self.prefix_fn, Opaque) else None
        if callable(fn):
            return fn(tuple(path), variable)
        raise NNXTransformError(
            "/" + "/".join(map(str, path)),
            f"this TreeState prefix has no entry for the {type(variable).__name__} at this "
            "path and no prefix_fn to compute one",
            "Build the prefix with nnx.prefix(node, ..., graph=True) on the node you pass.")


def _lookup(state: tp.Any, path: tuple) -> tp.Any:
    cur = state
    for k in path:
        if not isinstance(cur, Mapping) or k not in cur:
            return _NOT_FOUND
        cur = cur[k]
    if isinstance(cur, Mapping) and path:
        return _NOT_FOUND  # a sub-node, not a Variable's entry
    return cur


def _is_node(x: tp.Any) -> bool:
    return isinstance(x, (GraphNode, Variable))


def _nnx_path(keypath: tuple) -> tuple:
    return tuple(_key(k) for k in keypath)


def check_consistent_aliasing2(node: tp.Any, prefix: tp.Any, /, *,
                               base_path: tuple[tp.Any, ...] = (),
                               node_prefixes: dict[int, list[tuple[tuple, tp.Any]]]) -> None:
    """Records ``(base_path + path, prefix)`` for each Variable of ``node`` in
    ``node_prefixes`` (shared between calls) and raises when one Variable has been given
    two different prefixes. A :class:`TreeState` prefix gives each Variable
    ``prefix_fn(path, variable)``.

    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> seen = {}
    >>> check_consistent_aliasing2(m, 0, base_path=(0,), node_prefixes=seen)
    >>> try:
    ...     check_consistent_aliasing2(m, 1, base_path=(1,), node_prefixes=seen)
    ... except ValueError as e:
    ...     print(str(e).splitlines()[1:3])
    ['Node: Param', '  0/bias: 0']
    """
    variables: dict[int, Variable] = {}
    fn: tp.Any = None
    if isinstance(prefix, TreeState):
        fn = prefix.prefix_fn.value if isinstance(prefix.prefix_fn, Opaque) else None
        if not callable(fn):
            raise NNXTransformError(
                "/" + "/".join(map(str, base_path)),
                "a TreeState passed as a prefix (e.g. in in_axes) must come from nnx.prefix() "
                "or hold a callable `(path, variable) -> prefix` in its prefix_fn; this one "
                f"holds a {type(fn).__name__}",
                "Build it with nnx.prefix(node, ..., graph=True), or "
                "tree_state.replace(prefix_fn=extract.Opaque(fn)).")
    for local_path, value in iter_graph(node, graph=True):
        if isinstance(value, Variable):
            variables[id(value)] = value
            p = fn(local_path, value) if fn is not None else prefix
            node_prefixes.setdefault(id(value), []).append(((*base_path, *local_path), p))
    err = aliasing_error(node_prefixes, variables)
    if err is not None:
        raise err


def to_tree2(tree: tp.Any, /, *, prefix: tp.Any = Missing, check_aliasing: bool = True,
             prefix_fn: tp.Callable[[tuple, tp.Any], tp.Any] | None = None) -> tp.Any:
    """``tree`` with each graph node and Variable replaced by a :class:`TreeState` (its
    ``prefix_fn`` set to ``Opaque(prefix_fn)``), all split in one split context so shared
    objects stay shared. With ``prefix`` (a prefix of ``tree``, e.g. ``in_axes``) each
    node is checked by :func:`check_consistent_aliasing2` (unless ``check_aliasing`` is
    False).

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> ts, two = to_tree2((v, 2), prefix=(0, None))
    >>> type(ts).__name__, ts.state is v, two
    ('TreeState', True, 2)
    """
    opaque = Opaque(prefix_fn)
    with _contexts.split_context() as ctx:
        def convert(leaf: tp.Any) -> tp.Any:
            if not _is_node(leaf):
                return leaf
            graphdef, state = ctx.split(leaf)
            return TreeState(graphdef, state, opaque)

        if prefix is Missing or prefix is None:
            return jax.tree_util.tree_map(convert, tree, is_leaf=_is_node)
        prefixes = broadcast_prefix(
            prefix, tree, prefix_is_leaf=lambda x: x is None or isinstance(x, TreeState),
            tree_is_leaf=_is_node)
        treedef: tp.Any
        keyed, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_node)
        seen: dict[int, list[tuple[tuple, tp.Any]]] = {}
        out = []
        for (keypath, leaf), p in zip(keyed, prefixes):
            if _is_node(leaf) and check_aliasing:
                check_consistent_aliasing2(leaf, p, base_path=_nnx_path(keypath),
                                           node_prefixes=seen)
            out.append(convert(leaf))
    return treedef.unflatten(out)


def _raw_leaf_defs(defs: tuple, leaves: list) -> tuple:
    """``defs`` with each Variable definition whose leaf is not a Variable turned into a
    bare-leaf definition (the engine then places the leaf itself)."""
    it = iter(leaves)

    def fix(d: tp.Any) -> tp.Any:
        t = type(d)
        if t is VariableDef:
            return d if isinstance(next(it), Variable) else VariableDef(ArrayLeaf, -1, ())
        if t is NodeDef:
            return NodeDef(d.type, d.index, tuple((k, fix(s)) for k, s in d.attributes),
                           d.metadata)
        return d

    return tuple(fix(d) for d in defs)


def from_tree2(tree: tp.Any, /, recreate_variables: bool = True) -> tp.Any:
    """The inverse of :func:`to_tree2`: each :class:`TreeState` becomes its object again
    (one merge context: references resolve to the object built first). The states'
    Variables are placed as they are; a plain value where the definition has a Variable
    becomes a new Variable of that type and metadata, or stays the plain value with
    ``recreate_variables=False``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> ts = to_tree2(nnx.Dict(w=nnx.Param(jnp.ones(2))))
    >>> pure = ts.replace(__state__=nnx.State({'w': jnp.zeros(2)}))
    >>> type(from_tree2(pure).w).__name__, type(from_tree2(pure, recreate_variables=False).w)
    ('Param', <class 'jaxlib._jax.ArrayImpl'>)
    """
    with _contexts.merge_context() as ctx:
        def convert(x: tp.Any) -> tp.Any:
            if not isinstance(x, TreeState):
                return x
            graphdef = x.graphdef
            if not isinstance(graphdef, _graphdef.GraphDef):
                raise NNXTransformError(
                    "", f"from_tree2: this TreeState has a {type(graphdef).__name__} as its "
                    "graphdef, not a GraphDef", "Pass the output of extract.to_tree2.")
            if recreate_variables or type(graphdef.defs[0]) is _graphdef.NodeRef:
                return ctx.unflatten(graphdef, x.state)
            defs = graphdef.defs
            leaves = ([x.state] if type(defs[0]) is VariableDef
                      else _ops._leaves_from_states(defs, (x.state,), "from_tree2"))
            raw: GraphDef[tp.Any] = GraphDef(
                _raw_leaf_defs(defs, leaves), outer_index=getattr(graphdef, "outer_index", None))
            return ctx.unflatten(raw, leaves)

        return jax.tree_util.tree_map(
            convert, tree, is_leaf=lambda x: isinstance(x, TreeState) or _is_node(x))
