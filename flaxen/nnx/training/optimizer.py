"""``nnx.Optimizer``: Optax state for the ``wrt`` Variables of a model (today's face).

``Optimizer(model, tx, wrt=nnx.Param)`` keeps ``tx``'s state (one :class:`OptVariable` per
state array, carrying the parameter's metadata such as its sharding) and a ``step`` counter;
``update(model, grads)`` applies ``tx`` to the model's ``wrt`` Variables in place and returns
the updates. The optimizer does not hold the model: :class:`ModelAndOptimizer` does, with
``update(grads)``. Flax 0.8.3's face (model inside, ``update(grads)``) lives in
``flaxen/experimental/nnx/_optimizer.py``.

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
from flaxen.nnx import _graph_ops as _graph
from flaxen.nnx import filterlib
from flaxen.nnx.module import Module
from flaxen.nnx.statelib import State
from flaxen.nnx.variablelib import Param, Variable, VariableState

try:  # today's Pytree tells data attributes from static ones (nnx.data)
    from flaxen.nnx.pytreelib import data as _data
except ImportError:  # pragma: no cover - before pytreelib exists
    def _data(value: tp.Any = None, /, **kwargs: tp.Any) -> tp.Any:
        return value

M = tp.TypeVar("M")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
_VARS = (Variable, VariableState)
_Ref: tp.Any = getattr(jax, "Ref", ())


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
    return isinstance(x, _VARS)


def _metadata(v: tp.Any) -> dict:
    get = getattr(v, "get_metadata", None)
    md = dict(get()) if get is not None else dict(getattr(v, "_metadata", {}) or {})
    md.pop("value", None)
    return md


def to_opt_state(tree: tp.Any) -> tp.Any:
    """``tree`` (an Optax state) with each Variable leaf an :class:`OptVariable` (its metadata
    kept; ``optimizer_sharding`` becomes ``out_sharding``) and each array an
    :class:`OptArray`."""

    def wrap(x: tp.Any) -> OptState:
        if _is_var(x):
            md = _metadata(x)
            if "optimizer_sharding" in md:
                md["out_sharding"] = md.pop("optimizer_sharding")
            return OptVariable(x.value, **md)
        return OptArray(x)

    return jax.tree_util.tree_map(wrap, tree, is_leaf=_is_var)


def as_pure(tree: tp.Any) -> tp.Any:
    """``tree`` with States as plain dicts and Variables as their values (arrays only)."""

    def pure(x: tp.Any) -> tp.Any:
        if _is_var(x):
            value = x.value
            return value[...] if isinstance(value, _Ref) else value  # read a mutable array
        if isinstance(x, State):
            return {k: as_pure(v) for k, v in x.raw_mapping.items()}
        return x

    return jax.tree_util.tree_map(pure, tree, is_leaf=lambda x: _is_var(x)
                                  or isinstance(x, State))


def _var_leaves(tree: tp.Any, like: tp.Any) -> list:
    """The Variables of ``tree`` in the leaf order of ``like`` (its pure form)."""
    def keep(x: tp.Any) -> tp.Any:
        if isinstance(x, State):
            return {k: keep(v) for k, v in x.raw_mapping.items()}
        return x

    boxed = jax.tree_util.tree_map(keep, tree, is_leaf=lambda x: _is_var(x)
                                   or isinstance(x, State))
    treedef: tp.Any  # jax's PyTreeDef (its stub does not resolve)
    leaves, treedef = jax.tree_util.tree_flatten(boxed, is_leaf=_is_var)
    treedef.flatten_up_to(like)  # raises if the two structures differ
    return leaves


def _filtered_state(node: tp.Any, wrt: filterlib.Filter) -> State:
    """``nnx.state(node, wrt)`` for a graph node, or the ``wrt`` part of a State."""
    if isinstance(node, State):
        pred = filterlib.to_predicate(wrt)
        items = [(p, v) for p, v in node.flat_state().items() if pred(p, v)]
        return State.from_flat_path(items)
    if isinstance(node, tp.Mapping) and not _graph.is_node(node):
        return State(node)
    return _graph.state(node, wrt)  # type: ignore[return-value]  # one filter: one State


def _like(template: State, values: tp.Mapping) -> State:
    """``values`` (nested dicts of arrays) in the State nesting of ``template``."""
    return State._from_raw({k: _like(v, values[k]) if isinstance(v, State) else values[k]
                            for k, v in template.raw_mapping.items()})


def _rebuild(template: State, values: tp.Mapping) -> State:
    out = {}
    for k, v in template.raw_mapping.items():
        out[k] = _rebuild(v, values[k]) if isinstance(v, State) else v.replace(values[k])
    return State._from_raw(out)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: tp.Any = _Missing()


def _wrt_required(init: F) -> F:
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


class Optimizer(Module, tp.Generic[M]):
    """Optax state and a step count for the ``wrt`` Variables of a model.

    Attributes: ``step`` (an :class:`OptState`), ``tx``, ``opt_state`` (``tx``'s state with
    :class:`OptState` leaves), ``wrt``. ``update(model, grads, **kwargs)`` applies one step.
    """

    @_wrt_required
    def __init__(self, model: M, tx: optax.GradientTransformation, *,
                 wrt: filterlib.Filter, graph: bool | None = None) -> None:
        self.graph = graph
        self.step = OptState(jnp.array(0, dtype=jnp.uint32))
        self.tx = tx
        params = _filtered_state(model, wrt)
        if not params.flat_state():
            _raise_empty_wrt(model, wrt)
        self.opt_state = _data(to_opt_state(tx.init(params)))
        self.wrt = wrt

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
        with the same filter), updates ``opt_state`` and ``step``; returns the updates.
        ``kwargs`` go to ``tx.update`` (e.g. ``value``, ``grad``, ``value_fn`` for a line
        search)."""
        if grads is MISSING:
            raise NNXArgumentError(
                "", "Optimizer.update: Missing required argument `grads`: since Flax 0.11 "
                "update takes both the model and the gradients, update(model, grads)",
                "Pass the model first, or use nnx.ModelAndOptimizer, whose update(grads) "
                "takes the gradients alone.")
        params_state = _filtered_state(model, self.wrt)
        params = as_pure(params_state)
        grad_values = as_pure(_filtered_state(grads, self.wrt))
        p_def: tp.Any = jax.tree_util.tree_structure(params)  # PyTreeDef (stub unresolved)
        if p_def != jax.tree_util.tree_structure(grad_values):
            _raise_mismatch(params_state, grads)
        opt_values = as_pure(self.opt_state)
        updates, new_opt = self.tx.update(grad_values, opt_values, params, **as_pure(kwargs))
        new_params = optax.apply_updates(params, updates)
        for var, x in zip(_var_leaves(self.opt_state, new_opt),
                          jax.tree_util.tree_leaves(new_opt)):
            var.value = x
        if isinstance(model, State):
            _update_state(model, new_params)
        else:
            _write_back(model, new_params)
        self.step.value = self.step.value + 1
        return _like(params_state, updates)


def _flat_dict(tree: tp.Mapping, prefix: tuple = ()) -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, tp.Mapping):
            out.update(_flat_dict(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


def _write_back(model: tp.Any, values: tp.Mapping) -> None:
    """Sets the model's own Variables (through ``set_value``, so a Variable whose value lives
    in a ``jax.Ref`` is written in place) from the nested dict ``values``."""
    flat = _flat_dict(values)
    for path, obj in _graph.iter_graph(model):
        if isinstance(obj, Variable) and path in flat:
            obj.value = flat.pop(path)
    if flat:  # paths the walk did not reach (should not happen): fall back to nnx.update
        _graph.update(model, _rebuild(
            _graph.state(model, lambda p, _: p in flat),  # type: ignore[arg-type]  # one State
            _nest(flat)))


def _nest(flat: dict) -> dict:
    out: dict = {}
    for path, v in flat.items():
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = v
    return out


def _update_state(state: State, values: tp.Mapping) -> None:
    for k, v in values.items():
        leaf = state.raw_mapping[k]
        if isinstance(leaf, State):
            _update_state(leaf, v)
        elif isinstance(leaf, Variable):
            leaf.value = v
        else:
            state.raw_mapping[k] = leaf.replace(v)


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


def _raise_empty_wrt(model: tp.Any, wrt: tp.Any) -> tp.NoReturn:
    found: dict[str, list[str]] = {}
    if _graph.is_node(model):
        all_state: State = _graph.state(model)  # type: ignore[assignment]  # no filter: one
        for path, leaf in all_state.flat_state().items():
            found.setdefault(leaf.type.__name__, []).append("/" + "/".join(map(str, path)))
    have = "; ".join(f"{k} at {', '.join(v[:3])}{', ...' if len(v) > 3 else ''}"
                     for k, v in found.items()) or "none"
    raise NNXFilterError(
        "",
        f"nnx.Optimizer: the filter wrt={_filter_name(wrt)} matches no Variable of the "
        f"{type(model).__name__} model, so there is nothing to optimize (the model's Variables: "
        f"{have}). Pass a wrt filter that selects the state to train, e.g. wrt=nnx.Param."
    )


def _raise_mismatch(params: State, grads: tp.Any) -> tp.NoReturn:
    p_paths = set(params.flat_state())
    try:
        g_paths = set(_filtered_state(grads, ...).flat_state())
    except Exception:
        g_paths = set()
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
