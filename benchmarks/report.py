"""Turns the output of a benchmark run into the Markdown table of the docs' Performance page.

    python -m benchmarks.run > bench.txt               # or: make bench > bench.txt
    python -m benchmarks.report bench.txt              # writes docs/_include/benchmarks.md
    python -m benchmarks.report --run core traverse    # runs those suites, then writes it

Each result line of ``benchmarks.run`` reads ``suite  case  vs baseline: impl=ratio ...``
(see ``benchmarks._harness.format_results``); the table keeps, per case, flaxen's time over
the baseline's (pure JAX, unless the suite says otherwise) and over Flax's, and the note.
Lines that are not results (suite headers, log lines) are skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import io
import pathlib
import platform
import re
import sys
from contextlib import redirect_stdout

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "_include" / "benchmarks.md"
_LINE = re.compile(
    r"^(?P<suite>\S+)\s+(?P<case>.+?)\s+vs (?P<baseline>\S+): (?P<parts>.+?)"
    r"(?:\s{2}\((?P<note>.*)\))?\s*$")
_PART = re.compile(r"(?P<name>[\w./-]+)=(?P<value>[0-9.]+(?:e[+-]?\d+)?)x?")


@dataclasses.dataclass
class Row:
    """One benchmark case as the run printed it: ratios by implementation, and the note."""

    suite: str
    case: str
    baseline: str
    ratios: dict[str, float]
    note: str = ""

    @property
    def vs_baseline(self) -> float | None:
        """flaxen's time over the baseline's (None when flaxen is the baseline or absent)."""
        if self.baseline == "flaxen" or "flaxen" not in self.ratios:
            return None
        return self.ratios["flaxen"]

    @property
    def vs_flax(self) -> float | None:
        return self.ratios.get("flaxen/flax")


def parse(text: str) -> list[Row]:
    """The result lines of a ``benchmarks.run`` output, in order.

    >>> rows = parse("== bench_core\\n"
    ...              "core   trace init  vs jax: jax=1.00x  flaxen=0.77x  flax=1.15x  "
    ...              "flaxen/flax=0.67  (1,000 scopes)\\n")
    >>> rows[0].case, rows[0].vs_baseline, rows[0].vs_flax, rows[0].note
    ('trace init', 0.77, 0.67, '1,000 scopes')
    """
    rows = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        ratios = {m["name"]: float(m["value"]) for m in _PART.finditer(match["parts"])}
        if not ratios:
            continue
        rows.append(Row(match["suite"], match["case"].strip(), match["baseline"], ratios,
                        match["note"] or ""))
    return rows


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def table(rows: list[Row], source: str) -> str:
    """The Markdown table (with a line saying where the numbers come from).

    >>> print(table(parse("io  load  vs jax: jax=1.00x  flaxen=0.50x"), "a test"))
    ... # doctest: +NORMALIZE_WHITESPACE
    Numbers from a test.
    <BLANKLINE>
    | suite | case | flaxen / baseline | baseline | flaxen / flax | note |
    |---|---|---|---|---|---|
    | io | load | 0.50 | jax |  |  |
    <BLANKLINE>
    """
    lines = [f"Numbers from {source}.", "",
             "| suite | case | flaxen / baseline | baseline | flaxen / flax | note |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        note = row.note.replace("|", "/")
        lines.append(f"| {row.suite} | {row.case} | {_cell(row.vs_baseline)} | {row.baseline} "
                     f"| {_cell(row.vs_flax)} | {note} |")
    return "\n".join(lines) + "\n"


def _run(suites: list[str], quick: bool) -> str:
    from benchmarks import run as bench_run

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        bench_run.main([*suites, *(["--quick"] if quick else [])])
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("log", nargs="?", help="a saved `python -m benchmarks.run` output")
    parser.add_argument("--run", nargs="*", metavar="SUITE",
                        help="run these suites (all when none is named) instead of reading a log")
    parser.add_argument("--quick", action="store_true", help="with --run: fewer rounds")
    parser.add_argument("-o", "--output", default=str(DEFAULT_OUT),
                        help="where the Markdown table goes (default: %(default)s)")
    args = parser.parse_args(argv)
    today = datetime.date.today().isoformat()
    if args.run is not None:
        text = _run(args.run, args.quick)
        command = "python -m benchmarks.run " + " ".join(
            [*args.run, *(["--quick"] if args.quick else [])])
    elif args.log:
        text = pathlib.Path(args.log).read_text(encoding="utf-8")
        command = f"the saved run output {pathlib.Path(args.log).name}"
    else:
        parser.error("give a saved run output, or --run")
    rows = parse(text)
    if not rows:
        print("no benchmark result lines found", file=sys.stderr)
        return 1
    source = (f"`{command.strip()}` ({today}, {platform.system()} {platform.machine()}, "
              f"{len(rows)} cases)" if args.run is not None else f"{command} ({today})")
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table(rows, source), encoding="utf-8")
    print(f"{len(rows)} cases -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
