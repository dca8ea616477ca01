"""Readable text for NNX objects, laid out by ``nnx.reprlib`` as Flax 0.12.8 prints them.

Modules and Pytrees open with a ``# Param: 9 (36 B), ...`` comment counting the values their
Variables hold (by kind, shared Variables once; abstract ``ShapeDtypeStruct`` values count
their would-be bytes) and show arrays of more than one element as ``Array(shape=..., dtype=...)``.
Each Variable opens with its own ``# count (bytes)`` comment. This file holds the statistics
and the text helpers the classes' ``__nnx_repr__`` methods use.
``display`` uses treescope when installed and running in a notebook.
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx import _node_protocol as _proto
from flaxen.nnx import _treescope, reprlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx.variablelib import Variable, variable_repr_items
from flaxen.typing import SizeBytes

Stats = dict[type, SizeBytes]


def _indent(text: str, n: int = 2) -> str:
    pad = " " * n
    return text.replace("\n", "\n" + pad)


class _Items(reprlib.Representable):
    """Prints a ready list of ``__nnx_repr__`` items (for the functional helpers below)."""

    __slots__ = ("items",)

    def __init__(self, items: list) -> None:
        self.items = items

    def __nnx_repr__(self) -> tp.Iterator[reprlib.Object | reprlib.Attr]:
        yield from self.items


def variable_repr(type_name: str, value: tp.Any, metadata: dict) -> str:
    """A Variable's text from its parts (metadata at its defaults is left out).

    >>> print(variable_repr("Param", 1.0, {"tag": "w"}))
    Param(
      value=1.0,
      tag='w'
    )
    """
    return repr(_Items(list(variable_repr_items(type_name, value, metadata))))


def state_repr(state: tp.Any) -> str:
    return repr(state)


def _stats_kind(var: tp.Any) -> type:
    # every RNG Variable (key or count, of either NNX face) is summed as one RngState kind
    for cls in type(var).__mro__:
        if cls.__name__ == "RngState":
            return cls
    return type(var)


def _children(x: tp.Any) -> list:
    """The values one level below a graph node or pytree container (none for a leaf)."""
    # the node protocol's one order, as every other walker of the graph
    return [v for _, v in _proto.children(x) or ()]


def collect_stats(node: tp.Any, memo: dict[int, Stats]) -> Stats:
    """Adds ``node``'s Variable sizes by kind to ``memo`` (keyed by ``id``), and every
    sub-node's on the way; an object already in ``memo`` is not counted again, so a shared
    Variable or module counts once, under the first parent that reaches it.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> stats = collect_stats([nnx.Param(jnp.ones(3)), nnx.Param(jnp.ones(2))], {})
    >>> {k.__name__: str(v) for k, v in stats.items()}
    {'Param': '5 (20 B)'}
    """
    stats: Stats = {}
    memo[id(node)] = stats
    if isinstance(node, Variable):
        raw = node.get_raw_value() if hasattr(node, "get_raw_value") else node.raw_value
        size = SizeBytes.from_any(raw)
        if size:
            stats[_stats_kind(node)] = size
        return stats
    for child in _children(node):
        if id(child) in memo or not (isinstance(child, (Variable, GraphNode))
                                     or _children(child)):
            continue
        for kind, size in collect_stats(child, memo).items():
            stats[kind] = stats[kind] + size if kind in stats else size
    return stats


def stats_comment(stats: Stats) -> str:
    """``' # Param: 9 (36 B), BatchStat: ..., Total: ...'`` (no total for one kind).

    >>> stats_comment({}) == ""
    True
    """
    if not stats:
        return ""
    text = " # " + ", ".join(f"{kind.__name__}: {size}" for kind, size in stats.items())
    if len(stats) > 1:
        text += f", Total: {sum(stats.values(), SizeBytes(0, 0))}"
    return text


def variable_counts(module: tp.Any) -> str:
    """``Param: 4,554 (18.2 KB), ..., Total: 6,070 (24.3 KB)``: the sizes of a module's
    Variables by kind, as the first line of its repr shows them.

    >>> from flaxen import nnx
    >>> variable_counts(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    'Param: 9 (36 B)'
    """
    return stats_comment(collect_stats(module, {}))[3:]


def module_repr(module: tp.Any, _seen: set | None = None) -> str:
    """A Module as nested text; the outermost line says how many values its Variables hold.

    >>> from flaxen import nnx
    >>> print(repr(nnx.Linear(2, 3, rngs=nnx.Rngs(0))).splitlines()[0])
    Linear( # Param: 9 (36 B)
    """
    return repr(module)


def display(*args: tp.Any) -> None:
    """Shows each argument: treescope in a notebook if installed, else printed text."""
    try:
        import treescope  # noqa: F401
        from IPython import get_ipython  # type: ignore[import-not-found]

        if get_ipython() is not None:
            for x in args:  # as Flax: a failing rendering falls back, arrays autovisualized
                treescope.display(x, ignore_exceptions=True, autovisualize=True)
            return
    except Exception:  # no notebook or no treescope: plain text is the fallback
        pass
    for x in args:
        print(x)


# -- Flax 0.12.8's other names in nnx.visualization -------------------------------------------
def _in_ipython() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
    except ImportError:
        return False
    return get_ipython() is not None


in_ipython = _in_ipython()


def render_object_constructor(object_type: type[tp.Any], attributes: tp.Mapping[str, tp.Any],
                              path: str | None, subtree_renderer: tp.Any,
                              roundtrippable: bool = False, color: str | None = None,
                              first_line_annotation: tp.Any | None = None) -> tp.Any:
    """Treescope rendering ``Type(attr=..., ...)`` for use in a ``__treescope_repr__``.

    ``attributes`` must be real attributes of the object (treescope builds paths from them);
    ``first_line_annotation`` (e.g. a size comment) follows the opening line when unfolded.
    Needs ``treescope`` installed.

    >>> class Pair:
    ...     def __init__(self, a, b):
    ...         self.a, self.b = a, b
    ...     def __treescope_repr__(self, path, subtree_renderer):
    ...         return render_object_constructor(Pair, {"a": self.a, "b": self.b}, path,
    ...                                          subtree_renderer)
    >>> import treescope
    >>> print(treescope.render_to_text(Pair(1, "x")))
    Pair(a=1, b='x')
    """
    # flaxen's own builder: it takes the first-line annotation on every treescope release
    return _treescope.render_object_constructor(
        object_type, attributes, path, subtree_renderer, roundtrippable=roundtrippable,
        color=color, first_line_annotation=first_line_annotation)
