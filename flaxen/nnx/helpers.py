"""``nnx.helpers``: the small conveniences today's ``flax.nnx.helpers`` gathers in one place.

``TrainState`` (the functional train state: graphdef + State + Optax) lives in
:mod:`flaxen.nnx.training.train_state`; the containers ``Dict``, ``List`` and ``Sequential``
in :mod:`flaxen.nnx.module`. This module re-exports them under Flax's path.

>>> from flaxen.nnx import helpers
>>> helpers.TrainState.__name__, helpers.Sequential.__name__
('TrainState', 'Sequential')
"""

from __future__ import annotations

import inspect
import typing as tp

from flaxen.nnx.module import Dict, List, Module, Sequential
from flaxen.nnx.proxy_caller import ApplyCaller
from flaxen.nnx.statelib import State
from flaxen.nnx.training.train_state import TrainState

A = tp.TypeVar("A")
M = tp.TypeVar("M", bound=Module)
TS = tp.TypeVar("TS", bound=TrainState)


class ModuleDefApply(tp.Protocol, tp.Generic[M]):  # type: ignore[misc]
    """The static type of ``graphdef.apply``: States in, a caller returning
    ``(output, (state, graphdef))`` out.

    >>> from flaxen import nnx
    >>> apply: ModuleDefApply[nnx.Linear]  # annotations only
    """

    def __call__(self, state: State, *states: State) -> ApplyCaller[tuple[State, tp.Any]]: ...


def has_keyword_arg(func: tp.Callable[..., tp.Any], name: str) -> bool:
    """Whether ``func`` accepts ``name`` as a keyword (keyword-only or positional-or-keyword).

    >>> has_keyword_arg(lambda x, *, rngs=None: x, "rngs")
    True
    >>> has_keyword_arg(lambda x, /: x, "x")
    False
    """
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.name == name and p.kind in kinds
               for p in inspect.signature(func).parameters.values())


__all__ = ["Dict", "List", "ModuleDefApply", "Sequential", "TrainState", "has_keyword_arg"]
