"""``nnx.extract``: the helpers Flax 0.12.8 keeps in its ``extract`` module, by theme:

- graph nodes <-> pytrees: ``to_tree`` / ``from_tree`` with ``NodeStates`` (from
  :mod:`flaxen.nnx._tree_convert`), ``to_tree2`` / ``from_tree2`` with ``TreeState`` and
  ``Opaque`` (from :mod:`flaxen.nnx._tree_state`);
- prefixes: ``prefix`` (from :mod:`flaxen.nnx.transforms._axes`), ``broadcast_prefix*``,
  ``extract`` / ``insert``, the tuple helpers (from :mod:`flaxen.nnx._extract_prefix`),
  ``check_prefix`` and the aliasing checks;
- Variable updates across a transform: ``snapshot``, ``get_updates``, ``apply_updates``,
  ``check_no_aliases``... (from :mod:`flaxen.nnx._extract_updates`);
- argument containers: ``labeled``, ``OrderedDict``, ``filter_kwargs``,
  ``treemap_copy_args`` (from :mod:`flaxen.nnx._extract_args`).

>>> from flaxen import nnx
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> isinstance(nnx.prefix(m, {...: 0}, graph=True), nnx.extract.TreeState)
True
>>> nnx.extract.check_prefix((0, None), 'in_axes', 'vmap', graph=True, graph_updates=False)
[0, None]
"""

from __future__ import annotations

# abc, dataclasses, functools, inspect, namedtuple, filterlib, graphlib, reprlib,
# variablelib, typing (flaxen's), Pytree, Missing, PathParts: what Flax's module imports for
# its own use, reachable from here as user code sometimes reaches for them
import abc  # noqa: F401
import dataclasses  # noqa: F401
import functools  # noqa: F401
import inspect  # noqa: F401
import typing as tp
from collections import namedtuple  # noqa: F401

import jax

from flaxen import struct
from flaxen import typing as typing  # noqa: F401
from flaxen.errors import NNXTransformError
from flaxen.nnx import filterlib, graphlib, reprlib, variablelib  # noqa: F401
from flaxen.nnx._extract_args import OrderedDict, filter_kwargs, labeled, treemap_copy_args
from flaxen.nnx._extract_prefix import (
    ExtractIndex,
    Mask,
    broadcast_prefix,
    broadcast_prefix2,
    broadcast_prefix_map,
    extract,
    find,
    insert,
    mask_at,
    replace_at,
    slice_at,
)
from flaxen.nnx._extract_updates import (
    KeepFn,
    Updates,
    apply_updates,
    check_no_aliases,
    check_same_variables,
    copy_var_structure,
    get_updates,
    snapshot,
    to_masked,
    update_carry_variables,
    variable_changed,
)
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._tree_convert import (
    NodeStates,
    check_consistent_aliasing,
    clear_non_graph_nodes,
    default_split_fn,
    from_tree,
    is_tree_node,
    merge_tree_node,
    to_tree,
)
from flaxen.nnx._tree_state import (
    Opaque,
    TreeState,
    check_consistent_aliasing2,
    from_tree2,
    to_tree2,
)
from flaxen.nnx.graphlib import GraphDef
from flaxen.nnx.pytreelib import Pytree  # noqa: F401
from flaxen.nnx.statelib import FlatState, State
from flaxen.nnx.transforms import _common
from flaxen.nnx.transforms._axes import NodePrefix, prefix
from flaxen.nnx.transforms._common import PrefixMapping
from flaxen.nnx.variablelib import Variable
from flaxen.typing import Missing, PathParts  # noqa: F401

__all__ = [
    "A", "B", "ExtractIndex", "F", "GraphDefState", "Index", "KeepFn", "KeyPath", "Leaf",
    "Mask", "NodePrefix", "NodeStates", "Opaque", "OrderedDict", "Prefix", "PrefixMapping",
    "S", "TreeState", "Updates", "apply_updates", "broadcast_prefix", "broadcast_prefix2",
    "broadcast_prefix_map", "check_consistent_aliasing", "check_consistent_aliasing2",
    "check_no_aliases", "check_prefix", "check_same_variables", "clear_non_graph_nodes",
    "copy_var_structure", "default_split_fn", "extract", "filter_kwargs", "find",
    "from_tree", "from_tree2", "get_updates", "insert", "is_tree_node", "labeled", "mask_at",
    "merge_tree_node", "prefix", "replace_at", "slice_at", "snapshot", "to_masked",
    "to_tree", "to_tree2", "treemap_copy_args", "update_carry_variables", "variable_changed",
]

A = tp.TypeVar("A")
B = tp.TypeVar("B")
F = tp.TypeVar("F", bound=tp.Callable)
Index = int
KeyPath = tuple[tp.Hashable, ...]
Prefix = tp.Any
Leaf = tp.Any


class GraphDefState(struct.PyTreeNode):
    """A graph definition (static) with one State (the pytree child).

    >>> import jax
    >>> from flaxen import nnx
    >>> gds = GraphDefState(*nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
    >>> len(jax.tree.leaves(gds)), sorted(gds.replace(state=nnx.State({})).state)
    (2, [])
    """

    graphdef: GraphDef[tp.Any] = struct.field(pytree_node=False)
    state: State = struct.field(pytree_node=True)


S = tp.TypeVar("S", bound=State | FlatState | list[tp.Any])


def check_prefix(prefix: tp.Any, prefix_name: str, fn_name: str, graph: bool,
                 graph_updates: bool, none_leaf: bool = True) -> list[tp.Any]:
    """Checks a transform's prefix argument (``in_axes``, ``out_axes``...) and returns its
    distinct leaves (None among them unless ``none_leaf`` is False). Refused: Variables,
    graph nodes in graph mode, ``PrefixMapping`` objects (``StateAxes``, ``DiffState``...)
    unless ``graph`` and ``graph_updates``, and a :class:`TreeState` unless ``graph`` and
    not ``graph_updates`` (the mode where Flax matches it against the arguments' own).

    >>> check_prefix({'a': 0, 'b': (None, 1)}, 'in_axes', 'vmap', True, True)
    [0, None, 1]
    >>> check_prefix((0, None), 'in_axes', 'vmap', True, True, none_leaf=False)
    [0]
    """
    def keep(x: tp.Any) -> bool:
        return isinstance(x, (TreeState, GraphNode, Variable, PrefixMapping))

    # a TreeState is judged whole, not by the leaves of its state
    _common.check_prefix(
        jax.tree_util.tree_map(lambda x: None if isinstance(x, TreeState) else x, prefix,
                               is_leaf=keep),
        prefix_name, fn_name, graph, graph_updates)

    def no_tree_state(path: tuple, leaf: tp.Any) -> None:
        if isinstance(leaf, TreeState) and (not graph or graph_updates):
            fix = (f"Pass graph=True and graph_updates=True to nnx.{fn_name} and a "
                   "StateAxes / nnx.prefix(..., graph=False) prefix, or use "
                   f"nnx.compat.{fn_name}" if graph_updates else
                   f"Pass graph=True to nnx.{fn_name}, or build the prefix with "
                   "nnx.prefix(..., graph=False)")
            raise NNXTransformError(
                jax.tree_util.keystr(path) or "<root>",
                f"Found a `TreeState` in `{prefix_name}` for nnx.{fn_name}: TreeState objects "
                "are only allowed as prefixes when `graph=True` and `graph_updates=False`",
                fix + ".")

    jax.tree_util.tree_map_with_path(
        no_tree_state, prefix, is_leaf=lambda x: x is None or isinstance(x, TreeState))
    distinct: list[tp.Any] = []
    for leaf in jax.tree_util.tree_leaves(prefix, is_leaf=lambda x: x is None and none_leaf):
        if not any(leaf is d or _same(leaf, d) for d in distinct):
            distinct.append(leaf)
    return distinct


def _same(a: tp.Any, b: tp.Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - leaves that cannot be compared count as distinct
        return False
