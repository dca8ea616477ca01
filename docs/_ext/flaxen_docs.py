"""Sphinx extension behind flaxen's site: API tables and the errors catalogue, generated.

The directives are written as reStructuredText and parsed in place (through MyST's
``eval-rst``) so that autodoc and cross-references treat them like hand-written text:

``flaxen-api MODULE``
    The module's docstring (autodoc) followed by a table of its public members, each with the
    first sentence of its docstring: ``__all__`` where the module defines it, else every
    public name that is not a submodule. (A table rather than one autodoc entry per member:
    the reference then builds in seconds, and a re-exported object is described once.)

``output`` code fences
    Shown as plain text: they hold what the ``python`` block before them prints, which
    ``tests/docs`` compares with what the block really prints.

``flaxen-errors``
    One section per class of ``flaxen.errors``: what it means (the class docstring), which
    public modules raise it (found by scanning flaxen's sources for the class name), and the
    message it prints, rendered with placeholder arguments (every message ends with its fix).
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re
import types
import typing
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from pygments.lexers.special import TextLexer
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

_FLAXEN_ROOT = pathlib.Path(__file__).resolve().parents[2] / "flaxen"


def public_members(module: types.ModuleType) -> list[str]:
    """Names a user may import from ``module``, in a stable order."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n for n in dir(module)
            if not n.startswith("_") and not isinstance(getattr(module, n), types.ModuleType)
        ]
    return sorted(set(names), key=lambda n: (n.lower(), n))


def _documentable(module: types.ModuleType, name: str) -> bool:
    # Constants (numbers, strings, tuples) have no docstring of their own worth a table row.
    try:
        value = getattr(module, name)
    except AttributeError:
        return False
    return callable(value) or isinstance(value, type)


def summary_line(obj: Any) -> str:
    """The first sentence of ``obj``'s docstring, as reStructuredText safe to put in a table.

    A sentence ends at a full stop followed by a space, outside double-backtick literals
    (``softmax(query . key)`` does not end one). Inline markup left unbalanced by the cut is
    shown as plain text rather than allowed to spill into the next cell.
    """
    if typing.get_origin(obj) is not None:  # dict[str, Any] and co: the docstring is dict's
        return f"Type alias: ``{obj!r}``."
    doc = inspect.getdoc(obj) or ""
    para = " ".join(doc.split("\n\n", 1)[0].split())
    pieces = para.split("``")
    out: list[str] = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:  # outside a literal
            match = re.search(r"\.(\s|$)", piece)
            if match:
                out.append(piece[: match.start() + 1])
                break
        out.append(piece)
    text = "``".join(out).strip()
    segments = text.split("``")
    if len(segments) % 2 == 0:  # a literal opened and never closed: show it as plain text
        return text.replace("`", "")
    outside = "".join(segments[::2])
    if outside.count("*") % 2 or outside.count("`") % 2:
        # A stray emphasis or role marker: escape the markers outside the literals.
        for i in range(0, len(segments), 2):
            segments[i] = segments[i].replace("*", "\\*").replace("`", "\\`")
    return "``".join(segments)


class ApiDirective(SphinxDirective):
    """``flaxen-api MODULE``: the module docstring and a table of its public members."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        modname = self.arguments[0]
        module = importlib.import_module(modname)
        members = [n for n in public_members(module) if _documentable(module, n)]
        lines = [f".. automodule:: {modname}", "   :no-members:", ""]
        if members:
            lines += [".. list-table::", "   :header-rows: 1", "   :widths: 30 70",
                      "   :class: flaxen-members", "",
                      "   * - name", "     - summary"]
            for name in members:
                summary = summary_line(getattr(module, name)) or "\\"
                lines += [f"   * - ``{name}``", f"     - {summary}"]
            lines.append("")
        return _parse(self, lines)


def _placeholder_message(cls: type) -> str:
    """The class's message with each constructor argument shown as ``<name>``."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    args = [f"<{p.name}>" for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                        p.POSITIONAL_OR_KEYWORD)]
    try:
        return str(cls(*args))
    except Exception:  # a constructor that needs real values: the docstring must do
        return ""


def raised_from(names: list[str]) -> dict[str, list[str]]:
    """For each error class name, the public modules whose sources construct it.

    A private file (``flaxen/linen/_module.py``) is reported under the public package that
    re-exports it (``flaxen.linen``): users never import private files.
    """
    found: dict[str, set[str]] = {n: set() for n in names}
    # A call of the class, not a subclass definition (``class Mine(NNXError):``).
    pattern = re.compile(r"(?<!class )\b(" + "|".join(map(re.escape, names)) + r")\(")
    for path in sorted(_FLAXEN_ROOT.rglob("*.py")):
        if path.name == "errors.py" and path.parent == _FLAXEN_ROOT:
            continue
        text = path.read_text(encoding="utf-8")
        hits = set(pattern.findall(text))
        if not hits:
            continue
        parts = ["flaxen", *path.relative_to(_FLAXEN_ROOT).with_suffix("").parts]
        public: list[str] = []
        for part in parts:
            if part.startswith("_"):
                break
            public.append(part)
        modname = ".".join(public)
        for name in hits:
            found[name].add(modname)
    return {n: sorted(v) for n, v in found.items()}


def _catalogue_order(errors: types.ModuleType) -> list[str]:
    names = [n for n in errors.__all__ if isinstance(getattr(errors, n), type)]

    def group(name: str) -> tuple[int, str]:
        cls = getattr(errors, name)
        if name == "FlaxError":
            return (0, name)
        if issubclass(cls, errors.NNXError):
            return (2, name)
        return (1, name)

    return sorted(names, key=group)


class ErrorsDirective(SphinxDirective):
    """``flaxen-errors``: the catalogue of ``flaxen.errors``, one section per class."""

    def run(self) -> list[nodes.Node]:
        errors = importlib.import_module("flaxen.errors")
        names = _catalogue_order(errors)
        where = raised_from(names)
        lines: list[str] = []
        for name in names:
            cls = getattr(errors, name)
            bases = ", ".join(f"``{b.__name__}``" for b in cls.__bases__)
            doc = inspect.getdoc(cls) or ""
            summary = doc.split("\n\n", 1)[0].replace("\n", " ")
            # Indexed: pages link the classes here ({py:class}`~flaxen.errors.X`).
            lines += [name, "-" * len(name), "", f".. py:exception:: flaxen.errors.{name}",
                      "", f"   {summary}", "", f"Derives from {bases}.", ""]
            modules = where.get(name) or []
            if modules:
                lines.append("Raised by: " + ", ".join(f"``{m}``" for m in modules) + ".")
            else:
                lines.append("Raised by: none of flaxen's modules directly; it exists so that "
                             "``except flax.errors." + name + "`` keeps working, and as a base.")
            lines.append("")
            message = _placeholder_message(cls)
            if message and not re.fullmatch(r"<\w+>", message):
                lines += ["The message, with its arguments as placeholders (the last sentence "
                          "is the fix):", "", ".. code-block:: text", ""]
                lines += [f"   {line}" for line in _wrap(message)]
                lines.append("")
        return _parse(self, lines)


def _wrap(message: str, width: int = 88) -> list[str]:
    out: list[str] = []
    for para in message.splitlines():
        line = ""
        for word in para.split(" "):
            if line and len(line) + 1 + len(word) > width:
                out.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        out.append(line)
    return out


def _parse(directive: SphinxDirective, lines: list[str]) -> list[nodes.Node]:
    # The pages are MyST Markdown, whose nested parser reads Markdown: the generated
    # reStructuredText goes through MyST's eval-rst so that autodoc sees real directives.
    fence = "`" * 4
    lines = [f"{fence}{{eval-rst}}", *lines, fence]
    container = nodes.section()
    content = StringList(lines, source=f"<{directive.name}>")
    nested_parse_with_titles(directive.state, content, container)
    return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    # ```output fences show what the python block above them prints (tests/docs checks it).
    app.add_lexer("output", TextLexer)
    app.add_directive("flaxen-api", ApiDirective)
    app.add_directive("flaxen-errors", ErrorsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
