"""The target side of a weight import: a flaxen tree cut into layers ("units").

A target is Linen variables (``{'params': ..., 'batch_stats': ...}``), an NNX ``State`` or
an NNX ``Module``. :func:`read_target` lists its leaves in creation order (Linen dicts keep
it; for an NNX Module the attribute assignment order is used) and groups them into units:
one per layer, named by the layer's path, each with a *kind* read off its leaf names
(``kernel`` of rank 2 is a dense layer, ``mean``/``var`` statistics a batch norm,
``ii``..``ho`` sub-layers an LSTM cell, ...). :func:`write_target` puts converted arrays back
into a tree of the target's own type.

The target may be abstract (``jax.eval_shape(model.init, ...)``): only shapes and dtypes
are read. Nothing here knows about torch: the torch side lives in ``_torch_units`` and the per-kind
layout rules in ``_rules``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

# Sub-layer names that make up one composite layer.
LSTM_GATES = ("ii", "if", "ig", "io", "hi", "hf", "hg", "ho")
GRU_GATES = ("ir", "iz", "in", "hr", "hz", "hn")
SIMPLE_GATES = ("i", "h")
MHA_PARTS = ("query", "key", "value", "out")


@dataclasses.dataclass
class TargetLeaf:
    """One array of the target: where it lives, what shape and dtype it wants."""

    path: tuple  # full path in the target tree (Linen: starts with the collection)
    rel: str  # path inside its unit, '/'-joined, e.g. 'kernel' or 'query/bias'
    shape: tuple[int, ...]
    dtype: Any
    collection: str  # 'params', 'batch_stats', ...


@dataclasses.dataclass
class TargetUnit:
    """One layer of the target: a module path, a kind, and its leaves by relative name."""

    path: tuple  # module path without the collection, e.g. ('Block_0', 'Dense_1')
    kind: str
    leaves: dict[str, TargetLeaf]
    module_type: str | None = None  # NNX only: the layer class name

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path) or "<root>"


@dataclasses.dataclass
class Target:
    """A read target: its flavour, the original object, and its units in order."""

    flavour: str  # 'linen', 'nnx_state' or 'nnx_module'
    original: Any
    units: list[TargetUnit]
    values: dict[tuple, Any]  # full leaf path -> original leaf (kept where nothing writes)


def _is_mapping(x: Any) -> bool:
    return isinstance(x, Mapping)


def _walk_linen(tree: Mapping, prefix: tuple, out: list) -> None:
    for k, v in tree.items():
        if _is_mapping(v):
            _walk_linen(v, prefix + (k,), out)
        else:
            out.append((prefix + (k,), v))


def _nnx_order(module: Any) -> dict[tuple, int]:
    """Attribute-assignment order of every object path reachable from an NNX Module."""
    from flaxen.nnx.module import Module
    from flaxen.nnx.variablelib import Variable

    order: dict[tuple, int] = {}
    seen: set[int] = set()

    def visit(obj: Any, path: tuple) -> None:
        if id(obj) in seen:
            return
        if isinstance(obj, Variable):
            order.setdefault(path, len(order))
            return
        seen.add(id(obj))
        items: list[tuple[Any, Any]]
        if isinstance(obj, Module):
            items = list(vars(obj).items())
        elif isinstance(obj, (list, tuple)):
            items = list(enumerate(obj))
        elif isinstance(obj, dict):
            items = list(obj.items())
        else:
            return
        for k, v in items:
            if isinstance(k, str) and k.startswith("_"):
                continue
            visit(v, path + (k,))

    visit(module, ())
    return order


def _nnx_types(module: Any) -> dict[tuple, str]:
    from flaxen.nnx.graph import iter_graph
    from flaxen.nnx.module import Module

    return {tuple(p): type(n).__name__ for p, n in iter_graph(module) if isinstance(n, Module)}


def _leaf_kind_collection(value: Any) -> tuple[Any, str]:
    """(array-like value, collection) of an NNX VariableState / Variable leaf."""
    from flaxen.nnx.variablelib import BatchStat, Param

    vtype = getattr(value, "type", None) or type(value)
    inner = getattr(value, "value", value)
    if isinstance(vtype, type) and issubclass(vtype, BatchStat):
        return inner, "batch_stats"
    if isinstance(vtype, type) and issubclass(vtype, Param):
        return inner, "params"
    return inner, getattr(vtype, "__name__", "other").lower()


def read_target(target: Any) -> Target:
    """Lists ``target``'s leaves and groups them into units (see the module docstring)."""
    flat: list[tuple[tuple, tuple, Any, str]] = []  # (full path, module path+name, value, coll)
    module_types: dict[tuple, str] = {}
    if _is_nnx_module(target):
        from flaxen.nnx.graph import state
        from flaxen.nnx.statelib import _flat_mapping

        flavour = "nnx_module"
        fs = _flat_mapping(state(target))  # type: ignore[union-attr] # one State: no filters
        order = _nnx_order(target)
        paths = sorted(fs, key=lambda p: order.get(tuple(p), len(order)))
        for p in paths:
            value, coll = _leaf_kind_collection(fs[p])
            flat.append((tuple(p), tuple(p), value, coll))
        module_types = _nnx_types(target)
    elif _is_nnx_state(target):
        from flaxen.nnx.statelib import _flat_mapping

        flavour = "nnx_state"
        for p, leaf in _flat_mapping(target).items():
            value, coll = _leaf_kind_collection(leaf)
            flat.append((tuple(p), tuple(p), value, coll))
    elif _is_mapping(target):
        flavour = "linen"
        colls = list(target)
        colls.sort(key=lambda c: c != "params")  # params first: they fix the layer order
        for coll in colls:
            sub = target[coll]
            if not _is_mapping(sub):
                raise TypeError(
                    f"convert: target[{coll!r}] is a {type(sub).__name__}, not a mapping of "
                    "variables. Pass the variables returned by module.init(...), e.g. "
                    "{'params': {...}, 'batch_stats': {...}}.")
            leaves: list = []
            _walk_linen(sub, (), leaves)
            for p, v in leaves:
                flat.append(((coll,) + p, p, v, coll))
    else:
        raise TypeError(
            f"convert: the target must be Linen variables (a dict such as "
            f"module.init(...) returns), an nnx.State or an nnx.Module; got "
            f"{type(target).__name__}. Pass one of those.")
    values = {full: v for full, _, v, _ in flat}
    return Target(flavour, target, _group(flat, module_types), values)


def _is_nnx_module(x: Any) -> bool:
    mod = sys.modules.get("flaxen.nnx.module")  # not imported: x cannot be an NNX Module
    return mod is not None and isinstance(x, mod.Module)


def _is_nnx_state(x: Any) -> bool:
    mod = sys.modules.get("flaxen.nnx.statelib")
    return mod is not None and isinstance(x, mod.State)


class _Node:
    __slots__ = ("children", "leaves")

    def __init__(self) -> None:
        self.children: dict[Any, _Node] = {}
        self.leaves: dict[Any, TargetLeaf] = {}


def _group(flat: list, module_types: dict[tuple, str]) -> list[TargetUnit]:
    root = _Node()
    for full, p, value, coll in flat:
        node = root
        for k in p[:-1]:
            node = node.children.setdefault(k, _Node())
        shape = tuple(np.shape(value))
        dtype = getattr(value, "dtype", None) or np.asarray(value).dtype
        node.leaves[p[-1]] = TargetLeaf(full, str(p[-1]), shape, np.dtype(dtype), coll)
    units: list[TargetUnit] = []
    _cut(root, (), units, module_types)
    return units


def _collect(node: _Node, rel: str, out: dict[str, TargetLeaf]) -> None:
    for k, leaf in node.leaves.items():
        name = f"{rel}/{k}" if rel else str(k)
        out[name] = dataclasses.replace(leaf, rel=name)
    for k, child in node.children.items():
        _collect(child, f"{rel}/{k}" if rel else str(k), out)


def _cut(node: _Node, path: tuple, units: list[TargetUnit], types: dict[tuple, str]) -> None:
    names = set(map(str, node.children))
    for kind, parts in (("lstm", LSTM_GATES), ("gru", GRU_GATES), ("rnn", SIMPLE_GATES)):
        if names == set(parts) and not node.leaves:
            leaves: dict[str, TargetLeaf] = {}
            _collect(node, "", leaves)
            units.append(TargetUnit(path, kind, leaves, types.get(path)))
            return
    rest = dict(node.children)
    if set(MHA_PARTS) <= names:
        leaves = {}
        for part in MHA_PARTS:
            _collect(rest.pop(part), part, leaves)
        units.append(TargetUnit(path, "mha", leaves, types.get(path)))
    if node.leaves:
        leaves = {str(k): leaf for k, leaf in node.leaves.items()}
        units.append(TargetUnit(path, _kind_of(leaves), leaves, types.get(path)))
    for k, child in rest.items():
        _cut(child, path + (k,), units, types)


def _kind_of(leaves: dict[str, TargetLeaf]) -> str:
    names = set(leaves)
    if "embedding" in names:
        return "embed"
    if "negative_slope" in names:
        return "prelu"
    if "kernel" in names:
        return "dense" if len(leaves["kernel"].shape) == 2 else "conv"
    if {"mean", "var"} <= names:
        return "bn"
    if names and names <= {"scale", "bias"}:
        return "norm"
    return "raw"


def write_target(target: Target, filled: dict[tuple, Any]) -> Any:
    """A tree of the target's own type with ``filled`` (full path -> array) written in.

    Linen: a new dict of dicts. NNX State: a new State. NNX Module: the module is
    updated in place and returned.
    """
    if target.flavour == "linen":
        out: dict = {}
        for full, old in target.values.items():
            node = out
            for k in full[:-1]:
                node = node.setdefault(k, {})
            node[full[-1]] = filled.get(full, old)
        return out
    from flaxen.nnx._snapshots import SNAPSHOT_TYPES
    from flaxen.nnx.graph import state, update
    from flaxen.nnx.statelib import State, _flat_mapping
    from flaxen.nnx.variablelib import Variable

    is_state = target.flavour == "nnx_state"
    src = _flat_mapping(target.original if is_state else state(target.original))  # type: ignore[union-attr]
    items = []
    for full, leaf in src.items():
        new = filled.get(tuple(full), _MISSING)
        if new is _MISSING:
            items.append((full, leaf))
            continue
        if isinstance(leaf, Variable) or type(leaf) in SNAPSHOT_TYPES:
            new = leaf.replace(new)  # today's Variables, or a 0.8.3 face's snapshot
        items.append((full, new))
    new_state = State.from_flat_path(items)
    if is_state:
        return new_state
    update(target.original, new_state)
    return target.original


_MISSING = object()
