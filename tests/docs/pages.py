"""Reads the documentation pages' code blocks and runs them as a reader would.

A page is MyST Markdown under ``docs/``. Its fenced ``python`` blocks run top to bottom in one
namespace (a later block may use names from an earlier one), in a fresh temporary working
directory that, like a clone's root, has the repository's ``examples/`` in it (pages import
the example scripts from there). A fenced ``output`` block placed right after a ``python``
block shows what that block prints; the printed text must match it, compared like a doctest
(``...`` stands for any text, runs of whitespace compare equal). Other fences (``bash``,
``text``, directives) are shown, not run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import doctest
import io
import os
import pathlib
import re
import sys
import types

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")
_CHECKER = doctest.OutputChecker()
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclasses.dataclass
class Block:
    """One fenced block: its info string (``python``, ``output``, ...), text and first line."""

    info: str
    text: str
    line: int


@dataclasses.dataclass
class Step:
    """A python block to run and, when the page shows one, the output it must print."""

    code: Block
    expected: Block | None = None


def pages() -> list[pathlib.Path]:
    """Every Markdown page of the site (build output, included fragments and the folder's
    README, which is for contributors and not part of the site, excluded)."""
    return sorted(p for p in DOCS.rglob("*.md")
                  if "_build" not in p.parts and "_include" not in p.parts
                  and p != DOCS / "README.md")


def fenced_blocks(text: str) -> list[Block]:
    """The top-level fenced blocks of a Markdown text, in order.

    >>> [b.info for b in fenced_blocks("```python\\nx = 1\\n```\\n\\n```output\\n1\\n```\\n")]
    ['python', 'output']
    """
    blocks: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info = match["fence"], match["info"].strip()
        body: list[str] = []
        j = i + 1
        # A closing fence is the same character, at least as long, with nothing after it.
        while j < len(lines) and not re.fullmatch(
                r" {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*", lines[j]):
            body.append(lines[j])
            j += 1
        blocks.append(Block(info, "\n".join(body) + "\n", i + 1))
        i = j + 1
    return blocks


def steps(text: str) -> list[Step]:
    """The python blocks of a page, each paired with the ``output`` block right after it."""
    blocks = fenced_blocks(text)
    out: list[Step] = []
    for k, block in enumerate(blocks):
        if block.info == "python":
            following = blocks[k + 1] if k + 1 < len(blocks) else None
            expected = following if following and following.info == "output" else None
            out.append(Step(block, expected))
        elif block.info == "output" and (k == 0 or blocks[k - 1].info != "python"):
            raise ValueError(f"line {block.line}: an output block must follow a python block")
    return out


def output_matches(expected: str, got: str) -> bool:
    """Doctest's comparison: ``...`` matches any text, whitespace runs compare equal.

    >>> output_matches("loss ... done\\n", "loss 0.25 done\\n")
    True
    >>> output_matches("3\\n", "4\\n")
    False
    """
    return _CHECKER.check_output(expected, got, _FLAGS)


def run_page(path: pathlib.Path, workdir: pathlib.Path) -> int:
    """Runs a page's python blocks in ``workdir``; returns how many ran.

    Raises ``AssertionError`` naming the page and line when printed output differs from the
    page's ``output`` block; an exception from a block propagates with the page and line in
    its traceback (each block is compiled under the name ``page.md:LINE``).
    """
    rel = path.relative_to(DOCS)
    # The blocks run in a real module registered in sys.modules, as a script's would:
    # dataclasses (and so Linen Modules) look their defining module up there.
    module = types.ModuleType(f"docs_page_{rel.with_suffix('').as_posix().replace('/', '_')}")
    module.__file__ = str(path)
    namespace = module.__dict__
    sys.modules[module.__name__] = module
    previous = os.getcwd()
    examples = workdir / "examples"
    if not examples.exists():
        examples.symlink_to(DOCS.parent / "examples", target_is_directory=True)
    os.chdir(workdir)
    try:
        count = 0
        for step in steps(path.read_text(encoding="utf-8")):
            # Leading blank lines keep the traceback's line numbers those of the page.
            source = "\n" * step.code.line + step.code.text
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                exec(compile(source, str(rel), "exec"), namespace)  # noqa: S102
            count += 1
            if step.expected is not None and not output_matches(step.expected.text,
                                                                 buffer.getvalue()):
                raise AssertionError(
                    f"{rel}:{step.expected.line}: the block at line {step.code.line} printed\n"
                    f"{buffer.getvalue()}\nbut the page shows\n{step.expected.text}")
        return count
    finally:
        os.chdir(previous)
        sys.modules.pop(module.__name__, None)
