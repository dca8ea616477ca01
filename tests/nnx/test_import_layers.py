"""The import graph of ``flaxen/nnx`` runs one way: no circle, no import back up.

Every file of the package imports only files below it. A function may import a file above its
own (a lazy lookup, a registration on first use) when a comment on the line or just above it
says why, starting with ``upward:``; such an import is not an edge of the graph checked here.
Everything else, module-level or inside a function, must form an acyclic graph. Nothing in
``flaxen/nnx`` imports ``flaxen.experimental`` (the Flax 0.8.3 face sits on top of it).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / "flaxen" / "nnx"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _targets(mod: str, node: ast.AST, is_pkg: bool, known: dict) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
        return subs or ([target] if target in known else [])
    assert isinstance(node, ast.Import)
    return [a.name for a in node.names if a.name in known]


def _says_upward(lines: list[str], lineno: int) -> bool:
    # the import line itself, or the comment lines right above it
    if "upward:" in lines[lineno - 1]:
        return True
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        if "upward:" in lines[i]:
            return True
        i -= 1
    return False


def _graph() -> tuple[dict[str, set], dict[str, set], list[str]]:
    """(module-level edges, checked edges (all but the annotated upward ones), problems)."""
    known = _modules()
    top: dict[str, set] = {m: set() for m in known}
    checked: dict[str, set] = {m: set() for m in known}
    problems = []
    for mod, path in known.items():
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        toplevel = set()
        for stmt in tree.body:
            inner = ast.walk(stmt) if isinstance(stmt, (ast.If, ast.Try)) else [stmt]
            toplevel.update(id(n) for n in inner if isinstance(n, (ast.Import, ast.ImportFrom)))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                a.name for a in node.names]
            if any(n.startswith("flaxen.experimental") for n in names):
                problems.append(f"{mod}:{node.lineno} imports flaxen.experimental")
            for target in _targets(mod, node, path.name == "__init__.py", known):
                if target == mod or mod.startswith(target + "."):
                    continue  # a package's own __init__ runs first anyway
                if id(node) in toplevel:
                    top[mod].add(target)
                    checked[mod].add(target)
                elif not _says_upward(lines, node.lineno):
                    checked[mod].add(target)
    return top, checked, problems


def _cycles(edges: dict[str, set]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_module_level_imports_form_no_circle():
    top, _, _ = _graph()
    assert _cycles(top) == []


def test_function_level_imports_going_up_say_why():
    _, checked, _ = _graph()
    assert _cycles(checked) == [], (
        "a circle through function-level imports: make the lower file not need the higher "
        "one, or mark the upward import with a comment starting with 'upward:' saying why")


def test_nnx_never_imports_the_083_face():
    _, _, problems = _graph()
    assert problems == []
    code = ("import flaxen.nnx, sys; "
            "print(sorted(m for m in sys.modules if m.startswith('flaxen.experimental')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_checker_sees_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_reads_upward_comments():
    lines = ["x = 1", "    # upward: the registry lives above", "    from a import b",
             "    from c import d"]
    assert _says_upward(lines, 3)
    assert not _says_upward(lines, 4)
