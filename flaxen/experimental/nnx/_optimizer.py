"""Flax 0.8.3's ``nnx.Optimizer`` (``flaxen.experimental.nnx`` only): it holds the model,
and ``update(grads)`` takes the gradients alone. Today's face (``Optimizer(model, tx,
wrt=...)`` with ``update(model, grads)``) is :mod:`flaxen.nnx.training.optimizer`.

>>> import jax.numpy as jnp, optax
>>> from flaxen.experimental import nnx
>>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
>>> opt = nnx.Optimizer(model, optax.sgd(0.1))
>>> grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))))(model)
>>> opt.update(grads)
>>> int(opt.step.value)
1
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp
import optax

from flaxen.errors import GraphStateMismatchError
from flaxen.experimental.nnx._legacy_module import LegacyModule
from flaxen.experimental.nnx._variable_state import VariableState
from flaxen.experimental.nnx.graph import state as _state
from flaxen.experimental.nnx.graph import update as _update
from flaxen.nnx import filterlib
from flaxen.nnx.module import Module
from flaxen.nnx.statelib import State, _flat_mapping
from flaxen.nnx.training.optimizer import OptArray, OptState
from flaxen.nnx.training.optimizer import _raise_empty_wrt as _raise_empty_wrt_today
from flaxen.nnx.variablelib import Param

try:  # today's Pytree tells data attributes from static ones (nnx.data)
    from flaxen.nnx.pytreelib import data as _data
except ImportError:  # pragma: no cover - before pytreelib exists
    def _data(value: tp.Any = None, /, **kwargs: tp.Any) -> tp.Any:
        return value


def _values(tree: tp.Any) -> tp.Any:
    """A State of VariableStates (or arrays) as plain nested dicts of arrays."""
    if isinstance(tree, State):
        tree = tree._mapping
    if isinstance(tree, dict):
        return {k: _values(v) for k, v in tree.items()}
    if isinstance(tree, VariableState):
        return tree.value
    return tree


class Optimizer(LegacyModule):
    """Holds ``model``, ``tx`` (an Optax GradientTransformation), ``opt_state`` and ``step``.

    ``update(grads)`` applies ``tx`` to the model's ``wrt`` state (``nnx.Param`` by default)
    in place; ``grads`` must have the same structure as ``nnx.state(model, wrt)``.
    """

    def __init__(self, model: Module, tx: optax.GradientTransformation,
                 wrt: filterlib.Filter = Param) -> None:
        self.step = OptState(jnp.array(0, dtype=jnp.uint32))
        self.model = model
        self.tx = tx
        self.wrt = wrt
        params_state: State = _state(model, wrt)  # type: ignore[assignment]  # one filter
        if not _flat_mapping(params_state):
            # today's message, listing this face's own (copied) State of the model
            _raise_empty_wrt_today(model, wrt, all_state=_state(model))
        params = _values(params_state)
        leaves, treedef = jax.tree_util.tree_flatten(tx.init(params))
        # a tuple of Variables (not a list) so the graph walk knows it cannot change size
        self._opt_leaves = _data(tuple(OptArray(x) for x in leaves))
        self._opt_treedef: tp.Any = treedef  # jax's PyTreeDef (its stub does not resolve)

    @property
    def opt_state(self) -> tp.Any:
        return self._opt_treedef.unflatten([v.value for v in self._opt_leaves])

    def __repr__(self) -> str:
        # the flattened optimizer state is an implementation detail: show opt_state instead
        from flaxen.nnx.visualization import _indent, module_repr

        fields = [("step", self.step), ("model", self.model), ("tx", self.tx),
                  ("wrt", self.wrt), ("opt_state", self.opt_state)]
        lines = [f"  {k}={_indent(module_repr(v) if isinstance(v, Module) else repr(v))}"
                 for k, v in fields]
        return f"{type(self).__name__}(\n" + ",\n".join(lines) + "\n)"

    def update(self, grads: State, **kwargs: tp.Any) -> None:
        params_state: State = _state(self.model, self.wrt)  # type: ignore[assignment]  # 1 filter
        params = _values(params_state)
        grad_values = _values(grads)
        p_def: tp.Any = jax.tree_util.tree_structure(params)
        g_def = jax.tree_util.tree_structure(grad_values)
        if p_def != g_def:
            _raise_mismatch(params_state, grads)
        updates, new_opt_state = self.tx.update(grad_values, self.opt_state, params, **kwargs)
        new_params = optax.apply_updates(params, updates)
        for var, x in zip(self._opt_leaves, jax.tree_util.tree_leaves(new_opt_state)):
            var.value = x
        _update(self.model, _as_state(params_state, new_params))
        self.step.value = self.step.value + 1


def _as_state(template: State, values: dict) -> State:
    return State._from_raw(_replaced(template._mapping, values))


def _replaced(template: dict, values: dict) -> dict:
    # a State's nested levels are dicts (see flaxen.nnx.statelib.State)
    return {k: _replaced(v, values[k]) if isinstance(v, dict) else v.replace(values[k])
            for k, v in template.items()}


def _raise_mismatch(params: State, grads: tp.Any) -> tp.NoReturn:
    p_paths = set(_flat_mapping(params))
    g_paths = set(_flat_mapping(State(grads))) if isinstance(grads, (State, dict)) else set()
    missing = sorted(p_paths - g_paths, key=str)
    extra = sorted(g_paths - p_paths, key=str)
    where = []
    if missing:
        where.append(f"missing {'/' + '/'.join(map(str, missing[0]))}")
    if extra:
        where.append(f"unexpected {'/' + '/'.join(map(str, extra[0]))}")
    detail = ", ".join(where) or "same paths but different nesting or leaf types"
    raise GraphStateMismatchError(
        "",
        f"Optimizer.update: the gradients do not have the structure of the model's parameters "
        f"({detail}). Compute them with nnx.grad(loss_fn, wrt=...) on the same model and the "
        "same wrt filter as the Optimizer."
    )
