"""``nnx.TrainState``: a model's graph definition, its trainable State, Optax and a step count.

The functional counterpart of :class:`~flaxen.nnx.Optimizer`: an immutable pytree (a
:class:`flaxen.struct.PyTreeNode`) that passes straight through ``jax.jit``. ``graphdef`` and
``tx`` are static; ``params``, ``opt_state`` and ``step`` are traced. Subclass it to carry more
state (e.g. ``batch_stats: nnx.State``); :meth:`TrainState.apply` takes such fields by name.

>>> import jax, jax.numpy as jnp, optax
>>> from flaxen import nnx
>>> graphdef, params = nnx.split(nnx.Linear(2, 1, rngs=nnx.Rngs(0)))
>>> state = nnx.TrainState.create(graphdef, params=params, tx=optax.sgd(0.1))
>>> def loss_fn(params):
...     y, _ = state.apply(params)(jnp.ones((1, 2)))
...     return jnp.sum(y)
>>> state = jax.jit(lambda s: s.apply_gradients(grads=jax.grad(loss_fn)(s.params)))(state)
>>> int(state.step), state.params.bias.value.tolist()
(1, [-0.10000000149011612])
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp
import optax

from flaxen import struct
from flaxen.errors import GraphStateMismatchError, NNXArgumentError
from flaxen.nnx import _graphdef
from flaxen.nnx.graphlib import GraphDef
from flaxen.nnx.statelib import State, _flat_mapping

M = tp.TypeVar("M")
TS = tp.TypeVar("TS", bound="TrainState")


class TrainState(tp.Generic[M], struct.PyTreeNode):
    """Fields (in Flax's order): ``graphdef`` (static), ``params``, ``opt_state``, ``step``,
    ``tx`` (static). Generic in the model type: ``nnx.TrainState[MyModel]``.

    Build one with :meth:`create`; :meth:`apply_gradients` returns the next state.
    """

    graphdef: GraphDef[M] = struct.field(pytree_node=False)
    params: State
    opt_state: optax.OptState
    step: jax.Array
    tx: optax.GradientTransformation = struct.field(pytree_node=False)

    @classmethod
    def create(cls: type[TS], graphdef: GraphDef, *, params: State,
               tx: optax.GradientTransformation, step: int | jax.Array = 0,
               **kwargs: tp.Any) -> TS:
        """A new state with ``opt_state=tx.init(params)``; ``kwargs`` fill a subclass's fields."""
        if not isinstance(graphdef, _graphdef.GraphDef):  # either face's GraphDef
            raise NNXArgumentError(
                "",
                f"TrainState.create expects the model's GraphDef first (from nnx.split(model)), "
                f"got {type(graphdef).__name__}."
            )
        return cls(graphdef=graphdef, params=params, tx=tx, opt_state=tx.init(params),
                   step=jnp.asarray(step), **kwargs)

    def apply(self, state: State | str, *states: State | str) -> tp.Any:
        """Merges ``graphdef`` with the given States (or names of this TrainState's fields)
        and returns a caller: ``ts.apply('params')(x)`` or ``ts.apply(params).method(x)``
        gives ``(output, (graphdef, updated_state))``.
        """
        resolved = []
        for s in (state, *states):
            if isinstance(s, str):
                name = s
                try:
                    s = getattr(self, name)
                except AttributeError:
                    raise AttributeError(
                        f"TrainState.apply: {type(self).__name__} has no field {s!r}. Pass a "
                        "State, or the name of a field that holds one."
                    ) from None
                if not isinstance(s, State):
                    raise NNXArgumentError(
                        "",
                        f"TrainState.apply: expected {type(self).__name__}.{name} to be a "
                        f"State, got a {type(s).__name__}",
                        "Name only fields that hold States (params, batch_stats, ...), or "
                        "pass the State itself.")
            resolved.append(s)
        return self.graphdef.apply(*resolved)

    def apply_gradients(self: TS, grads: State, **kwargs: tp.Any) -> TS:
        """The next state: ``params`` and ``opt_state`` updated by ``tx``, ``step + 1``;
        ``kwargs`` replace other fields (e.g. ``batch_stats=...``)."""
        g_def: tp.Any = jax.tree_util.tree_structure(grads)  # PyTreeDef (stub unresolved)
        p_def = jax.tree_util.tree_structure(self.params)
        if g_def != p_def:
            _raise_mismatch(self.params, grads)
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        return self.replace(params=params, opt_state=opt_state, step=self.step + 1, **kwargs)


TrainState.__module__ = "flaxen.nnx.helpers"  # its public path, as Flax 0.12.8 names it

def _key(k: tp.Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _paths(tree: tp.Any) -> set[str]:
    if isinstance(tree, State):
        return {"/" + "/".join(map(str, p)) for p in _flat_mapping(tree)}
    out = set()
    for path, _ in jax.tree_util.tree_leaves_with_path(tree):
        if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and path[-1].name == "value":
            path = path[:-1]  # a Variable's (or a 0.8.3 snapshot's) array
        out.add("/" + "/".join(_key(k) for k in path))
    return out


def _raise_mismatch(params: State, grads: tp.Any) -> tp.NoReturn:
    p, g = _paths(params), _paths(grads)
    missing, extra = sorted(p - g), sorted(g - p)
    if missing:
        what = f"the parameter at {missing[0]} has no gradient"
    elif extra:
        what = f"the gradient at {extra[0]} has no parameter"
    else:
        what = "same paths, but the leaves differ in type or metadata"
    raise GraphStateMismatchError(
        "",
        f"TrainState.apply_gradients: grads do not have the structure of params ({what}). "
        "Differentiate with respect to state.params itself, e.g. jax.grad(loss_fn)(state.params)."
    )
