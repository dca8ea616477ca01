"""Inspecting JAX's trace state (``flax.core.tracers``).

A Scope records the trace state it was created under; :func:`current_trace` returns an
opaque token for it that compares equal only within the same trace.

>>> import jax
>>> outer = current_trace()
>>> jax.jit(lambda x: (current_trace() == outer, x)[1])(1.0).item()
1.0
>>> current_trace() == outer
True
"""

from __future__ import annotations

from typing import Any

from jax.extend import core as _jex_core


def current_trace() -> Any:
    """An opaque token of the JAX trace state in force now (equal tokens: same trace).

    >>> current_trace() == current_trace()
    True
    """
    return _jex_core.get_opaque_trace_state(convention="flax")


def check_trace_level(base_level: Any) -> None:
    """Accepts any ``base_level`` (Flax 0.12.8 keeps this check switched off).

    Leaked tracers are still caught, by JAX itself, when they are used.

    >>> check_trace_level(current_trace()) is None
    True
    """
    del base_level


__all__ = ["check_trace_level", "current_trace"]
