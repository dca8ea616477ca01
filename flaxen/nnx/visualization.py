"""Readable text for Variables, VariableStates, States, GraphDefs and Modules; ``display``.

The format follows the spec's printed examples, e.g. ``VariableState(type=Param, value=...)``
nested inside ``State({...})``; values that are shapes (after ``tree_map(jnp.shape, ...)``)
print as tuples. ``display`` uses treescope when installed and running in a notebook.
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx._graph_node import GraphNode


def _indent(text: str, n: int = 2) -> str:
    pad = " " * n
    return text.replace("\n", "\n" + pad)


def _value_repr(value: tp.Any) -> str:
    return repr(value)


def variable_repr(type_name: str, value: tp.Any, metadata: dict) -> str:
    lines = [f"  value={_indent(_value_repr(value))}"]
    for k, v in metadata.items():
        lines.append(f"  {k}={_indent(repr(v))}")
    return f"{type_name}(\n" + ",\n".join(lines) + "\n)"


def variable_state_repr(vs: tp.Any) -> str:
    lines = [f"  type={vs.type.__name__}", f"  value={_indent(_value_repr(vs.value))}"]
    for k, v in vs._var_metadata.items():
        lines.append(f"  {k}={_indent(repr(v))}")
    return "VariableState(\n" + ",\n".join(lines) + "\n)"


def state_repr(state: tp.Any) -> str:
    return f"State({_mapping_repr(state._mapping)})"


def _mapping_repr(m: dict) -> str:
    if not m:
        return "{}"
    lines = []
    for k, v in m.items():
        sub = getattr(v, "_mapping", None)  # a nested State (duck-typed: no import of state)
        body = _mapping_repr(sub) if isinstance(sub, dict) else repr(v)
        lines.append(f"  {k!r}: {_indent(body)}")
    return "{\n" + ",\n".join(lines) + "\n}"


def module_repr(module: tp.Any, _seen: set | None = None) -> str:
    seen = _seen if _seen is not None else set()
    if id(module) in seen:
        return f"{type(module).__name__}(...)"
    seen.add(id(module))
    lines = []
    for k, v in module.__dict__.items():
        if isinstance(v, GraphNode):
            body = module_repr(v, seen)
        else:
            body = repr(v)
        lines.append(f"  {k}={_indent(body)}")
    if not lines:
        return f"{type(module).__name__}()"
    return f"{type(module).__name__}(\n" + ",\n".join(lines) + "\n)"


def display(*args: tp.Any) -> None:
    """Shows each argument: treescope in a notebook if installed, else printed text."""
    try:
        import treescope  # noqa: F401
        from IPython import get_ipython  # type: ignore[import-not-found]

        if get_ipython() is not None:
            for x in args:
                treescope.display(x)
            return
    except Exception:  # no notebook or no treescope: plain text is the fallback
        pass
    for x in args:
        print(x)
