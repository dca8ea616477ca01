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
from flaxen.nnx import reprlib as _reprlib

Key = tp.Hashable


class PytreeType:
    """The ``type`` of a :class:`NodeDef` that stands for a pytree container."""


class ArrayLeaf:
    """The ``type`` of a :class:`VariableDef` that stands for an array held directly."""


@dataclasses.dataclass(frozen=True, slots=True)
class Static:
    """A static attribute value."""

    value: tp.Any

    def get(self) -> tp.Any:
        return thaw(self.value)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeRef:
    """A second (or later) occurrence of the shared object numbered ``index``."""

    type: type
    index: int


@dataclasses.dataclass(frozen=True, slots=True)
class VariableDef:
    """A Variable of class ``type`` (or a bare array: ``type is ArrayLeaf``)."""

    type: type
    index: int
    metadata: tuple  # ((name, frozen value), ...) sorted by name

    def thawed_metadata(self) -> dict:
        return {k: thaw(v) for k, v in self.metadata} if self.metadata else {}


@dataclasses.dataclass(frozen=True, slots=True)
class NodeDef:
    """A graph node or pytree container and the definitions of its attributes."""

    type: type
    index: int
    attributes: tuple  # ((key, Def), ...)
    metadata: tp.Any = None  # the one-level treedef of a pytree container

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


Node = tp.TypeVar("Node")


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
                nodes.append(_FlatDef("NodeDef", (
                    ("type", name), ("index", index), ("outer_index", None),
                    ("num_attributes", len(d.attributes)), ("metadata", meta))))
                for key, sub in d.attributes:
                    if type(sub) in (NodeDef, VariableDef, NodeRef):
                        attributes.append((key, _FlatDef("NodeAttr", ())))
                        walk(sub)
                    else:
                        attributes.append((key, _FlatDef("Static", (("value", sub.get()),),
                                                         same_line=True)))
            elif t is VariableDef:
                leaves += 1
                nodes.append(_FlatDef("VariableDef", (
                    ("type", d.type.__name__), ("index", index), ("outer_index", None),
                    ("metadata", _reprlib.PrettyMapping(d.thawed_metadata())))))
            elif t is NodeRef:
                nodes.append(_FlatDef("NodeRef", (("index", d.index),)))
            else:
                nodes.append(_FlatDef("Static", (("value", d.get()),), same_line=True))

        for d in self.defs:
            walk(d)
        return (f"GraphDef(nodes={nodes!r}, attributes={attributes!r}, "
                f"num_leaves={leaves})")


class _FlatDef(_reprlib.Representable):
    """One entry of a GraphDef's printed flat layout (``NodeDef(type='Linear', ...)``)."""

    __slots__ = ("name", "fields", "same_line")

    def __init__(self, name: str, fields: tuple, same_line: bool = False) -> None:
        self.name, self.fields, self.same_line = name, fields, same_line

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=self.name, same_line=self.same_line)
        for key, value in self.fields:
            # Static values print as Python prints them (a dtype class as <class ...>)
            yield _reprlib.Attr(key, repr(value), use_raw_value=True) if self.same_line \
                else _reprlib.Attr(key, value)


# A GraphDef is static pytree metadata: no children, itself as the aux data.
jax.tree_util.register_pytree_node(GraphDef, lambda g: ((), g), lambda g, _: g)
