"""Shared timing harness: side-by-side runs, rotated order, medians, ratios.

A suite module defines ``run(quick: bool) -> list[Result]`` and builds each result with
:func:`compare`, passing one zero-argument callable per implementation. Every callable is
warmed up, then all of them are timed in rounds whose order rotates, so a noisy neighbour
hurts each implementation alike. Only ratios are meant to be quoted.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable


@dataclasses.dataclass
class Result:
    suite: str
    case: str
    medians: dict[str, float]  # seconds per call, by implementation name
    baseline: str = "jax"
    note: str = ""

    def ratio(self, impl: str, against: str | None = None) -> float:
        return self.medians[impl] / self.medians[against or self.baseline]


def _time_once(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        out = fn()
    _block(out)
    return (time.perf_counter() - start) / number


def _autorange(fn: Callable[[], object], min_time: float) -> int:
    """How many calls of ``fn`` take about ``min_time`` (growing tenfold, then scaled)."""
    n = 1
    while True:
        total = _time_once(fn, n) * n
        if total >= min_time / 10 or n >= 10**6:
            return max(1, int(n * min_time / max(total, 1e-9)))
        n *= 10


def _block(out: object) -> None:
    try:
        import jax

        jax.block_until_ready(out)
    except Exception:  # non-JAX results need no blocking
        pass


def compare(
    suite: str,
    case: str,
    impls: dict[str, Callable[[], object]],
    *,
    rounds: int = 7,
    number: int | None = None,
    min_time: float = 0.05,
    baseline: str = "jax",
    note: str = "",
    warmup: int = 3,
) -> Result:
    """Times each callable ``rounds`` times (``number`` calls per round) in rotated order.

    Each callable is first called ``warmup`` times: flaxen generates straight-line code for
    a graph definition it has seen twice, so the third call is the first steady-state one.
    """
    impls = {k: v for k, v in impls.items() if v is not None}
    for fn in impls.values():  # warm-up: compile, fill caches, let code be generated
        for _ in range(warmup):
            _block(fn())
    # Each implementation gets its own call count, so that a round of it lasts about
    # ``min_time``: one count for all (sized by the slowest) left fast implementations with
    # a few calls per round, and the one ``block_until_ready`` at the end of a round (which
    # walks the whole output tree) then weighed as much as the calls themselves.
    numbers = {k: number or _autorange(fn, min_time) for k, fn in impls.items()}
    names = list(impls)
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            gc.collect()
            samples[name].append(_time_once(impls[name], numbers[name]))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    if baseline not in medians:
        baseline = names[0]
    return Result(suite, case, medians, baseline, note)


def have_flax() -> bool:
    try:
        import flax  # noqa: F401
    except ImportError:
        return False
    return True


def format_results(results: list[Result]) -> str:
    """One line per case: each implementation as a ratio of the baseline, plus flaxen/flax."""
    lines = []
    for res in results:
        parts = [f"{k}={res.ratio(k):.2f}x" for k in res.medians]
        if "flaxen" in res.medians and "flax" in res.medians:
            parts.append(f"flaxen/flax={res.ratio('flaxen', 'flax'):.2f}")
        extra = f"  ({res.note})" if res.note else ""
        lines.append(f"{res.suite:<14} {res.case:<44} vs {res.baseline}: {'  '.join(parts)}{extra}")
    return "\n".join(lines)
