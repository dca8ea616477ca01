"""Runs every benchmark suite (or the ones named) and prints ratios.

    python -m benchmarks.run                 # all suites
    python -m benchmarks.run serialization   # suites whose name contains the word
    python -m benchmarks.run --quick         # fewer rounds, smaller sizes
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys

from benchmarks._harness import format_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("suites", nargs="*", help="substrings of suite names (bench_<name>.py)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and smaller sizes")
    args = parser.parse_args(argv)
    here = pathlib.Path(__file__).parent
    names = sorted(p.stem for p in here.glob("bench_*.py"))
    if args.suites:
        names = [n for n in names if any(s in n for s in args.suites)]
    if not names:
        print("no benchmark suite matched", file=sys.stderr)
        return 2
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name}", flush=True)
        results = module.run(quick=args.quick)
        print(format_results(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
