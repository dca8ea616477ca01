"""``nnx.extract``: the helpers Flax keeps in its ``extract`` module: ``prefix`` and the
``TreeState`` that graph-mode prefixes are (from :mod:`flaxen.nnx.transforms._axes`), and
``to_tree`` / ``from_tree`` with their ``NodeStates`` (from :mod:`flaxen.nnx._tree_convert`).

>>> from flaxen import nnx
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> isinstance(nnx.prefix(m, {...: 0}, graph=True), nnx.extract.TreeState)
True
"""

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
from flaxen.nnx.transforms._axes import NodePrefix, TreeState, prefix

__all__ = [
    "NodePrefix", "NodeStates", "TreeState", "check_consistent_aliasing",
    "clear_non_graph_nodes", "default_split_fn", "from_tree", "is_tree_node",
    "merge_tree_node", "prefix", "to_tree",
]
