"""How NNX objects show in treescope (https://treescope.readthedocs.io), as Flax 0.12.8 shows them.

treescope calls ``__treescope_repr__(path, subtree_renderer)`` on the objects it renders; the
NNX classes point that hook at the functions below. treescope is imported only inside them,
so it stays an optional package: nothing here runs unless treescope is already rendering.

* graph nodes (Modules, Rngs, Pytrees, nnx.List/Dict): ``Linear( # Param: 9 (36 B)`` with the
  attributes their text repr shows; a Module gets a background colour from its class name;
* Variables: ``Param( # 6 (24 B)`` then ``value=...`` and the metadata that differs from
  what every Variable carries (``hijax``, ``ref``, ``eager_sharding`` at their defaults);
* States: ``State({'kernel': ..., ...})``, nested States shown as plain dicts, as in Flax.

>>> import treescope
>>> from flaxen import nnx
>>> print(treescope.render_to_text(nnx.Param(1.0)))
Param(value=1.0)
"""

from __future__ import annotations

import threading
from typing import Any

# The per-kind sizes of every node below the outermost graph node being rendered, keyed by
# id: the outermost node counts its whole tree once (so a shared Variable counts once) and
# the nested renderings, which treescope runs while the outer one builds, look theirs up.
_RENDERING = threading.local()


def render_object_constructor(object_type: type, attributes: Any, path: str | None,
                              subtree_renderer: Any, roundtrippable: bool = False,
                              color: str | None = None,
                              first_line_annotation: Any | None = None) -> Any:
    """``Type(name=value, ...)`` as a foldable treescope node, with an optional annotation
    (a size comment) after the opening line; ``attributes`` must be real attributes of the
    object, since treescope derives each child's path from its name."""
    from treescope import rendering_parts as rp

    open_ = rp.siblings(rp.maybe_qualified_type_name(object_type), "(")
    close: Any = rp.text(")")
    if not roundtrippable:
        # a non-roundtrippable object is wrapped in <...> when treescope renders for eval
        open_ = rp.siblings(rp.roundtrip_condition(roundtrip=rp.text("<")), open_)
        close = rp.siblings(")", rp.roundtrip_condition(roundtrip=rp.text(">")))
    items = list(attributes.items())
    lines = []
    for i, (name, value) in enumerate(items):
        if i + 1 < len(items):  # a comma always; a space too when folded onto one line
            sep = rp.siblings(",", rp.fold_condition(collapsed=rp.text(" ")))
        else:  # the last item: a trailing comma only when unfolded
            sep = rp.fold_condition(expanded=rp.text(","))
        child = subtree_renderer(value, path=None if path is None else f"{path}.{name}")
        lines.append(rp.build_full_line_with_annotations(
            rp.siblings_with_annotations(f"{name}=", child), sep))
    return rp.build_foldable_tree_node_from_children(
        prefix=open_, children=lines, suffix=close, path=path, background_color=color,
        first_line_annotation=first_line_annotation)


def _comment(text: str) -> Any:
    from treescope import rendering_parts as rp

    return rp.comment_color(rp.text(text)) if text else None


def _shown_metadata(metadata: Any) -> dict:
    """The metadata a Variable's rendering shows: all but the entries every Variable carries
    at their configured defaults."""
    from flaxen import config

    defaults = {"hijax": config.flax_hijax_variable, "ref": False,
                "eager_sharding": config.flax_always_shard_variable}
    return {k: v for k, v in metadata.items() if k not in defaults or v != defaults[k]}


def _node_attributes(node: Any) -> dict:
    """The attributes a graph node's text repr shows: public ones, and private ones declared
    data; never the node's own bookkeeping (``_pytree__*``)."""
    status = getattr(node, "_pytree__nodes", None) or {}
    return {k: v for k, v in vars(node).items()
            if not k.startswith("_pytree__") and (not k.startswith("_") or status.get(k))}


def _is_module(node: Any) -> bool:
    # upward: Module builds on graph nodes, whose hook this is; loaded by the time one renders
    from flaxen.nnx.module import Module

    return isinstance(node, Module)


def graph_node_repr(node: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering of a graph node: a size comment and the attributes its repr shows."""
    # upward: the size statistics walk Variables and nodes, both above this file
    from flaxen.nnx import visualization

    memo = getattr(_RENDERING, "stats", None)
    owns = memo is None or id(node) not in memo
    if owns:
        memo = {}
        visualization.collect_stats(node, memo)
        _RENDERING.stats = memo
    assert memo is not None
    try:
        color = None
        if _is_module(node):
            from treescope import formatting_util

            color = formatting_util.color_from_string(type(node).__qualname__)
        return render_object_constructor(
            type(node), _node_attributes(node), path, subtree_renderer, color=color,
            first_line_annotation=_comment(visualization.stats_comment(memo[id(node)])))
    finally:
        if owns:
            _RENDERING.stats = None


def variable_repr(var: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering of a Variable: a size comment, its value, then its metadata."""
    from flaxen.typing import SizeBytes

    value = var.get_value()
    size = SizeBytes.from_any(value)
    attributes = {"value": value, **_shown_metadata(var.get_metadata())}
    return render_object_constructor(
        type(var), attributes, path, subtree_renderer,
        first_line_annotation=_comment(f" # {size}" if size else ""))


class _NestedState:
    """A State inside a State, rendered as the plain dict of its entries (as Flax does)."""

    __slots__ = ("state",)

    def __init__(self, state: Any) -> None:
        self.state = state

    def __treescope_repr__(self, path: str | None, subtree_renderer: Any) -> Any:
        return subtree_renderer(_entries(self.state), path=path)


def _entries(state: Any) -> dict:
    # the class that installed this hook is State (a subclass's nested values are States too)
    base = next(c for c in type(state).__mro__ if c.__dict__.get("__treescope_repr__")
                is state_repr)
    return {k: _NestedState(v) if isinstance(v, base) else v for k, v in state.items()}


def state_repr(state: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering of a State: a dict of its entries, wrapped in the State type."""
    from treescope import repr_lib

    return repr_lib.render_dictionary_wrapper(
        object_type=type(state), wrapped_dict=_entries(state), path=path,
        subtree_renderer=subtree_renderer)
