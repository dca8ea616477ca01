"""``GraphNode``: the base class of objects NNX walks as nodes (``Module``, ``Rngs``, ...).

Kept in its own file so that everything above it (the graph engine, modules, RNG streams)
can import it without importing each other. A graph node stores its attributes in
``__dict__`` and remembers the JAX trace it was created under: writing an attribute from a
different trace (a module captured by closure inside ``jax.jit``) would leak tracers, so it
raises :class:`~flaxen.errors.TraceContextError`.

>>> from flaxen.nnx._graph_node import GraphNode
>>> class Box(GraphNode):
...     pass
>>> b = Box()
>>> b.x = 1
>>> b.x
1
"""

from __future__ import annotations

import typing as tp

from flaxen.errors import TraceContextError
from flaxen.nnx import _trace, _treescope

_current_trace = _trace.current_trace
_EPOCH = _trace._EPOCH


class GraphNodeState:
    """What a graph node carries besides its attributes (read-only view: the trace)."""

    __slots__ = ("_node",)

    def __init__(self, node: GraphNode) -> None:
        self._node = node

    @property
    def trace_state(self) -> object:
        return self._node._nnx_trace


class GraphNode:
    """Base class of objects that NNX walks as graph nodes (see the module docstring)."""

    __slots__ = ("_nnx_trace", "__dict__", "__weakref__")
    if tp.TYPE_CHECKING:  # a slot, set in __new__ (kept out of __annotations__)
        _nnx_trace: object
    __treescope_repr__ = _treescope.graph_node_repr
    # True for nodes whose attribute names are decimal strings standing for list indices
    # (nnx.List): the graph walk uses the integer as the path key.
    _graph_int_keys = False

    def __new__(cls, *args: tp.Any, **kwargs: tp.Any) -> GraphNode:
        obj = object.__new__(cls)
        object.__setattr__(obj, "_nnx_trace", _current_trace())
        return obj

    def __setattr__(self, name: str, value: tp.Any) -> None:
        if self._nnx_trace is not _current_trace() and not self._lenient_trace_ok():
            self._raise_trace(f"set attribute {name!r} of")
        object.__setattr__(self, name, value)
        _EPOCH[0] += 1

    def __delattr__(self, name: str) -> None:
        if self._nnx_trace is not _current_trace() and not self._lenient_trace_ok():
            self._raise_trace(f"delete attribute {name!r} of")
        object.__delattr__(self, name)
        _EPOCH[0] += 1

    # Flax 0.8.3's face (flaxen.experimental.nnx) sets this: its objects may be mutated under
    # jax.grad / jax.vmap of their own level, as 0.8.3 allowed
    _nnx_lenient_trace = False

    def _lenient_trace_ok(self) -> bool:
        return type(self)._nnx_lenient_trace and _trace.eager_level_matches(self._nnx_trace)

    def _raise_trace(self, what: str) -> tp.NoReturn:
        raise TraceContextError(
            f"Cannot mutate '{type(self).__name__}' from different trace level: tried to "
            f"{what} it inside a JAX transform it was not created in (probably captured by "
            "closure). Pass it as an argument of the nnx transform instead (nnx.jit, "
            "nnx.grad, ...), so its state is traced."
        )

    @property
    def _graph_node__state(self) -> GraphNodeState:
        return GraphNodeState(self)

    def check_valid_context(self, error_msg: str) -> None:
        """Raises TraceContextError(error_msg) unless called in this object's own trace."""
        if self._nnx_trace is not _current_trace() and not self._lenient_trace_ok():
            raise TraceContextError(error_msg)

    def __getstate__(self) -> dict:
        return dict(self.__dict__)

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "_nnx_trace", _current_trace())
        self.__dict__.update(state)


def new_node(typ: type) -> tp.Any:
    """An empty instance of graph-node type ``typ`` (no ``__init__``), owned by this trace."""
    obj: tp.Any = object.__new__(typ)
    object.__setattr__(obj, "_nnx_trace", _current_trace())
    return obj
