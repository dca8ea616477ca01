"""``nnx.EMA``: an exponential moving average of a model's Variables.

``EMA(model, decay, only=...)`` copies the selected Variables (same types and metadata, so
the sharding carries over); ``ema.update(model)`` blends the model's current values in,
``ema = decay * ema + (1 - decay) * new``; ``ema.apply_to(model)`` returns a model of the
same structure whose tracked Variables are the EMA's own (later updates show through).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 2, use_bias=False, rngs=nnx.Rngs(0))
>>> ema = nnx.EMA(model, decay=0.5)
>>> model.kernel.value = model.kernel.value * 3
>>> ema.update(model)
>>> bool(jnp.allclose(ema.params['kernel'].value, model.kernel.value * 2 / 3))
True
"""

from __future__ import annotations

import typing as tp

import jax.numpy as jnp

from flaxen.errors import GraphStateMismatchError, NNXArgumentError
from flaxen.nnx import _graph_ops as _graph
from flaxen.nnx import filterlib
from flaxen.nnx._snapshots import SNAPSHOT_TYPES
from flaxen.nnx.pytreelib import Pytree
from flaxen.nnx.statelib import State, _flat_mapping
from flaxen.nnx.variablelib import Variable

try:  # today's Pytree tells data attributes from static ones (nnx.data)
    from flaxen.nnx.pytreelib import data as _data
except ImportError:  # pragma: no cover - before pytreelib exists
    def _data(value: tp.Any = None, /, **kwargs: tp.Any) -> tp.Any:
        return value

A = tp.TypeVar("A")


def _path_str(path: tuple) -> str:
    return "/" + "/".join(map(str, path))


def _metadata(leaf: tp.Any) -> dict:
    get = getattr(leaf, "get_metadata", None)
    md = dict(get()) if get is not None else {}
    md.pop("value", None)
    return md


def _flat(node: tp.Any, only: filterlib.Filter) -> dict:
    if isinstance(node, State):
        pred = filterlib.to_predicate(only)
        return {p: v for p, v in _flat_mapping(node).items() if pred(p, v)}
    only_state: State = _graph.state(node, only)  # type: ignore[assignment]  # one filter
    return _flat_mapping(only_state)


class EMA(Pytree):
    """Exponential moving average of the ``only`` Variables of ``params`` (a model or State).

    Attributes: ``decay``, ``filter`` (the ``only`` filter), ``params`` (a State of Variables
    holding the averages).
    """

    def __init__(self, params: tp.Any, decay: float, *, only: filterlib.Filter = ...,
                 graph: bool | None = None) -> None:
        self.graph = graph
        self.decay = decay
        self.filter = only
        items = []
        for path, leaf in _flat(params, only).items():
            if not (isinstance(leaf, Variable) or type(leaf) in SNAPSHOT_TYPES):
                raise NNXArgumentError(
                    _path_str(path), f"EMA tracks Variables only, found a "
                    f"{type(leaf).__name__}", "Narrow the `only` filter to Variables.")
            # ``.type``: a Variable's own class, or the class a snapshot stands for
            items.append((path, leaf.type(jnp.copy(leaf.value), **_metadata(leaf))))
        self.params = _data(State.from_flat_path(items))

    def update(self, updates: tp.Any) -> None:
        """``ema = decay * ema + (1 - decay) * new`` for each tracked Variable; ``updates`` is
        the model (or a State) with the structure the EMA was built from."""
        new = _flat(updates, self.filter)
        d = self.decay
        for path, var in _flat_mapping(self.params).items():
            if path not in new:
                raise GraphStateMismatchError(
                    _path_str(path), "EMA.update: the new parameters have no entry for this "
                    "tracked Variable", "Pass a model of the structure the EMA was built from.")
            var.value = d * var.value + (1.0 - d) * new[path].value

    def apply_to(self, model: A) -> A:
        """A model like ``model`` whose tracked Variables are this EMA's (so it follows later
        updates); its other state comes from ``model``."""
        out = _graph.clone(model)
        for path, var in _flat_mapping(self.params).items():
            _set_at(out, path, var)
        return out


def _set_at(root: tp.Any, path: tuple, value: tp.Any) -> None:
    """Puts ``value`` at ``path`` inside the object graph ``root`` (attribute or item)."""
    node = root
    for k in path[:-1]:
        node = node[k] if isinstance(node, (tp.Mapping, list, tuple)) or isinstance(k, int) \
            else getattr(node, k)
    k = path[-1]
    if isinstance(node, (tp.MutableMapping, list)) or isinstance(k, int):
        node[k] = value
    else:
        setattr(node, k, value)
