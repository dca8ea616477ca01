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


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"  # unreachable: the loop returns at GB


def variable_counts(module: tp.Any) -> str:
    """``Param: 4,554 (18.2 KB), ..., Total: 6,070 (24.3 KB)``: the sizes of a module's
    Variables by kind (the RNG keys and counts as RngState), for the first line of its repr."""
    import numpy as np

    from flaxen.nnx._graph_walk import iter_graph
    from flaxen.nnx.variablelib import Variable

    groups: dict[str, list[int]] = {}
    # graph mode: shared Variables are visited (and counted) once
    for _, var in iter_graph(module, graph=True):
        if not isinstance(var, Variable):
            continue
        # RNG keys and counts of either NNX face (each has its own RngState class)
        kind = "RngState" if any(c.__name__ == "RngState" for c in type(var).__mro__) \
            else type(var).__name__
        value = var.get_raw_value() if hasattr(var, "get_raw_value") else var.raw_value
        shape = getattr(value, "shape", ())
        count = int(np.prod(shape)) if shape is not None else 1
        try:
            nbytes = int(getattr(value, "nbytes", 0))
        except Exception:  # noqa: BLE001 - typed keys and odd values have no byte size
            nbytes = 0
        total = groups.setdefault(kind, [0, 0])
        total[0] += count
        total[1] += nbytes
    if not groups:
        return ""
    parts = [f"{k}: {c:,} ({_size(b)})" for k, (c, b) in groups.items()]
    count, nbytes = sum(c for c, _ in groups.values()), sum(b for _, b in groups.values())
    if len(groups) > 1:
        parts.append(f"Total: {count:,} ({_size(nbytes)})")
    return ", ".join(parts)


def module_repr(module: tp.Any, _seen: set | None = None) -> str:
    """A Module as nested text; the outermost line says how many values its Variables hold.

    >>> from flaxen import nnx
    >>> print(repr(nnx.Linear(2, 3, rngs=nnx.Rngs(0))).splitlines()[0])
    Linear( # Param: 9 (36 B)
    """
    seen = _seen if _seen is not None else set()
    if id(module) in seen:
        return f"{type(module).__name__}(...)"
    seen.add(id(module))
    head = f"{type(module).__name__}("
    if _seen is None:
        counts = variable_counts(module)
        if counts:
            head += f" # {counts}"
    lines = []
    for k, v in module.__dict__.items():
        if isinstance(v, GraphNode):
            body = module_repr(v, seen)
        else:
            body = repr(v)
        lines.append(f"  {k}={_indent(body)}")
    if not lines:
        return f"{type(module).__name__}()"
    return f"{head}\n" + ",\n".join(lines) + "\n)"


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
    needs ``treescope`` installed.

    >>> class Pair:
    ...     def __init__(self, a, b):
    ...         self.a, self.b = a, b
    ...     def __treescope_repr__(self, path, subtree_renderer):
    ...         return render_object_constructor(Pair, {"a": self.a, "b": self.b}, path,
    ...                                          subtree_renderer)
    """
    import treescope  # type: ignore[import-not-found]

    # an annotation is passed on only when given: older treescope releases do not take it
    extra = {} if first_line_annotation is None else {
        "first_line_annotation": first_line_annotation}
    return treescope.repr_lib.render_object_constructor(
        object_type=object_type, attributes=attributes, path=path,
        subtree_renderer=subtree_renderer, roundtrippable=roundtrippable, color=color, **extra)
