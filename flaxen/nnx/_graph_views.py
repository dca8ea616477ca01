"""The Module settings behind ``nnx.view`` and ``nnx.with_attributes``, and ``view_info``.

A view is a copy of a model in another mode (``nnx.view(model, deterministic=True)``) that
shares the model's Variables. :mod:`flaxen.nnx.graphlib` makes the copy (its split and merge
live there) and hands it here, where each Module the ``only`` filter selects gets the keyword
arguments: through its ``set_view`` method when it has one, else as the attributes it already
has. ``view_info`` lists what ``set_view`` accepts, with the text of each argument from the
method's Google-style ``Args:`` section. ``graphlib`` re-exports ``view_info``, which reports
``graphlib`` as its ``__module__``.
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx import filterlib
from flaxen.nnx._graph_walk import iter_modules


def set_on_modules(modules: tp.Iterable[tuple[tuple, tp.Any]],
                   accept: tp.Callable[[tuple, tp.Any], bool],
                   attributes: tp.Mapping[str, tp.Any]) -> set[str]:
    """Sets each of ``attributes`` on the ``(path, module)`` pairs ``accept`` selects that
    already have it; returns the names no selected module had (``Module.set_attributes``
    and ``nnx.with_attributes`` report those)."""
    remaining = set(attributes)
    for path, module in modules:
        if not accept(path, module):
            continue
        for name, value in attributes.items():
            if hasattr(module, name):
                setattr(module, name, value)
                remaining.discard(name)
    return remaining


def apply_attributes(new: tp.Any, only: filterlib.Filter, raise_if_not_found: bool,
                     graph: bool | None, attributes: dict[str, tp.Any]) -> None:
    """Sets ``attributes`` in place on the Modules of ``new`` that ``only`` selects and that
    already have them (what ``nnx.with_attributes`` does to its copy)."""
    remaining = set_on_modules(iter_modules(new, graph=graph), filterlib.to_predicate(only),
                               attributes)
    if remaining and raise_if_not_found:
        raise ValueError(
            f"Could not find at least one instance of the following attributes: "
            f"{sorted(remaining)}; no Module selected by only={only!r} has them. Check the "
            "names, or pass raise_if_not_found=False.")


def apply_view(new: tp.Any, only: filterlib.Filter, raise_if_not_found: bool,
               graph: bool | None, kwargs: dict[str, tp.Any]) -> None:
    """Hands ``kwargs`` in place to the Modules of ``new`` that ``only`` selects (what
    ``nnx.view`` does to its copy): to ``set_view`` the arguments it accepts, else to the
    attributes a Module already has."""
    import inspect

    pred = filterlib.to_predicate(only)
    used: set[str] = set()
    for path, module in iter_modules(new, graph=graph):
        if not pred(path, module):
            continue
        set_view = getattr(module, "set_view", None)
        if callable(set_view):
            params = inspect.signature(set_view).parameters
            accepted = {k: v for k, v in kwargs.items() if k in params}
            if accepted:
                set_view(**accepted)
                used.update(accepted)
            continue
        for name, value in kwargs.items():
            if hasattr(module, name):
                setattr(module, name, value)
                used.add(name)
    unused = sorted(set(kwargs) - used)
    if unused and raise_if_not_found:
        raise ValueError(
            f"Unused keys found in nnx.view: {unused}; no selected Module takes them. Check "
            "the names, or pass raise_if_not_found=False.")


def view_info(node: tp.Any, /, *, only: filterlib.Filter = ..., graph: bool | None = None
              ) -> str:
    """Which keyword arguments :func:`view` accepts for the Modules of ``node``."""
    import inspect

    pred = filterlib.to_predicate(only)
    lines: list[str] = []
    seen: set[type] = set()
    for path, module in iter_modules(node, graph=graph):
        if not pred(path, module) or type(module) in seen:
            continue
        set_view = getattr(module, "set_view", None)
        if not callable(set_view):
            continue
        seen.add(type(module))
        docs = _args_doc(inspect.getdoc(set_view) or "")
        lines.append(f"{type(module).__qualname__}:")
        for p in inspect.signature(set_view).parameters.values():
            if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            text = p.name
            if p.annotation is not p.empty:
                ann = p.annotation
                text += f": {ann if isinstance(ann, str) else inspect.formatannotation(ann)}"
            if p.default is not p.empty:
                text += f" = {p.default!r}"
            lines.append(f"  {text}")
            lines.extend(f"    {d}" for d in docs.get(p.name, ()))
    return "\n".join(lines)


view_info.__module__ = "flaxen.nnx.graphlib"  # public there; the surface check reads it


def _args_doc(doc: str) -> dict[str, list[str]]:
    """The ``Args:`` section of a Google-style docstring: each argument's lines of text."""
    out: dict[str, list[str]] = {}
    lines = doc.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == "Args:"), None)
    if start is None:
        return out
    base = len(lines[start]) - len(lines[start].lstrip())
    arg_indent, current = None, None
    for ln in lines[start + 1:]:
        if not ln.strip():
            continue
        indent = len(ln) - len(ln.lstrip())
        if indent <= base:
            break  # the next section
        if arg_indent is None:
            arg_indent = indent
        head, sep, rest = ln.strip().partition(":")
        if indent == arg_indent and sep:
            current = head.split(" ")[0].lstrip("*")
            out[current] = [rest.strip()] if rest.strip() else []
        elif current is not None:
            out[current].append(ln.strip())
    return out
