"""The node protocol: what a node's children are, in one order, and how to rebuild it.

Every walker of an object graph (split/merge/state/update in the graph engine, ``iter_graph``,
``recursive_map``, the Variable tools, the RNG walkers, the summary) asks this file for the
children of a node, so they all see the same keys in the same order:

- a graph node (``Module``, ``Rngs``, any :class:`~flaxen.nnx._graph_node.GraphNode`): its
  attributes sorted by name (``nnx.List`` items by integer index, as integers);
- a type registered with :func:`register_graph_node_type` (Flax's name): what its
  ``flatten`` returns, in that order; such nodes are shared by identity, like Modules;
- a type registered with :func:`register_pytree_node_type`, and list / tuple / dict /
  ``State`` / ``None`` (registered here): what its ``flatten`` returns (sequence order,
  sorted keys);
- any other JAX pytree container: JAX's own one-level flatten order.

Each node type has one implementation (:class:`GraphNodeImpl` or :class:`PytreeNodeImpl`):
``flatten`` (children + auxiliary data), ``set_key`` / ``pop_key`` (set or remove a child),
and to rebuild it ``create_empty`` + ``init`` (graph nodes, which may hold themselves) or
``unflatten`` (pytrees). :func:`get_node_impl` finds it.

>>> from flaxen import nnx
>>> class Pair:
...     def __init__(self):
...         self.items = {}
>>> register_graph_node_type(
...     Pair, flatten=lambda p: (sorted(p.items.items()), None),
...     set_key=lambda p, k, v: p.items.__setitem__(k, v),
...     pop_key=lambda p, k: p.items.pop(k), create_empty=lambda _: Pair(),
...     clear=lambda p: p.items.clear(), init=lambda p, kv: p.items.update(kv))
>>> p = Pair(); p.items['w'] = nnx.Param(1.0)
>>> [k for k, _ in children(p)]
['w']
>>> graphdef, state = nnx.split(p)
>>> nnx.merge(graphdef, state).items['w'] is p.items['w']
True
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax

from flaxen.nnx import _trace
from flaxen.nnx._graph_node import GraphNode, new_node
from flaxen.nnx.statelib import State, _sort_keys
from flaxen.nnx.variablelib import Variable, is_array_ref
from flaxen.typing import HashableMapping

__all__ = [
    "DataElem", "GRAPH_REGISTRY", "GenericPytree", "GraphNodeImpl", "IndexesPytreeDef",
    "NodeImplBase", "PYTREE_NODE_IMPL", "PYTREE_REGISTRY", "PytreeNodeImpl", "StaticElem",
    "children", "get_node_impl", "get_node_impl_for_type", "is_node_module", "is_node_type",
    "is_pytree_node", "jax_to_nnx_path", "pop_child", "register_graph_node_type",
    "register_pytree_node_type", "set_child",
]

Node = tp.TypeVar("Node")
Leaf = tp.TypeVar("Leaf")
AuxData = tp.TypeVar("AuxData")
Key = tp.Hashable
_EPOCH = _trace._EPOCH

try:  # every type JAX flattens (containers, dataclasses, registered classes)
    from jax._src.tree_util import _registry as _JAX_REGISTRY
except ImportError:  # pragma: no cover - a JAX without the private registry
    _JAX_REGISTRY = {}


@dataclasses.dataclass(frozen=True, slots=True)
class DataElem:
    """A child that ``flatten`` marks as data: a State leaf even when it is a plain number."""

    value: tp.Any


@dataclasses.dataclass(frozen=True, slots=True)
class StaticElem:
    """A child that ``flatten`` marks as static: kept in the definition, never a leaf."""

    value: tp.Any


@dataclasses.dataclass(frozen=True, slots=True)
class NodeImplBase(tp.Generic[Node, Leaf, AuxData]):
    """What every node implementation has: its ``type`` and ``flatten(node) -> (children,
    aux_data)``, children being ``(key, value)`` pairs in the node's one order."""

    type: type
    flatten: tp.Callable[[tp.Any], tuple[tp.Sequence[tuple[Key, tp.Any]], tp.Any]]

    def node_dict(self, node: tp.Any) -> dict[Key, tp.Any]:
        """``{key: child}`` in flatten order (Data/StaticElem markers unwrapped)."""
        items, _ = self.flatten(node)
        return {k: v.value if isinstance(v, (DataElem, StaticElem)) else v for k, v in items}


@dataclasses.dataclass(frozen=True, slots=True)
class GraphNodeImpl(NodeImplBase[Node, Leaf, AuxData]):
    """A node shared by identity and rebuilt in two steps (so it may hold itself):
    ``create_empty(aux_data)`` then ``init(node, children)``; ``clear`` empties one that is
    reused, ``set_key`` / ``pop_key`` change one child in place."""

    set_key: tp.Callable[[tp.Any, Key, tp.Any], None]
    pop_key: tp.Callable[[tp.Any, Key], tp.Any]
    create_empty: tp.Callable[[tp.Any], tp.Any]
    clear: tp.Callable[[tp.Any], None]
    init: tp.Callable[[tp.Any, tp.Iterable[tuple[Key, tp.Any]]], None]


@dataclasses.dataclass(frozen=True, slots=True)
class PytreeNodeImpl(NodeImplBase[Node, Leaf, AuxData]):
    """A value-like container rebuilt by ``unflatten(children, aux_data)``; ``set_key`` /
    ``pop_key`` are None when it cannot change in place (a tuple)."""

    unflatten: tp.Callable[[tp.Sequence[tuple[Key, tp.Any]], tp.Any], tp.Any]
    set_key: tp.Callable[[tp.Any, Key, tp.Any], None] | None
    pop_key: tp.Callable[[tp.Any, Key], tp.Any] | None


GRAPH_REGISTRY: dict[type, tp.Any] = {}
PYTREE_REGISTRY: dict[type, PytreeNodeImpl[tp.Any, tp.Any, tp.Any]] = {}
# types registered by users: the graph engine checks this one dict on its walk
USER_TYPES: dict[type, tp.Any] = {}


def _check_new(typ: type, fn: str) -> None:
    if not isinstance(typ, type):
        raise TypeError(f"{fn}: expected a class as the first argument, got {typ!r}.")
    if typ in GRAPH_REGISTRY or typ in PYTREE_REGISTRY or issubclass(typ, (GraphNode,
                                                                           Variable)):
        raise ValueError(
            f"Node type {typ} is already registered: {fn} takes each type once, and "
            "Modules, Pytrees and Variables are nodes already. Register another class, or "
            "use the existing registration.")


def register_graph_node_type(
    type: type,  # noqa: A002 - Flax's parameter name
    flatten: tp.Callable[[tp.Any], tuple[tp.Sequence[tuple[Key, tp.Any]], tp.Any]],
    set_key: tp.Callable[[tp.Any, Key, tp.Any], None],
    pop_key: tp.Callable[[tp.Any, Key], tp.Any],
    create_empty: tp.Callable[[tp.Any], tp.Any],
    clear: tp.Callable[[tp.Any], None],
    init: tp.Callable[[tp.Any, tp.Iterable[tuple[Key, tp.Any]]], None],
) -> None:
    """Makes instances of ``type`` graph nodes: shared by identity and walked by split,
    merge, state, update, pop and iter_graph through these functions (see the module
    docstring for an example). ``flatten``'s auxiliary data must be hashable."""
    _check_new(type, "register_graph_node_type")
    impl: GraphNodeImpl[tp.Any, tp.Any, tp.Any] = GraphNodeImpl(
        type=type, flatten=flatten, set_key=set_key, pop_key=pop_key,
        create_empty=create_empty, clear=clear, init=init)
    GRAPH_REGISTRY[type] = impl
    USER_TYPES[type] = impl
    _EPOCH[0] += 1  # cached walks made before may have treated these objects as leaves


def register_pytree_node_type(
    type: type,  # noqa: A002 - Flax's parameter name
    flatten: tp.Callable[[tp.Any], tuple[tp.Sequence[tuple[Key, tp.Any]], tp.Any]],
    unflatten: tp.Callable[[tp.Sequence[tuple[Key, tp.Any]], tp.Any], tp.Any],
    *,
    set_key: tp.Callable[[tp.Any, Key, tp.Any], None] | None = None,
    pop_key: tp.Callable[[tp.Any, Key], tp.Any] | None = None,
) -> None:
    """Makes instances of ``type`` value-like containers of the graph walks (rebuilt by
    ``unflatten(children, aux_data)``, never shared).

    >>> from flaxen import nnx
    >>> class Box:
    ...     def __init__(self, v): self.v = v
    >>> register_pytree_node_type(Box, lambda b: ([('v', b.v)], None),
    ...                           lambda kv, _: Box(dict(kv)['v']))
    >>> _, state = nnx.split([Box(nnx.Param(2.0))])
    >>> float(state[0]['v'][...])
    2.0
    """
    _check_new(type, "register_pytree_node_type")
    impl: PytreeNodeImpl[tp.Any, tp.Any, tp.Any] = PytreeNodeImpl(
        type=type, flatten=flatten, unflatten=unflatten, set_key=set_key, pop_key=pop_key)
    PYTREE_REGISTRY[type] = impl
    if type not in _JAX_REGISTRY:  # a JAX pytree keeps JAX's walk in the engine
        USER_TYPES[type] = impl
    _EPOCH[0] += 1


# -- graph nodes (GraphNode subclasses) -------------------------------------------------------

def _int_key_order(k: str) -> tuple:
    return (0, int(k), "") if k.isdigit() else (1, 0, k)


def _attr_name(node: tp.Any, key: Key) -> tp.Any:
    return str(key) if type(node)._graph_int_keys else key


def _gn_flatten(node: tp.Any) -> tuple[list[tuple[Key, tp.Any]], tp.Any]:
    d = node.__dict__
    status = getattr(node, "_pytree__status", None)
    if type(node)._graph_int_keys:
        # nnx.List: items '0', '1', ... by number, as integers; other attributes by name
        return [(int(k) if k.isdigit() else k, d[k])
                for k in sorted(d, key=_int_key_order)], status
    return [(k, d[k]) for k in _sort_keys(d)], status


def _gn_set_key(node: tp.Any, key: Key, value: tp.Any) -> None:
    node.__dict__[_attr_name(node, key)] = value
    _EPOCH[0] += 1


def _gn_pop_key(node: tp.Any, key: Key) -> tp.Any:
    name = _attr_name(node, key)
    value = node.__dict__[name]
    if hasattr(type(node), "_pytree__status"):
        delattr(node, name)  # a Pytree keeps its data/static bookkeeping in step
    else:
        del node.__dict__[name]
    _EPOCH[0] += 1
    return value


def _gn_clear(node: tp.Any) -> None:
    node.__dict__.clear()
    _EPOCH[0] += 1


def _gn_init(node: tp.Any, items: tp.Iterable[tuple[Key, tp.Any]]) -> None:
    d = node.__dict__
    for k, v in items:
        d[_attr_name(node, k)] = v
    _EPOCH[0] += 1


def _graph_node_impl(typ: type) -> GraphNodeImpl[tp.Any, tp.Any, tp.Any]:
    impl = GRAPH_REGISTRY.get(typ)
    if impl is None:

        def create_empty(status: tp.Any) -> tp.Any:
            obj = new_node(typ)
            if status is not None:
                object.__setattr__(obj, "_pytree__status", status)
            return obj

        impl = GRAPH_REGISTRY[typ] = GraphNodeImpl(
            type=typ, flatten=_gn_flatten, set_key=_gn_set_key, pop_key=_gn_pop_key,
            create_empty=create_empty, clear=_gn_clear, init=_gn_init)
    return impl


# -- pytrees ----------------------------------------------------------------------------------

class GenericPytree:
    """The ``type`` of :data:`PYTREE_NODE_IMPL`: any JAX pytree with no registration here."""


class IndexesPytreeDef(tp.NamedTuple):
    """The auxiliary data of a generic pytree: each key's position in JAX's order, and the
    one-level treedef that rebuilds it."""

    key_index: HashableMapping
    treedef: tp.Any


def _key_path_to_key(key: tp.Any) -> Key:
    if isinstance(key, jax.tree_util.SequenceKey):
        return key.idx
    if isinstance(key, (jax.tree_util.DictKey, jax.tree_util.FlattenedIndexKey)):
        return key.key
    if isinstance(key, jax.tree_util.GetAttrKey):
        return key.name
    return str(key)


def jax_to_nnx_path(jax_path: tuple, /) -> tuple:
    """A JAX key path as NNX path parts (``DictKey('a')`` -> ``'a'``, ``SequenceKey(0)``
    -> ``0``, ``GetAttrKey('w')`` -> ``'w'``).

    >>> import jax
    >>> [jax_to_nnx_path(p) for p, _ in jax.tree_util.tree_flatten_with_path({'a': [1]})[0]]
    [('a', 0)]
    """
    return tuple(_key_path_to_key(k) for k in jax_path)


def _generic_flatten(x: tp.Any) -> tuple[list[tuple[Key, tp.Any]], IndexesPytreeDef]:
    with_path, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    items = [(_key_path_to_key(kp[0]), v) for kp, v in with_path]
    index = HashableMapping({k: i for i, (k, _) in enumerate(items)})
    return items, IndexesPytreeDef(index, treedef)


def _generic_unflatten(items: tp.Sequence[tuple[Key, tp.Any]], aux: IndexesPytreeDef
                       ) -> tp.Any:
    ordered = sorted(items, key=lambda kv: aux.key_index[kv[0]])
    return aux.treedef.unflatten([v for _, v in ordered])


PYTREE_NODE_IMPL: PytreeNodeImpl[tp.Any, tp.Any, tp.Any] = PytreeNodeImpl(
    type=GenericPytree, flatten=_generic_flatten, unflatten=_generic_unflatten,
    set_key=None, pop_key=None)


def _list_set_key(x: list, key: int, value: tp.Any) -> None:
    if key == len(x):  # a new last item (structure updates grow lists this way)
        x.append(value)
    else:
        x[key] = value


def _mapping_set_key(x: tp.Any, key: Key, value: tp.Any) -> None:
    x[key] = value


def _mapping_pop_key(x: tp.Any, key: Key) -> tp.Any:
    return x.pop(key)


def _list_pop_key(x: list, key: int) -> tp.Any:
    return x.pop(key)


def _builtin(typ: type, flatten: tp.Callable, unflatten: tp.Callable,
             set_key: tp.Callable | None = None, pop_key: tp.Callable | None = None) -> None:
    PYTREE_REGISTRY[typ] = PytreeNodeImpl(type=typ, flatten=flatten, unflatten=unflatten,
                                          set_key=set_key, pop_key=pop_key)


# the orders below are JAX's own (sequence order, sorted keys), which the engine's walk uses
_builtin(list, lambda x: (list(enumerate(x)), None), lambda kv, _: [v for _, v in kv],
         _list_set_key, _list_pop_key)
_builtin(tuple, lambda x: (list(enumerate(x)), None), lambda kv, _: tuple(v for _, v in kv))
_builtin(dict, lambda x: ([(k, x[k]) for k in _sort_keys(x)], None),
         lambda kv, _: dict(kv), _mapping_set_key, _mapping_pop_key)
_builtin(State, lambda x: ([(k, x._mapping[k]) for k in _sort_keys(x._mapping)], None),
         lambda kv, _: State(dict(kv)), _mapping_set_key, _mapping_pop_key)
_builtin(type(None), lambda x: ([], None), lambda kv, _: None)


# -- lookups ----------------------------------------------------------------------------------

def get_node_impl(x: tp.Any) -> tp.Any:
    """The implementation walking ``x`` (:class:`GraphNodeImpl` or :class:`PytreeNodeImpl`),
    or None for a leaf (a Variable, an array, a scalar...).

    >>> from flaxen import nnx
    >>> type(get_node_impl(nnx.Dict())).__name__, get_node_impl([1]).type, get_node_impl(1)
    ('GraphNodeImpl', <class 'list'>, None)
    """
    t = type(x)
    if isinstance(x, GraphNode):
        return _graph_node_impl(t)
    impl = USER_TYPES.get(t) or PYTREE_REGISTRY.get(t)
    if impl is not None:
        return impl
    if isinstance(x, Variable) or t in GRAPH_REGISTRY:
        return GRAPH_REGISTRY.get(t)
    if t in _JAX_REGISTRY or isinstance(x, tuple):
        return PYTREE_NODE_IMPL
    return None


def get_node_impl_for_type(x: type) -> tp.Any:
    """The implementation registered for the class ``x`` (``GenericPytree`` gives
    :data:`PYTREE_NODE_IMPL`), or None."""
    if x is GenericPytree:
        return PYTREE_NODE_IMPL
    if x in PYTREE_REGISTRY:
        return PYTREE_REGISTRY[x]
    if isinstance(x, type) and issubclass(x, GraphNode):
        return _graph_node_impl(x)
    return GRAPH_REGISTRY.get(x)


def is_node_type(x: type) -> bool:
    """True for classes whose instances are walked as nodes (graph nodes, registered
    pytrees, ``GenericPytree``)."""
    return (x in GRAPH_REGISTRY or x in PYTREE_REGISTRY or x is GenericPytree
            or (isinstance(x, type) and issubclass(x, GraphNode)))


def is_node_module(x: tp.Any) -> bool:
    """True for graph nodes: objects shared by identity (Modules, Rngs, registered graph
    node types), not pytree containers or Variables."""
    return isinstance(x, GraphNode) or type(x) in USER_TYPES and type(x) in GRAPH_REGISTRY


def is_pytree_node(x: tp.Any, *, check_graph_registry: bool = True) -> bool:
    """True for what JAX flattens as a container (any registered pytree type or tuple);
    graph nodes count only with ``check_graph_registry=False``, Variables never."""
    t = type(x)
    if check_graph_registry and (isinstance(x, GraphNode) or t in GRAPH_REGISTRY):
        return False
    if isinstance(x, Variable):
        return False
    return t in _JAX_REGISTRY or isinstance(x, tuple)


def is_graph_object(x: tp.Any) -> bool:
    """Objects every walk visits once (shared by identity): graph nodes and Variables."""
    return isinstance(x, (GraphNode, Variable)) or (
        type(x) in USER_TYPES and type(x) in GRAPH_REGISTRY)


# -- the protocol the walkers share -------------------------------------------------------------

def _is_jax_leaf(x: tp.Any) -> bool:
    return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(x))


def children(x: tp.Any) -> list[tuple[Key, tp.Any]] | None:
    """``[(key, child), ...]`` of a node in its one order, or None for a leaf (Variables,
    arrays, Refs, scalars, other objects)."""
    if isinstance(x, GraphNode):
        return _gn_flatten(x)[0]
    t = type(x)
    impl = USER_TYPES.get(t)
    if impl is None:
        if isinstance(x, Variable) or is_array_ref(x):
            return None
        impl = PYTREE_REGISTRY.get(t)
        if impl is None:
            if t not in _JAX_REGISTRY and not isinstance(x, tuple) or _is_jax_leaf(x):
                return None
            return _generic_flatten(x)[0]
    return [(k, v.value if isinstance(v, (DataElem, StaticElem)) else v)
            for k, v in impl.flatten(x)[0]]


def set_child(x: tp.Any, key: Key, value: tp.Any) -> bool:
    """Sets one child of ``x`` in place; False when ``x`` cannot change (a tuple, a frozen
    pytree)."""
    impl = get_node_impl(x)
    setter = getattr(impl, "set_key", None)
    if setter is None:
        return False
    setter(x, key, value)
    return True


def pop_child(x: tp.Any, key: Key) -> bool:
    """Removes one child of ``x`` in place; False when ``x`` cannot change."""
    impl = get_node_impl(x)
    popper = getattr(impl, "pop_key", None)
    if popper is None:
        return False
    popper(x, key)
    return True


def rebuild(x: tp.Any, items: tp.Sequence[tuple[Key, tp.Any]]) -> tp.Any:
    """A new node of ``x``'s kind holding ``items`` (the same keys :func:`children` gave):
    an empty graph node filled with them, or the pytree unflattened."""
    impl = get_node_impl(x)
    _, aux = impl.flatten(x)
    if isinstance(impl, GraphNodeImpl):
        new = impl.create_empty(aux)
        impl.init(new, items)
        return new
    return impl.unflatten(items, aux)
