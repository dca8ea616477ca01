"""The callables the lifted transforms hand to JAX (Flax 0.12.8's ``*Fn`` dataclasses).

A lifted transform turns ``f`` (a function of graph nodes) into a *pure* function that JAX
can trace, applies the JAX transform, and writes the state that comes out back into the
caller's objects. These dataclasses are that pure function, one per transform, with the
fields Flax gives them. Two conventions, as in Flax:

* graph mode (``JitFn``, ``GradFn``, ``VmapFn``, ...): graph nodes travel as
  :class:`~flaxen.nnx.transforms.general.PureNode` pytrees (the form
  ``split_inputs`` makes, tagged with ``ctxtag``); the callable rebuilds the nodes, calls
  ``f``, and returns the inputs' new pure form next to the output;
* the ``Simple*`` callables (``graph=``, for ``graph_updates=False``): graph nodes travel
  as the pytrees they are; ``f`` runs on copies (so it never mutates the traced inputs),
  and the copies, carrying ``f``'s updates, come back next to the output. With
  ``graph=False`` (tree mode) a Variable reached twice among the inputs is an error.

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
>>> fn = SimpleGradFn(lambda m, x: jnp.sum(m(x)), has_aux=False, graph=False)
>>> grads, (updates, aux) = jax.grad(fn, has_aux=True)(m, jnp.ones((1, 2)))
>>> grads.bias.value.tolist(), aux is None
([1.0], True)
"""

from __future__ import annotations

import dataclasses
import functools
import typing as tp

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift
from flaxen.nnx.transforms.general import _from_pure, _to_pure

__all__ = [
    "BwdFn", "CheckifyFn", "CustomVjpFnWrapper", "ForiLoopBodyFn", "FwdFn", "GradFn",
    "JitFn", "PmapFn", "ScanFn", "ShardMapFn", "SimpleBwdFn", "SimpleCheckifyFn",
    "SimpleCondFn", "SimpleCustomVjpFn", "SimpleEvalShapeFn", "SimpleForiLoopBodyFn",
    "SimpleFwdFn", "SimpleGradFn", "SimpleJitFn", "SimpleJitPartialFn", "SimpleJvpFn",
    "SimpleMakeJaxprFn", "SimplePmapFn", "SimpleRematFn", "SimpleScanFn", "SimpleShardMapFn",
    "SimpleVjpFn", "SimpleVmapFn", "SimpleWhileLoopBodyFn", "SimpleWhileLoopCondFn",
    "VmapFn", "WhileLoopBodyFn", "WhileLoopCondFn",
]

_CTXTAG = "split_merge_inputs"


# -- shared machinery ---------------------------------------------------------------------------

class _Wraps:
    """``functools.update_wrapper`` after the dataclass ``__init__`` (name, doc of ``f``)."""

    def __post_init__(self) -> None:
        d = self.__dict__
        fn = d["f"] if "f" in d else d["fwd"] if "fwd" in d else d["bwd"]
        if not callable(fn):
            raise NNXTransformError(
                "", f"{type(self).__name__} wraps a function, got {type(fn).__name__}",
                "Pass the function to transform as its first field.")
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]  # self is callable


def _merge(tree: tp.Any, ctxtag: tp.Hashable) -> tp.Any:
    return _from_pure(tree, ctxtag)


def _split(tree: tp.Any, ctxtag: tp.Hashable) -> tp.Any:
    return _to_pure(tree, ctxtag)


def _apply_nondiff(args: tuple, nondiff_states: tp.Any) -> None:
    """Sets, per positional argument, the Variables a ``State`` in ``nondiff_states`` names
    to its (closed-over, hence constant) values."""
    if not nondiff_states:
        return
    from flaxen.nnx._graph_ops import update

    for a, s in zip(args, nondiff_states):
        if s is not None:
            update(a, s)


def _copy_nodes(tree: tp.Any, graph: bool | None, fn_name: str) -> tp.Any:
    """Fresh copies of the graph nodes in ``tree`` (new objects, same values); in tree mode
    a Variable reached twice is refused (a pytree has no shared references)."""
    if graph is False:
        lift = _lift.Lift((tree,), {})
        from flaxen.nnx.transforms._functional import check_no_shared

        check_no_shared(lift.static, fn_name)
    return jax.tree_util.tree_map(lambda x: x, tree)


def _call_copied(f: tp.Callable, graph: bool | None, name: str, args: tuple,
                 kwargs: dict | None = None) -> tuple[tp.Any, tuple, dict]:
    args, kwargs = _copy_nodes((args, kwargs or {}), graph, name)
    return f(*args, **kwargs), args, kwargs


def _constrain(out: tp.Any, shardings: tp.Any) -> tp.Any:
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.lax.with_sharding_constraint(out, shardings)
    return out


# -- graph mode ---------------------------------------------------------------------------------

@dataclasses.dataclass(eq=False)
class JitFn(_Wraps):
    """``nnx.jit``'s traced function: ``(*pure_args, **pure_kwargs) ->
    (pure_args_out, pure_kwargs_out, pure_out)``; ``out_shardings`` (a ``Sharding``)
    constrains the output; ``ctxtag`` tags the pure nodes."""

    f: tp.Callable[..., tp.Any]
    in_shardings: tp.Any
    out_shardings: tp.Any
    kwarg_shardings: tp.Any
    ctxtag: tp.Hashable

    def __call__(self, *pure_args: tp.Any, **pure_kwargs: tp.Any) -> tuple:
        args, kwargs = _merge((pure_args, pure_kwargs), self.ctxtag)
        out = _constrain(self.f(*args, **kwargs), self.out_shardings)
        return _split((args, kwargs, out), self.ctxtag)


@dataclasses.dataclass(eq=False)
class ShardMapFn(_Wraps):
    """``nnx.shard_map``'s per-shard function, laid out as :class:`JitFn`'s."""

    f: tp.Callable[..., tp.Any]
    in_specs: tp.Any
    out_specs: tp.Any
    kwarg_specs: tp.Any
    ctxtag: tp.Hashable

    def __call__(self, *pure_args: tp.Any, **pure_kwargs: tp.Any) -> tuple:
        args, kwargs = _merge((pure_args, pure_kwargs), self.ctxtag)
        out = self.f(*args, **kwargs)
        return _split((args, kwargs, out), self.ctxtag)


@dataclasses.dataclass(eq=False)
class CheckifyFn(_Wraps):
    """``nnx.checkify``'s checked function: ``(*pure_args) -> (pure_args_out, out)``."""

    f: tp.Callable[..., tp.Any]

    def __call__(self, *pure_args: tp.Any, **pure_kwargs: tp.Any) -> tuple:
        args, kwargs = _merge((pure_args, pure_kwargs), _CTXTAG)
        out = self.f(*args, **kwargs)
        return _split((args, kwargs), _CTXTAG), _split(out, _CTXTAG)


@dataclasses.dataclass(eq=False)
class GradFn(_Wraps):
    """``nnx.grad``'s differentiated function: ``(*pure_args) -> (loss, (pure_args_out,
    aux))`` for ``jax.grad(..., has_aux=True)``. ``nondiff_states`` (one ``State`` or
    ``None`` per argument) are set into the rebuilt nodes as constants, so they get no
    gradient."""

    f: tp.Callable[..., tp.Any]
    has_aux: bool
    nondiff_states: tp.Any

    def __call__(self, *pure_args: tp.Any) -> tuple:
        args = _merge(pure_args, _CTXTAG)
        _apply_nondiff(args, self.nondiff_states)
        out = self.f(*args)
        loss, aux = out if self.has_aux else (out, None)
        return loss, (_split(args, _CTXTAG), aux)


@dataclasses.dataclass(eq=False)
class CustomVjpFnWrapper(_Wraps):
    """``nnx.custom_vjp``'s primal function: ``(*pure_args) -> (pure_args_out, out)``;
    the ``jax_nondiff_argnums`` positions pass through as they are (not pure nodes)."""

    f: tp.Callable[..., tp.Any]
    jax_nondiff_argnums: tuple[int, ...]
    ctxtag: tp.Hashable
    nondiff_states: tp.Any
    nodedefs: tp.Any

    def __call__(self, *pure_args: tp.Any) -> tuple:
        args = tuple(a if i in self.jax_nondiff_argnums else _merge(a, self.ctxtag)
                     for i, a in enumerate(pure_args))
        _apply_nondiff(args, self.nondiff_states)
        out = self.f(*args)
        return _split(args, self.ctxtag), _split(out, self.ctxtag)


@dataclasses.dataclass(eq=False)
class FwdFn(_Wraps):
    """``nnx.custom_vjp``'s forward rule: ``(*pure_args) -> ((pure_args_out, out),
    residual)`` where ``fwd`` returned ``(out, residual)``."""

    fwd: tp.Callable[..., tp.Any]
    nondiff_argnums: tuple[int, ...]
    ctxtag: tp.Hashable
    nondiff_states: tp.Any
    nodedefs: tp.Any

    def __call__(self, *pure_args: tp.Any) -> tuple:
        args = tuple(a if i in self.nondiff_argnums else _merge(a, self.ctxtag)
                     for i, a in enumerate(pure_args))
        _apply_nondiff(args, self.nondiff_states)
        out, residual = self.fwd(*args)
        return (_split(args, self.ctxtag), _split(out, self.ctxtag)), residual


@dataclasses.dataclass(eq=False)
class BwdFn(_Wraps):
    """``nnx.custom_vjp``'s backward rule: ``(*nondiff, residual, g) -> cotangents``,
    with the graph nodes among ``tree_node_args`` (positions) rebuilt from pure form."""

    bwd: tp.Callable[..., tp.Any]
    tree_node_args: tuple[int, ...]

    def __call__(self, *args: tp.Any) -> tp.Any:
        args = tuple(_merge(a, _CTXTAG) if i in self.tree_node_args else a
                     for i, a in enumerate(args))
        return _split(self.bwd(*args), _CTXTAG)


@dataclasses.dataclass(eq=False)
class _MappedFn(_Wraps):
    f: tp.Callable[..., tp.Any]
    transform_metadata: tp.Mapping[str, tp.Any]
    in_axes: tp.Any
    out_axes: tp.Any

    def __call__(self, *pure_args: tp.Any) -> tuple:
        args = _merge(pure_args, _CTXTAG)
        out = self.f(*args)
        return _split(args, _CTXTAG), _split(out, _CTXTAG)


@dataclasses.dataclass(eq=False)
class VmapFn(_MappedFn):
    """``nnx.vmap``'s mapped function: ``(*pure_args) -> (pure_args_out, pure_out)``;
    ``transform_metadata`` is the Variable metadata update of the mapped axis."""


@dataclasses.dataclass(eq=False)
class PmapFn(_MappedFn):
    """``nnx.pmap``'s mapped function, laid out as :class:`VmapFn`'s."""


@dataclasses.dataclass(eq=False)
class ScanFn(_Wraps):
    """``nnx.scan``'s step: ``(carry, pure_args) -> (carry_out, (pure_args_out, out))``;
    the carry is argument ``input_carry_argnum`` of ``f`` and output
    ``output_carry_argnum`` of its result (``None``: no carry on that side)."""

    f: tp.Callable[..., tp.Any]
    input_carry_argnum: int | None
    output_carry_argnum: int | None
    in_axes: tp.Any
    out_axes: tp.Any
    transform_metadata: tp.Mapping[str, tp.Any]

    def __call__(self, carry: tp.Any, pure_args: tuple) -> tuple:
        args = list(_merge(pure_args, _CTXTAG))
        if self.input_carry_argnum is not None:
            args.insert(self.input_carry_argnum, _merge(carry, _CTXTAG))
        out = self.f(*args)
        carry_out = None
        if self.output_carry_argnum is not None:
            parts = list(out)
            carry_out = parts.pop(self.output_carry_argnum)
            out = tuple(parts) if len(parts) != 1 else parts[0]
        if self.input_carry_argnum is not None:
            args.pop(self.input_carry_argnum)
        return _split(carry_out, _CTXTAG), (_split(tuple(args), _CTXTAG),
                                            _split(out, _CTXTAG))


@dataclasses.dataclass(eq=False)
class ForiLoopBodyFn(_Wraps):
    """``nnx.fori_loop``'s body: ``(i, pure_val) -> pure_val_out``."""

    f: tp.Callable[..., tp.Any]

    def __call__(self, i: tp.Any, pure_val: tp.Any) -> tp.Any:
        val = _merge(pure_val, _CTXTAG)
        return _split(self.f(i, val), _CTXTAG)


@dataclasses.dataclass(eq=False)
class WhileLoopBodyFn(_Wraps):
    """``nnx.while_loop``'s body: ``pure_val -> pure_val_out``."""

    f: tp.Callable[..., tp.Any]

    def __call__(self, pure_val: tp.Any) -> tp.Any:
        return _split(self.f(_merge(pure_val, _CTXTAG)), _CTXTAG)


@dataclasses.dataclass(eq=False)
class WhileLoopCondFn(_Wraps):
    """``nnx.while_loop``'s condition: ``pure_val -> bool`` (state changes discarded)."""

    f: tp.Callable[..., tp.Any]

    def __call__(self, pure_val: tp.Any) -> tp.Any:
        return self.f(_merge(pure_val, _CTXTAG))


# -- the Simple* (graph_updates=False) callables ------------------------------------------------

@dataclasses.dataclass(eq=False)
class _SimpleFn(_Wraps):
    """``(*args, **kwargs) -> (out, (args, kwargs) after f)`` on copies of the nodes."""

    f: tp.Callable[..., tp.Any]
    graph: bool | None

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tuple:
        out, args, kwargs = _call_copied(self.f, self.graph, type(self).__name__, args,
                                         kwargs)
        return out, (args, kwargs)


@dataclasses.dataclass(eq=False)
class SimpleCheckifyFn(_SimpleFn):
    """``nnx.checkify``'s function (``graph_updates=False``): ``-> (out, updates)``."""


@dataclasses.dataclass(eq=False)
class SimpleCondFn(_SimpleFn):
    """A branch of ``nnx.cond``/``nnx.switch``: ``(*operands) -> (out, updates)``."""


@dataclasses.dataclass(eq=False)
class SimpleRematFn(_SimpleFn):
    """``nnx.remat``'s checkpointed function: ``-> (out, updates)``."""


@dataclasses.dataclass(eq=False)
class SimpleMakeJaxprFn(_SimpleFn):
    """``nnx.make_jaxpr``'s traced function: ``-> (out, updates)``."""


@dataclasses.dataclass(eq=False)
class SimpleCustomVjpFn(_SimpleFn):
    """``nnx.custom_vjp``'s primal function: ``-> (out, updates)``."""


@dataclasses.dataclass(eq=False)
class SimpleEvalShapeFn(_Wraps):
    """``nnx.eval_shape``'s function: ``-> out`` (the inputs are never updated)."""

    f: tp.Callable[..., tp.Any]
    graph: bool | None

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return _call_copied(self.f, self.graph, "eval_shape", args, kwargs)[0]


@dataclasses.dataclass(eq=False)
class _SimpleDiffFn(_Wraps):
    f: tp.Callable[..., tp.Any]
    has_aux: bool
    graph: bool | None

    def __call__(self, *args: tp.Any) -> tuple:
        out, args, _ = _call_copied(self.f, self.graph, "grad", args)
        loss, aux = out if self.has_aux else (out, None)
        return loss, (args, aux)


@dataclasses.dataclass(eq=False)
class SimpleGradFn(_SimpleDiffFn):
    """``nnx.grad``'s function: ``-> (loss, (updates, aux))`` for
    ``jax.grad(..., has_aux=True)``."""


@dataclasses.dataclass(eq=False)
class SimpleVjpFn(_SimpleDiffFn):
    """``nnx.vjp``'s function: ``-> (out, (updates, aux))``."""


@dataclasses.dataclass(eq=False)
class SimpleJvpFn(_SimpleDiffFn):
    """``nnx.jvp``'s function: ``-> (out, (updates, aux))``."""


@dataclasses.dataclass(eq=False)
class SimpleFwdFn(_Wraps):
    """``nnx.custom_vjp``'s forward rule: ``-> ((out, updates), residual)``."""

    fwd: tp.Callable[..., tp.Any]
    graph: bool | None

    def __call__(self, *args: tp.Any) -> tuple:
        (out, residual), args, _ = _call_copied(self.fwd, self.graph, "custom_vjp", args)
        return (out, args), residual


@dataclasses.dataclass(eq=False)
class SimpleBwdFn(_Wraps):
    """``nnx.custom_vjp``'s backward rule: ``(*nondiff, residual, g) -> cotangents``."""

    bwd: tp.Callable[..., tp.Any]
    graph: bool | None

    def __call__(self, *args: tp.Any) -> tp.Any:
        return _call_copied(self.bwd, self.graph, "custom_vjp", args)[0]


@dataclasses.dataclass(eq=False)
class _SimpleJitLike(_Wraps):
    f: tp.Callable[..., tp.Any]
    in_shardings: tp.Any
    out_shardings: tp.Any
    donate_argnums: tp.Any
    donate_argnames: tp.Any
    graph: bool | None
    update_shardings: bool

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tuple:
        out, args, kwargs = _call_copied(self.f, self.graph, "jit", args, kwargs)
        return _constrain(out, self.out_shardings), (args, kwargs)


@dataclasses.dataclass(eq=False)
class SimpleJitFn(_SimpleJitLike):
    """``nnx.jit``'s traced function (``graph_updates=False``): ``-> (out, updates)``;
    ``out_shardings`` (a ``Sharding``) constrains ``out``."""


@dataclasses.dataclass(eq=False)
class SimpleJitPartialFn(_SimpleJitLike):
    """``nnx.jit_partial``'s traced function, laid out as :class:`SimpleJitFn`'s."""


@dataclasses.dataclass(eq=False)
class _SimpleMappedFn(_Wraps):
    f: tp.Callable[..., tp.Any]
    graph: bool | None
    in_axes: tp.Any
    out_axes: tp.Any
    update_axes: tp.Any

    def __call__(self, *args: tp.Any) -> tuple:
        out, args, _ = _call_copied(self.f, self.graph, type(self).__name__, args)
        return out, args


@dataclasses.dataclass(eq=False)
class SimpleVmapFn(_SimpleMappedFn):
    """``nnx.vmap``'s function: ``(*args) -> (out, updates)``; ``update_axes`` are the
    axes the updates come out on."""


@dataclasses.dataclass(eq=False)
class SimplePmapFn(_SimpleMappedFn):
    """``nnx.pmap``'s function, laid out as :class:`SimpleVmapFn`'s."""


@dataclasses.dataclass(eq=False)
class SimpleShardMapFn(_Wraps):
    """``nnx.shard_map``'s per-shard function: ``-> (out, updates)``."""

    f: tp.Callable[..., tp.Any]
    graph: bool | None
    in_specs: tp.Any
    out_specs: tp.Any
    update_specs: tp.Any

    def __call__(self, *args: tp.Any) -> tuple:
        out, args, _ = _call_copied(self.f, self.graph, "shard_map", args)
        return out, args


@dataclasses.dataclass(eq=False)
class SimpleScanFn(_Wraps):
    """``nnx.scan``'s step: ``(carry, xs_args) -> (carry_out, (updates, out))``; the
    carry is argument ``carry_idx`` of ``f`` and, when ``out_is_tuple``, element
    ``carry_out_idx`` of its result."""

    f: tp.Callable[..., tp.Any]
    graph: bool | None
    in_axes: tp.Any
    out_axes: tp.Any
    out_is_tuple: bool
    carry_idx: int | None
    carry_out_idx: int | None
    update_axes: tp.Any

    def __call__(self, carry: tp.Any, xs_args: tuple) -> tuple:
        args = list(xs_args)
        if self.carry_idx is not None:
            args.insert(self.carry_idx, carry)
        out, new_args, _ = _call_copied(self.f, self.graph, "scan", tuple(args))
        carry_out = None
        if self.carry_out_idx is not None:
            if not self.out_is_tuple:
                carry_out, out = out, None
            else:
                parts = list(out)
                carry_out = parts.pop(self.carry_out_idx)
                out = tuple(parts) if len(parts) != 1 else parts[0]
        updates = list(new_args)
        if self.carry_idx is not None:
            updates.pop(self.carry_idx)
        return carry_out, (tuple(updates), out)


@dataclasses.dataclass(eq=False)
class SimpleForiLoopBodyFn(_Wraps):
    """``nnx.fori_loop``'s body: ``(i, val) -> val_out`` on copies."""

    f: tp.Callable[..., tp.Any]
    graph: bool | None

    def __call__(self, i: tp.Any, val: tp.Any) -> tp.Any:
        return self.f(i, _copy_nodes(val, self.graph, "fori_loop"))


@dataclasses.dataclass(eq=False)
class _SimpleLoopFn(_Wraps):
    f: tp.Callable[..., tp.Any]
    graph: bool | None

    def __call__(self, val: tp.Any) -> tp.Any:
        return self.f(_copy_nodes(val, self.graph, "while_loop"))


@dataclasses.dataclass(eq=False)
class SimpleWhileLoopBodyFn(_SimpleLoopFn):
    """``nnx.while_loop``'s body: ``val -> val_out`` on copies."""


@dataclasses.dataclass(eq=False)
class SimpleWhileLoopCondFn(_SimpleLoopFn):
    """``nnx.while_loop``'s condition: ``val -> bool`` on copies."""

