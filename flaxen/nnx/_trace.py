"""Which JAX trace is active: lets graph objects refuse mutation from a foreign trace.

A Module or Variable remembers the trace it was created under; mutating it from inside a
different trace (for example a module captured by closure inside ``jax.jit``) would leak
tracers, so it raises :class:`flaxen.errors.TraceContextError`. The check runs on every
attribute write, hence the fast private read with a public fallback.
"""

from __future__ import annotations

# The trace outside every transform (one object for the life of the process), or None where
# it cannot be read. Generated merge code leaves a Pytree's trace slot unset when building
# there; ``Pytree.__getattr__`` then answers with this.
TOP: object | None = None

try:  # one attribute read (~0.1us); the public API below costs ~1.4us per check
    from jax._src.core import trace_ctx as _trace_ctx

    try:  # what ``trace_ctx.trace`` (a Python property) reads: one C-level read instead
        from jax._src.core import trace_state_strong_ref as _trace_ref

        if _trace_ref.value is not _trace_ctx.trace:  # pragma: no cover
            raise ImportError
    except (ImportError, AttributeError):  # pragma: no cover - another JAX layout
        _trace_ref = None

    def current_trace() -> object:
        # Every trace counts, batching and differentiation included: as in Flax, an object
        # captured by closure inside jax.vmap / jax.grad must not be mutated there (the
        # write would store a tracer that outlives the transform).
        return _trace_ctx.trace

    if _trace_ref is not None:
        def current_trace() -> object:  # noqa: F811  # the same, read directly
            return _trace_ref.value  # type: ignore[union-attr]

    try:
        from jax._src.core import eval_trace as _eval_trace

        TOP = _eval_trace
    except ImportError:  # pragma: no cover
        pass

    try:
        from jax._src.interpreters.ad import JVPTrace, LinearizeTrace
        from jax._src.interpreters.batching import BatchTrace

        _EAGER_TRACES: tuple = (JVPTrace, LinearizeTrace, BatchTrace)
    except ImportError:  # pragma: no cover
        _EAGER_TRACES = ()

    def _staging(t: object) -> object:
        while isinstance(t, _EAGER_TRACES):
            t = t.parent_trace  # type: ignore[attr-defined]
        return t

    def eager_level_matches(stored: object) -> bool:
        """True when the current trace differs from ``stored`` only by differentiation or
        batching traces. Flax 0.8.3's NNX let objects captured by closure inside
        ``jax.grad``/``jax.vmap`` be mutated; the objects of ``flaxen.experimental.nnx``
        (``_nnx_lenient_trace``) keep that rule, today's raise as Flax 0.12.8 does."""
        return _staging(_trace_ctx.trace) is _staging(stored)

except ImportError:  # pragma: no cover - only on a JAX without the private module
    from jax.extend import core as _ext_core

    def current_trace() -> object:
        return _ext_core.get_opaque_trace_state(convention="flax")

    def eager_level_matches(stored: object) -> bool:
        return False


# Bumped on every structural change of any graph node (attribute set or deleted, Variable
# metadata changed). Transforms cache the flattened graph and reuse it while it is unchanged.
_EPOCH = [0]


def bump() -> None:
    _EPOCH[0] += 1


def epoch() -> int:
    return _EPOCH[0]
