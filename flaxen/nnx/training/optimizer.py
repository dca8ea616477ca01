"""``nnx.Optimizer``: Optax state for the ``wrt`` Variables of a model (today's face).

``Optimizer(model, tx, wrt=nnx.Param)`` keeps ``tx``'s state (one :class:`OptVariable` per
state array, carrying the parameter's metadata such as its sharding) and a ``step`` counter;
``update(model, grads)`` applies ``tx`` to the model's ``wrt`` Variables in place and returns
the updates. The optimizer does not hold the model: :class:`ModelAndOptimizer` does, with
``update(grads)``. Flax 0.8.3's face (model inside, ``update(grads)``) lives in
``flaxen/experimental/nnx/_optimizer.py``.

Everything here is a short composition of the public functions: ``nnx.state`` picks the
``wrt`` Variables (the model's walk is cached), ``nnx.as_pure`` turns States of Variables
into States of arrays for Optax (so label trees built with ``nnx.map_state`` line up with
what ``optax.partition`` sees), and ``nnx.update`` writes values back where a plain
assignment to each Variable cannot (bare-array attributes).

>>> import jax.numpy as jnp, optax
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
>>> opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
>>> grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))))(model)
>>> _ = opt.update(model, grads)
>>> int(opt.step.value), model.bias.value.tolist()
(1, [-0.10000000149011612])
"""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp
import optax

from flaxen.errors import GraphStateMismatchError, NNXArgumentError, NNXFilterError
from flaxen.nnx import filterlib
from flaxen.nnx.graphlib import as_pure, state, update
from flaxen.nnx.pytreelib import Pytree, chains_bookkeeping, data
from flaxen.nnx.statelib import State, _flat_mapping
from flaxen.nnx.variablelib import Param, Variable

M = tp.TypeVar("M")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])


class OptState(Variable):
    """One leaf of an Optax optimizer state."""

    __slots__ = ()


class OptArray(OptState):
    """Optimizer state for a plain array (a scalar count, ...)."""

    __slots__ = ()


class OptVariable(OptState):
    """Optimizer state mirroring a Variable: it carries that Variable's metadata."""

    __slots__ = ()


def _is_var(x: tp.Any) -> bool:
    return isinstance(x, Variable)


def to_opt_state(tree: tp.Any) -> tp.Any:
    """``tree`` (an Optax state) with each Variable leaf an :class:`OptVariable` (its metadata
    kept; ``optimizer_sharding`` becomes ``out_sharding``) and each array an
    :class:`OptArray`.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> opt = to_opt_state((jnp.zeros(()), nnx.State({'w': nnx.Param(jnp.ones(2))})))
    >>> type(opt[0]).__name__, type(opt[1]['w']).__name__
    ('OptArray', 'OptVariable')
    """

    def wrap(x: tp.Any) -> OptState:
        if isinstance(x, Variable):
            md = x.get_metadata()
            if "optimizer_sharding" in md:
                md["out_sharding"] = md.pop("optimizer_sharding")
            return OptVariable(x.get_value(), **md)
        return OptArray(x)

    return jax.tree_util.tree_map(wrap, tree, is_leaf=_is_var)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: tp.Any = _Missing()


def _wrt_required(init: F) -> F:
    # a wrapper (not a default) so that leaving `wrt` out names the 0.11 change and the fix
    @functools.wraps(init)
    def wrapper(self: tp.Any, *args: tp.Any, wrt: tp.Any = MISSING, **kwargs: tp.Any) -> None:
        if wrt is MISSING:
            raise NNXArgumentError(
                "", f"{type(self).__name__}(model, tx): Missing required argument `wrt`: "
                "since Flax 0.11 the optimizer only tracks the Variables it is told to",
                "Pass e.g. wrt=nnx.Param (the filter your nnx.grad differentiates), or use "
                "nnx.ModelAndOptimizer(model, tx) for the older model-holding optimizer.")
        init(self, *args, wrt=wrt, **kwargs)

    return tp.cast(F, wrapper)


class Optimizer(Pytree, tp.Generic[M]):
    """Optax state and a step count for the ``wrt`` Variables of a model.

    Attributes: ``step`` (an :class:`OptState`), ``tx``, ``opt_state`` (``tx``'s state with
    :class:`OptState` leaves: ``tx.init`` sees ``nnx.state(model, wrt)``, so per-parameter
    parts are States of :class:`OptVariable`), ``wrt``, ``graph`` (the ``graph=`` mode of
    the walks; ``None`` follows ``nnx.set_graph_mode``).

    >>> import jax.numpy as jnp, optax
    >>> from flaxen import nnx
    >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> labels = nnx.map_state(lambda path, _: path[-1], nnx.state(model, nnx.Param))
    >>> tx = optax.multi_transform({'kernel': optax.sgd(0.1), 'bias': optax.set_to_zero()},
    ...                            labels)
    >>> opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    >>> updates = opt.update(model, nnx.grad(lambda m: m(jnp.ones((1, 2))).sum())(model))
    >>> updates['bias'].tolist(), model.bias.value.tolist()
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    """

    @_wrt_required
    def __init__(self, model: M, tx: optax.GradientTransformation, *,
                 wrt: filterlib.Filter, graph: bool | None = None) -> None:
        self.graph = graph
        self.step = OptState(jnp.array(0, dtype=jnp.uint32))
        self.tx = tx
        # a wrt that selects nothing is allowed, as in Flax: update then changes nothing but
        # the step (a frozen model whose LoRA or other Variables are added later)
        params = state(model, wrt, graph=graph)
        self.opt_state = data(to_opt_state(tx.init(params)))
        self.wrt = wrt

    @chains_bookkeeping
    def __getattr__(self, name: str) -> tp.Any:
        if name == "model":
            raise AttributeError(
                f"{type(self).__name__} has no attribute 'model': since Flax 0.11 "
                "nnx.Optimizer does not hold the model (pass it to update(model, grads)). "
                "Use nnx.ModelAndOptimizer(model, tx) to keep the model inside.")
        parent = getattr(super(), "__getattr__", None)
        if parent is not None:
            return parent(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def update(self, model: M, grads: tp.Any = MISSING, /, **kwargs: tp.Any) -> tp.Any:
        """Applies ``tx`` to ``model``'s ``wrt`` Variables given ``grads`` (from ``nnx.grad``
        with the same filter), updates ``opt_state`` and ``step``; returns the updates (a
        State of arrays shaped like ``nnx.state(model, wrt)``). ``kwargs`` go to
        ``tx.update`` with Variables replaced by their values (e.g. ``value``, ``grad``,
        ``value_fn`` for a line search)."""
        if grads is MISSING:
            raise NNXArgumentError(
                "", "Optimizer.update: Missing required argument `grads`: since Flax 0.11 "
                "update takes both the model and the gradients, update(model, grads)",
                "Pass the model first, or use nnx.ModelAndOptimizer, whose update(grads) "
                "takes the gradients alone.")
        params_state = state(model, self.wrt, graph=self.graph)
        params = as_pure(params_state)
        grad_arrays = as_pure(_select(grads, self.wrt, self.graph))
        p_def: tp.Any = jax.tree_util.tree_structure(params)  # PyTreeDef (stub unresolved)
        if p_def != jax.tree_util.tree_structure(grad_arrays):
            _raise_mismatch(params_state, grads, self.wrt, self.graph)
        opt_vars = jax.tree_util.tree_leaves(self.opt_state, is_leaf=_is_var)
        updates, new_opt = self.tx.update(grad_arrays, as_pure(self.opt_state), params,
                                          **as_pure(kwargs))
        new_params = optax.apply_updates(params, updates)
        _assign(model, params_state, p_def, new_params, self.graph)
        new_leaves = jax.tree_util.tree_leaves(new_opt)
        if len(new_leaves) == len(opt_vars):
            for var, x in zip(opt_vars, new_leaves):
                var.set_value(x)
        else:  # tx changed its state's shape: match the leaves by path instead
            update(self.opt_state, state(new_opt, graph=self.graph))
        self.step.set_value(self.step.get_value() + 1)
        return updates


def _select(grads: tp.Any, wrt: filterlib.Filter, graph: bool | None) -> tp.Any:
    """``nnx.state(grads, wrt)``. Gradients are a new State every step, which the walk's
    cache cannot serve, so a State is filtered directly (``State.filter``, several times
    cheaper than walking it)."""
    if type(grads) is State:
        return grads.filter(wrt)
    return state(grads, wrt, graph=graph)


def _assign(model: tp.Any, params_state: tp.Any, p_def: tp.Any, new_params: tp.Any,
            graph: bool | None) -> None:
    """Writes ``new_params`` into ``model``.

    ``params_state`` holds the model's own Variables, so when each of them is one leaf of
    ``p_def`` (the arrays' structure) the values go straight in, with no walk of the model.
    Bare-array attributes (or Variables holding a pytree) need ``nnx.update``; a mapping
    (a functional ``State``) is written entry by entry, as ``nnx.update`` rebuilds
    containers rather than filling them.
    """
    targets, v_def = jax.tree_util.tree_flatten(params_state, is_leaf=_is_var)
    if v_def == p_def and all(isinstance(t, Variable) for t in targets):
        for var, x in zip(targets, jax.tree_util.tree_leaves(new_params)):
            var.set_value(x)
    elif isinstance(model, tp.MutableMapping) and isinstance(new_params, State):
        for path, x in _flat_mapping(new_params).items():
            parent = model
            for k in path[:-1]:
                parent = parent[k]
            old = parent[path[-1]]
            if isinstance(old, Variable):
                old.set_value(x)
            else:
                parent[path[-1]] = x
    else:
        update(model, new_params)


class ModelAndOptimizer(Optimizer[M]):
    """An :class:`Optimizer` that holds its model: ``update(grads)`` (``wrt`` defaults to
    ``nnx.Param``).

    >>> import jax.numpy as jnp, optax
    >>> from flaxen import nnx
    >>> state = nnx.ModelAndOptimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), optax.sgd(0.1))
    >>> _ = state.update(nnx.grad(lambda m: m(jnp.ones((1, 2))).sum())(state.model))
    >>> int(state.step.value)
    1
    """

    def __init__(self, model: M, tx: optax.GradientTransformation, *,
                 wrt: filterlib.Filter = Param) -> None:
        super().__init__(model, tx, wrt=wrt)
        self.model = model

    def update(self, grads: tp.Any, /, **kwargs: tp.Any) -> tp.Any:  # type: ignore[override]
        return super().update(self.model, grads, **kwargs)


def _filter_name(f: tp.Any) -> str:
    if isinstance(f, type):
        return f"nnx.{f.__name__}" if f.__module__.startswith("flaxen.nnx") else f.__name__
    return repr(f)


def _kind(leaf: tp.Any) -> str:
    if isinstance(leaf, Variable):
        return type(leaf).__name__
    kind = getattr(leaf, "type", None)  # a Variable (or a 0.8.3 snapshot) names its type
    return kind.__name__ if isinstance(kind, type) else "plain array"


def _path(path: tuple) -> str:
    return "/" + "/".join(map(str, path))


def _raise_empty_wrt(model: tp.Any, wrt: tp.Any, graph: bool | None = None,
                     all_state: tp.Any = None) -> tp.NoReturn:
    """Raises the "``wrt`` matches nothing" error, listing what the model does hold (by
    kind: Variable type, or plain array for bare-array attributes). Only the 0.8.3 face's
    Optimizer refuses such a filter; today's, as Flax 0.12.8, accepts it."""
    found: dict[str, list[str]] = {}
    try:
        if all_state is None:
            all_state = state(model, graph=graph)
        flat = _flat_mapping(all_state).items() if isinstance(all_state, State) else ()
    except Exception:  # a model the walk rejects: the message just lists nothing
        flat = ()
    for path, leaf in flat:
        found.setdefault(_kind(leaf), []).append(_path(path))
    have = "; ".join(f"{k} at {', '.join(v[:3])}{', ...' if len(v) > 3 else ''}"
                     for k, v in found.items()) or "none"
    raise NNXFilterError(
        "",
        f"nnx.Optimizer: the filter wrt={_filter_name(wrt)} matches no Variable of the "
        f"{type(model).__name__} model, so there is nothing to optimize (the model's "
        f"Variables: {have}).",
        "Pass a wrt filter that selects the state to train, e.g. wrt=nnx.Param, or a "
        "path filter such as wrt=lambda path, x: path[-1] == 'w' for bare-array attributes.")


def _raise_mismatch(params: tp.Any, grads: tp.Any, wrt: tp.Any, graph: bool | None = None
                    ) -> tp.NoReturn:
    """Raises the gradients-vs-parameters structure error naming the first path that
    differs, and why when the gradient is there but ``wrt`` does not select it."""
    p_paths = set(_flat_mapping(params)) if isinstance(params, State) else set()
    g_all: dict = {}
    try:
        g_state = state(grads, graph=graph)
        if isinstance(g_state, State):
            g_all = _flat_mapping(g_state)
    except Exception:  # grads the walk rejects: report every parameter as missing
        pass
    pred = filterlib.to_predicate(wrt)
    g_paths = {p for p, v in g_all.items() if pred(p, v)}
    missing = sorted(p_paths - g_paths, key=str)
    extra = sorted(g_paths - p_paths, key=str)
    where = []
    if missing:
        where.append(f"missing {_path(missing[0])}")
        if missing[0] in g_all:
            where[-1] += (f": the gradient there is a {_kind(g_all[missing[0]])}, which "
                          f"wrt={_filter_name(wrt)} does not select")
    if extra:
        where.append(f"unexpected {_path(extra[0])}")
    detail = ", ".join(where) or "same paths but different nesting or leaf types"
    raise GraphStateMismatchError(
        "",
        f"Optimizer.update: the gradients do not have the structure of the model's parameters "
        f"({detail}).",
        "Compute them with nnx.grad(loss_fn, wrt=...) on the same model and the same wrt "
        "filter as the Optimizer.")
