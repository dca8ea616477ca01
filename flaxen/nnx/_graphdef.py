"""Typed graph definitions: the static, hashable half of a split object graph.

A definition describes one walk of an object graph (see :mod:`flaxen.nnx._graph_engine`):

- :class:`NodeDef`: a graph node (``Module``, ``Rngs``, ...) or a pytree container (list,
  dict, tuple, ``struct.dataclass``, ``State``...; ``type`` is :class:`PytreeType` and
  ``metadata`` the container's one-level treedef). ``attributes`` pairs each attribute name
  (or container key) with the definition of its value, in walk order.
- :class:`VariableDef`: a Variable (``type`` its class, ``metadata`` frozen) or a bare array
  (``type`` is :class:`ArrayLeaf`); its value is one leaf of the State.
- :class:`NodeRef`: an object already seen earlier in the same walk (shared reference).
- :class:`Static`: any other value, kept as is (unhashable ones are held by identity).

``index`` numbers the shared objects (graph nodes and Variables) of a walk in order; pytree
containers and bare arrays are values, not shared, and have index -1. The classes are frozen
and slotted; :class:`GraphDef` wraps the root definitions, caches their hash and is a pytree
with no leaves, so it passes through ``jax.jit`` as static metadata.

>>> from flaxen import nnx
>>> gd, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
>>> gd.nodedef.type.__name__, [k for k, _ in gd.nodedef.attributes][:2]
('Linear', ['bias', 'dot_general'])
>>> [type(d).__name__ for d in var_defs(gd.defs)]
['VariableDef', 'VariableDef']
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax

from flaxen._hashing import hashable as freeze  # noqa: F401 - used by _graph_engine
from flaxen._hashing import unwrap as thaw
from flaxen.nnx import _treescope
from flaxen.nnx import reprlib as _reprlib

Key = tp.Hashable
A = tp.TypeVar("A")
Node = tp.TypeVar("Node")


class PytreeType:
    """The ``type`` of a :class:`NodeDef` that stands for a pytree container."""


class ArrayLeaf:
    """The ``type`` of a :class:`VariableDef` that stands for an array held directly."""


@dataclasses.dataclass(frozen=True, slots=True)
class Static(tp.Generic[A]):
    """A static attribute value (hashable: held frozen, see :func:`get`)."""

    value: A

    def get(self) -> tp.Any:
        return thaw(self.value)


class _SameOuterIndex:
    """Flax's ``with_*_outer_index`` methods of one definition. flaxen keeps the outer
    indices of a walk on its :class:`GraphDef` (``outer_index``), not on each definition, so
    a definition is its own copy with any outer index."""

    __slots__ = ()

    def with_no_outer_index(self: A) -> A:
        return self

    def with_same_outer_index(self: A) -> A:
        return self

    def with_matching_outer_index(self: A, other: tp.Any) -> A:
        del other
        return self


@dataclasses.dataclass(frozen=True)
class NodeRef(_SameOuterIndex, tp.Generic[Node], _reprlib.Representable):
    """A second (or later) occurrence of the shared object numbered ``index``."""

    type: type
    index: int

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=type(self))
        yield _reprlib.Attr("index", self.index)


@dataclasses.dataclass(frozen=True)
class VariableDef(_SameOuterIndex, _reprlib.Representable, tp.Generic[Node]):
    """A Variable of class ``type`` (or a bare array: ``type is ArrayLeaf``)."""

    type: type
    index: int
    metadata: tuple  # ((name, frozen value), ...) sorted by name: compared and hashed
    # the Variable's own key order when it is not sorted (None when it is): a Variable built
    # from this definition lists its metadata as the original did; not part of equality,
    # as two Variables with the same metadata define the same structure
    order: tuple | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def outer_index(self) -> int | None:
        """Always None here: a walk's outer indices live on its :class:`GraphDef`."""
        return None

    @property
    def array_refdef(self) -> None:
        """Always None: a ``jax.Ref`` value is a leaf of the Variable, not a definition."""
        return None

    def thawed_metadata(self) -> dict:
        if not self.metadata:
            return {}
        if self.order is None:
            return {k: thaw(v) for k, v in self.metadata}
        frozen = dict(self.metadata)
        return {k: thaw(frozen[k]) for k in self.order}

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=type(self))
        yield _reprlib.Attr("type", self.type.__name__)
        yield _reprlib.Attr("index", self.index)
        yield _reprlib.Attr("outer_index", None)
        yield _reprlib.Attr("metadata", _reprlib.PrettyMapping(_metadata_shown(self)))

    def __treescope_repr__(self, path: str | None, subtree_renderer: tp.Any) -> tp.Any:
        return _treescope.render_object_constructor(
            type(self), {"type": self.type, "index": self.index, "outer_index": None,
                         "metadata": _metadata_shown(self)}, path, subtree_renderer)


_REQUIRED_ORDER = ("hijax", "ref", "eager_sharding")


def _metadata_shown(d: VariableDef) -> dict:
    """A VariableDef's metadata in the order Flax prints a Variable's: the user's entries,
    then the three every Variable carries (flaxen keeps them sorted, to hash them once)."""
    meta = d.thawed_metadata()
    shown = {k: v for k, v in meta.items() if k not in _REQUIRED_ORDER}
    shown.update((k, meta[k]) for k in _REQUIRED_ORDER if k in meta)
    return shown


@dataclasses.dataclass(frozen=True, slots=True)
class NodeDef(_SameOuterIndex, tp.Generic[Node], _reprlib.Representable):
    """A graph node or pytree container and the definitions of its attributes."""

    type: type
    index: int
    attributes: tuple  # ((key, Def), ...)
    metadata: tp.Any = None  # the one-level treedef of a pytree container

    @property
    def outer_index(self) -> int | None:
        """Always None here: a walk's outer indices live on its :class:`GraphDef`."""
        return None

    @property
    def num_attributes(self) -> int:
        return len(self.attributes)

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=type(self))
        yield _reprlib.Attr("type", "GenericPytree" if self.type is PytreeType
                            else self.type.__name__)
        yield _reprlib.Attr("index", None if self.index == -1 else self.index)
        yield _reprlib.Attr("outer_index", None)
        yield _reprlib.Attr("num_attributes", len(self.attributes))
        yield _reprlib.Attr("metadata", self.metadata)

    @property
    def subgraphs(self) -> dict[Key, NodeDef | NodeRef]:
        return {k: d for k, d in self.attributes if isinstance(d, (NodeDef, NodeRef))}

    @property
    def static_fields(self) -> dict[Key, tp.Any]:
        return {k: d.get() for k, d in self.attributes if type(d) is Static}

    @property
    def variables(self) -> dict[Key, VariableDef | NodeRef]:
        return {k: d for k, d in self.attributes if type(d) is VariableDef}


Def = NodeDef | VariableDef | NodeRef | Static


@dataclasses.dataclass(frozen=True, repr=False)
class ArrayRefDef(_reprlib.Representable):
    """Flax's definition of a ``jax.Ref`` met in a walk (``index`` among the walk's shared
    objects). flaxen's walk keeps a Ref as the value of its Variable, so it makes none of
    these itself; the class is here for code that builds or inspects them."""

    index: int
    outer_index: int | None

    def with_no_outer_index(self) -> ArrayRefDef:
        return ArrayRefDef(self.index, None)

    def with_same_outer_index(self) -> ArrayRefDef:
        return ArrayRefDef(self.index, self.index)

    def with_matching_outer_index(self, other: tp.Any) -> ArrayRefDef:
        return ArrayRefDef(self.index, other.outer_index)

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=type(self))
        yield _reprlib.Attr("index", self.index)
        yield _reprlib.Attr("outer_index", self.outer_index)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeAttr:
    """In :attr:`GraphDef.attributes`: the attribute holds a node, Variable or Ref."""


@dataclasses.dataclass(frozen=True, slots=True)
class LeafAttr:
    """In :attr:`GraphDef.attributes`: the attribute holds a bare array (a State leaf)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Repeated:
    """The leaf of a Ref met a second time in one walk (its value is the first one's)."""


NODE_ATTR = NodeAttr()
LEAF_ATTR = LeafAttr()
REPEATED = Repeated()
jax.tree_util.register_static(Repeated)


@dataclasses.dataclass(frozen=True, slots=True)
class NoUpdate:
    """The value an inner split gives a Ref-backed Variable that copies an outer one: the
    Ref was updated in place, so the outer Variable keeps its own (a pytree with no leaves)."""


NO_UPDATE = NoUpdate()
jax.tree_util.register_static(NoUpdate)


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class ArrayRefOutput(_reprlib.Representable):
    """The value an inner split gives a Ref-backed Variable created inside the transform:
    the array read out of its Ref; the outer merge puts it in a fresh ``jax.Ref``."""

    value: tp.Any

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=type(self))
        yield _reprlib.Attr("value", self.value)


jax.tree_util.register_dataclass(ArrayRefOutput, data_fields=["value"], meta_fields=[])


def var_defs(defs: tp.Iterable[Def]) -> list[VariableDef]:
    """Every :class:`VariableDef` under ``defs``, in walk (State leaf) order."""
    return [d for _, d in var_def_paths(defs)]


def var_def_paths(defs: tp.Iterable[Def], root_paths: tp.Sequence[tuple] | None = None
                  ) -> list[tuple[tuple, VariableDef]]:
    """``(path, VariableDef)`` for every Variable under ``defs``, in walk order: the one
    walker every consumer of definitions (split, merge, codegen, transforms) shares."""
    out: list = []

    def walk(d: tp.Any, path: tuple) -> None:  # a Def; dispatched on its exact type
        t = type(d)
        if t is VariableDef:
            out.append((path, d))
        elif t is NodeDef:
            for k, s in d.attributes:
                walk(s, (*path, k))

    for i, d in enumerate(defs):
        walk(d, () if root_paths is None else root_paths[i])
    return out


def count_defs(defs: tp.Iterable[Def]) -> int:
    """How many definitions (of any kind) the tree under ``defs`` holds."""
    n = 0
    stack = list(defs)
    while stack:
        d = stack.pop()
        n += 1
        if type(d) is NodeDef:
            stack.extend(s for _, s in d.attributes)
    return n



class GraphDef(tp.Generic[Node]):
    """The static part of a split graph: hashable, equal for graphs of equal structure.

    Holds the root definitions (one per split root) plus per-process caches (the hash and
    the generated split/merge functions, see :mod:`flaxen.nnx._codegen`).
    """

    __slots__ = ("defs", "_hash", "_uses", "_states_fn", "_merge_fn", "__weakref__")

    def __init__(self, defs: tuple) -> None:
        self.defs = defs
        self._hash = hash(defs)
        self._uses = 0
        self._states_fn: tp.Any = None
        self._merge_fn: tp.Any = None

    def __getstate__(self) -> tuple:
        return (self.defs,)  # generated code is per process and cannot be pickled

    def __setstate__(self, state: tuple) -> None:
        self.__init__(state[0])  # type: ignore[misc]  # re-runs this class's own __init__

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, GraphDef) and self._hash == other._hash and self.defs == other.defs
        )

    @property
    def attributes(self) -> list[tuple[tp.Any, tp.Any]]:
        """Flax's flat attribute list: every attribute of every node, in walk order, as
        ``(key, NODE_ATTR)`` (a node, Variable or shared object), ``(key, LEAF_ATTR)`` (a bare
        array) or ``(key, Static(value))``."""
        out: list[tuple[tp.Any, tp.Any]] = []

        def walk(d: tp.Any) -> None:  # a Def; a sub-node's attributes follow its entry
            for key, sub in d.attributes:
                t = type(sub)
                if t is Static:
                    out.append((key, Static(sub.get())))
                elif t is VariableDef and sub.type is ArrayLeaf:
                    out.append((key, LEAF_ATTR))
                else:
                    out.append((key, NODE_ATTR))
                    if t is NodeDef:
                        walk(sub)

        for d in self.defs:
            if type(d) is NodeDef:
                walk(d)
        return out

    @property
    def num_leaves(self) -> int:
        """How many leaves a State of this graph holds (Variables and bare arrays)."""
        return len(var_defs(self.defs))

    @property
    def nodedef(self) -> Def:
        """The definition of the (first) root."""
        return self.defs[0]

    @property
    def type(self) -> type:
        d = self.defs[0]
        return d.type if isinstance(d, (NodeDef, VariableDef, NodeRef)) else type(d.get())

    def __repr__(self) -> str:
        # Flax 0.12.8's flat layout: every node in walk order, then every attribute of every
        # node (sub-nodes as NodeAttr(), the rest as Static(value=...)), then the leaf count
        nodes, attributes, leaves = _flat_layout(self.defs)
        return (f"GraphDef(nodes={nodes!r}, attributes={attributes!r}, "
                f"num_leaves={leaves})")

    def __treescope_repr__(self, path: str | None, subtree_renderer: tp.Any) -> tp.Any:
        # the same flat layout, foldable, as treescope shows Flax's GraphDef dataclass
        nodes, attributes, leaves = _flat_layout(self.defs)
        return _treescope.render_object_constructor(
            type(self), {"nodes": nodes, "attributes": attributes, "num_leaves": leaves},
            path, subtree_renderer)


def _flat_layout(defs: tp.Iterable[Def]) -> tuple[list, list, int]:
    """``(nodes, attributes, num_leaves)`` of Flax's flat GraphDef layout, each entry a
    :class:`_FlatDef` that prints (and renders in treescope) as Flax's would."""
    nodes: list[_FlatDef] = []
    attributes: list[tuple[tp.Any, tp.Any]] = []
    leaves = 0

    def walk(d: tp.Any) -> None:  # a Def, dispatched on its exact type
        nonlocal leaves
        t = type(d)
        index = None if getattr(d, "index", -1) == -1 else d.index
        if t is NodeDef:
            name = "GenericPytree" if d.type is PytreeType else d.type.__name__
            meta = d.type if d.type is not PytreeType else d.metadata
            nodes.append(_FlatDef(NodeDef, (
                ("type", name), ("index", index), ("outer_index", None),
                ("num_attributes", len(d.attributes)), ("metadata", meta)), d.type))
            for key, sub in d.attributes:
                if type(sub) in (NodeDef, VariableDef, NodeRef):
                    attributes.append((key, _FlatDef(NodeAttr, ())))
                    walk(sub)
                else:
                    attributes.append((key, _FlatDef(Static, (("value", sub.get()),),
                                                      same_line=True)))
        elif t is VariableDef:
            leaves += 1
            meta = _metadata_shown(d)
            nodes.append(_FlatDef(VariableDef, (
                ("type", d.type.__name__), ("index", index), ("outer_index", None),
                ("metadata", _reprlib.PrettyMapping(meta))), d.type, meta))
        elif t is NodeRef:
            nodes.append(_FlatDef(NodeRef, (("index", d.index),)))
        else:
            nodes.append(_FlatDef(Static, (("value", d.get()),), same_line=True))

    for d in defs:
        walk(d)
    return nodes, attributes, leaves


class _FlatDef(_reprlib.Representable):
    """One entry of a GraphDef's flat layout (``NodeDef(type='Linear', ...)``): printed with
    type names as strings, rendered in treescope with the classes themselves (as Flax's)."""

    __slots__ = ("cls", "fields", "type", "metadata", "same_line")

    def __init__(self, cls: type, fields: tuple, type_: type | None = None,
                 metadata: tp.Any = None, same_line: bool = False) -> None:
        self.cls, self.fields, self.same_line = cls, fields, same_line
        self.type, self.metadata = type_, metadata

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=self.cls.__name__, same_line=self.same_line)
        for key, value in self.fields:
            # Static values print as Python prints them (a dtype class as <class ...>)
            yield _reprlib.Attr(key, repr(value), use_raw_value=True) if self.same_line \
                else _reprlib.Attr(key, value)

    def __treescope_repr__(self, path: str | None, subtree_renderer: tp.Any) -> tp.Any:
        shown = dict(self.fields)
        if "type" in shown:
            shown["type"] = PytreeType if self.type is PytreeType else self.type
        if self.metadata is not None:  # a Variable's metadata as the plain dict it holds
            shown["metadata"] = self.metadata
        return _treescope.render_object_constructor(
            self.cls, shown, path, subtree_renderer, roundtrippable=self.same_line)


# A GraphDef is static pytree metadata: no children, itself as the aux data.
jax.tree_util.register_pytree_node(GraphDef, lambda g: ((), g), lambda g, _: g)
