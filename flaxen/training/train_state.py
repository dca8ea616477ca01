"""``TrainState``: parameters, an Optax optimizer and its state, and a step counter.

>>> import jax.numpy as jnp, optax
>>> state = TrainState.create(apply_fn=None, params={'w': jnp.ones(2)}, tx=optax.sgd(0.5))
>>> state = state.apply_gradients(grads={'w': jnp.ones(2)})
>>> int(state.step), state.params['w'].tolist()
(1, [0.5, 0.5])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from flaxen import core, struct  # noqa: F401 - core: importable from here in Flax
from flaxen.core.frozen_dict import FrozenDict

# A top-level params collection under this name is not optimized: each update copies the
# gradient in directly (used e.g. for fp8 scaling factors that ride on the backward pass).
OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"


def _path(path) -> str:
    return "/" + "/".join(_key_name(k) for k in path) if path else "/"


def _key_name(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _check_grads(grads: Any, params: Any) -> None:
    """Raises a clear error if ``grads`` is not shaped like ``params``.

    Only the cheap structure comparison runs when everything matches; the path-by-path
    search runs only to explain a mismatch.
    """
    g_leaves, g_def = jax.tree_util.tree_flatten_with_path(grads)
    p_leaves, p_def = jax.tree_util.tree_flatten_with_path(params)
    if g_def != p_def:  # type: ignore[operator]
        g_paths = {_path(p): p for p, _ in g_leaves}
        p_paths = {_path(p): p for p, _ in p_leaves}
        missing = [p for p in p_paths if p not in g_paths]
        extra = [p for p in g_paths if p not in p_paths]
        if missing:
            what = f"the parameter at {missing[0]} has no gradient"
        elif extra:
            what = f"the gradient at {extra[0]} has no parameter"
        else:
            what = "the containers differ in type or order (e.g. dict vs FrozenDict or tuple)"
        raise ValueError(
            f"apply_gradients: grads do not have the structure of params: {what} "
            f"({len(g_paths)} gradient leaves, {len(p_paths)} parameter leaves). Pass the "
            "gradient of the loss with respect to state.params itself, e.g. "
            "jax.grad(loss_fn)(state.params)."
        )
    for (path, g), (_, p) in zip(g_leaves, p_leaves):
        g_shape, p_shape = getattr(g, "shape", None), getattr(p, "shape", None)
        if g_shape is not None and p_shape is not None and tuple(g_shape) != tuple(p_shape):
            raise TypeError(
                f"apply_gradients: the gradient at {_path(path)} has shape {tuple(g_shape)} but "
                f"the parameter has shape {tuple(p_shape)}. Gradients must be computed with "
                "respect to state.params."
            )


class TrainState(struct.PyTreeNode):
    """Train state for the common case of one Optax optimizer.

    ``apply_fn`` (usually ``model.apply``) and ``tx`` are static fields; ``step``, ``params``
    and ``opt_state`` are pytree leaves. Subclass to carry more state, e.g.
    ``class State(TrainState): batch_stats: Any = None``.

    Attributes:
      step: incremented by every ``apply_gradients`` call, starting at 0.
      apply_fn: the function that applies the model (not part of the pytree).
      params: the parameters updated by ``tx``.
      tx: an ``optax.GradientTransformation`` (not part of the pytree).
      opt_state: the state of ``tx``.
    """

    step: int | jax.Array
    apply_fn: Callable = struct.field(pytree_node=False)
    params: FrozenDict[str, Any] = struct.field(pytree_node=True)
    tx: optax.GradientTransformation = struct.field(pytree_node=False)
    opt_state: optax.OptState = struct.field(pytree_node=True)

    def apply_gradients(self, *, grads, **kwargs):
        """Returns a copy with ``step + 1`` and ``params``/``opt_state`` updated by ``tx``.

        ``grads`` must have the pytree structure of ``params``; ``kwargs`` replace other fields.
        """
        overwrite = isinstance(grads, (dict, FrozenDict)) and OVERWRITE_WITH_GRADIENT in grads
        if overwrite:
            grads_opt, params_opt = grads["params"], self.params["params"]
        else:
            grads_opt, params_opt = grads, self.params
        _check_grads(grads_opt, params_opt)
        updates, new_opt_state = self.tx.update(grads_opt, self.opt_state, params_opt)
        new_params = optax.apply_updates(params_opt, updates)
        if overwrite:
            new_params = {"params": new_params,
                          OVERWRITE_WITH_GRADIENT: grads[OVERWRITE_WITH_GRADIENT]}
        return self.replace(
            step=self.step + 1, params=new_params, opt_state=new_opt_state, **kwargs
        )

    @classmethod
    def create(cls, *, apply_fn, params, tx, **kwargs):
        """A new state with ``step=0`` and ``opt_state=tx.init(params)``; ``kwargs`` fill the
        extra fields of a subclass."""
        if isinstance(params, (dict, FrozenDict)) and OVERWRITE_WITH_GRADIENT in params:
            opt_state = tx.init(params["params"])
        else:
            opt_state = tx.init(params)
        return cls(step=0, apply_fn=apply_fn, params=params, tx=tx, opt_state=opt_state, **kwargs)
