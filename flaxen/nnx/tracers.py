"""``nnx.tracers``: a token of the JAX trace an object was created under.

``TraceState()`` records the current trace; ``is_valid()`` tells whether code still runs under
that same trace (False inside a ``jax.jit`` for a state made outside it). It is a pytree with no
leaves, and pickling or unflattening gives a state of the trace current at that moment.

>>> import jax
>>> from flaxen.nnx.tracers import TraceState
>>> outer = TraceState()
>>> outer.is_valid()
True
>>> seen = []
>>> _ = jax.jit(lambda: seen.append(outer.is_valid()))()  # a jit body is another trace
>>> seen
[False]
"""

from __future__ import annotations

import typing as tp

import jax
from jax.extend import core as _ext_core

from flaxen.nnx import reprlib


def current_jax_trace() -> tp.Any:
    """An opaque, comparable token of the JAX trace that is active now.

    >>> current_jax_trace() == current_jax_trace()
    True
    """
    return _ext_core.get_opaque_trace_state(convention="nnx")


class TraceState(reprlib.Representable):
    """The trace current at construction; equal to another made under the same trace.

    >>> TraceState() == TraceState()
    True
    """

    __slots__ = ("_jax_trace",)

    def __init__(self) -> None:
        self._jax_trace = current_jax_trace()

    @property
    def jax_trace(self) -> tp.Any:
        return self._jax_trace

    def is_valid(self) -> bool:
        """Whether the trace active now is the one recorded."""
        return self._jax_trace == current_jax_trace()

    def __nnx_repr__(self) -> tp.Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type(self).__name__)
        yield reprlib.Attr("jax_trace", self._jax_trace)

    def __treescope_repr__(self, path: tp.Any, subtree_renderer: tp.Any) -> tp.Any:
        import treescope  # type: ignore[import-not-found]

        return treescope.repr_lib.render_object_constructor(
            object_type=type(self), attributes={"jax_trace": self._jax_trace}, path=path,
            subtree_renderer=subtree_renderer)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TraceState) and self._jax_trace == other._jax_trace

    __hash__ = None  # type: ignore[assignment]

    # a trace cannot be pickled: a loaded state belongs to the trace current at load time
    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._jax_trace = current_jax_trace()


jax.tree_util.register_pytree_node(
    TraceState, lambda _: ((), None), lambda _aux, _children: TraceState())

__all__ = ["TraceState", "current_jax_trace"]
