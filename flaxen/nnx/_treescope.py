"""How NNX objects show in treescope (https://treescope.readthedocs.io), as structured objects.

treescope calls ``__treescope_repr__(path, subtree_renderer)`` on the objects it renders; the
NNX classes point that hook at the functions below. treescope is imported only inside them,
so it stays an optional package: nothing here runs unless treescope is already rendering.

* graph nodes (Modules, Rngs, ...): ``Linear(kernel=Param(...), bias=..., in_features=2, ...)``
  with their public attributes;
* Variables: ``Param(value=..., <metadata>=...)``; VariableStates also name their ``type``;
* States: ``State({'kernel': ..., ...})``, foldable per entry like a dict.
"""

from __future__ import annotations

from typing import Any


def _variable_color(cls: type) -> str:
    from treescope import formatting_util

    return formatting_util.color_from_string(cls.__qualname__)


def graph_node_repr(node: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering of a graph node: its type and public attributes."""
    from treescope import repr_lib

    attributes = {k: v for k, v in vars(node).items() if not k.startswith("_")}
    return repr_lib.render_object_constructor(
        object_type=type(node), attributes=attributes, path=path,
        subtree_renderer=subtree_renderer)


def variable_repr(var: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering of a Variable: its value, then its metadata."""
    from treescope import repr_lib

    attributes = {"value": var.raw_value, **var.get_metadata()}
    return repr_lib.render_object_constructor(
        object_type=type(var), attributes=attributes, path=path,
        subtree_renderer=subtree_renderer, color=_variable_color(type(var)))


def variable_state_repr(vs: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering of a VariableState: the Variable type, value and metadata."""
    from treescope import repr_lib

    attributes = {"type": vs.type, "value": vs.value, **vs._var_metadata}
    return repr_lib.render_object_constructor(
        object_type=type(vs), attributes=attributes, path=path,
        subtree_renderer=subtree_renderer, color=_variable_color(vs.type))


def state_repr(state: Any, path: str | None, subtree_renderer: Any) -> Any:
    """treescope rendering of a State: a dict of its entries, wrapped in the State type."""
    from treescope import repr_lib

    return repr_lib.render_dictionary_wrapper(
        object_type=type(state), wrapped_dict=dict(state.items()), path=path,
        subtree_renderer=subtree_renderer)
