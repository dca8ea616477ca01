"""Today's autodiff transforms: ``grad``, ``value_and_grad`` (with ``DiffState``), ``vjp``,
``jvp``.

Graph mode with graph updates (the default): the gradient for a graph node is a ``State``
of the Variables its filter selects (``nnx.Param`` unless a ``DiffState(argnum, filter)``
says otherwise); structure changes the function makes are written back. The functional
modes (``graph_updates=False`` or ``graph=False``) differentiate every array of the chosen
arguments and return gradients with the arguments' own structure (a ``Linear``'s gradient is
a ``Linear`` holding gradients); only Variable values are written back.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
>>> g = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))))(m)
>>> type(g).__name__, g['bias'].value.tolist()
('State', [1.0])
>>> type(nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))), graph=False)(m)).__name__
'Linear'
"""

from __future__ import annotations

import dataclasses
import functools
import typing as tp

import jax

from flaxen import traceback_util
from flaxen.errors import NNXTransformError, NNXUnsupportedError
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _lift, filterlib
from flaxen.nnx._graph_ops import _nest
from flaxen.nnx._graphdef import NodeDef, NodeRef, VariableDef, var_def_paths
from flaxen.nnx.statelib import State
from flaxen.nnx.transforms import _functional
from flaxen.nnx.transforms._callable_types import (
    BwdFn,
    CustomVjpFnWrapper,
    FwdFn,
    GradFn,
    SimpleBwdFn,
    SimpleCustomVjpFn,
    SimpleFwdFn,
    SimpleGradFn,
    SimpleJvpFn,
    SimpleRematFn,
    SimpleVjpFn,
)
from flaxen.nnx.transforms._common import (
    PrefixMapping,
    check_prefix,
    resolve_bound,
    resolve_modes,
)
from flaxen.nnx.transforms._custom_rules import CustomVjp, SimpleCustomVjp, custom_vjp
from flaxen.nnx.variablelib import Param

__all__ = ["BwdFn", "custom_vjp", "CustomVjp", "CustomVjpFnWrapper", "DiffState", "FwdFn",
    "grad", "GradFn", "jvp", "remat", "SimpleBwdFn", "SimpleCustomVjp", "SimpleCustomVjpFn",
    "SimpleFwdFn", "SimpleGradFn", "SimpleJvpFn", "SimpleRematFn", "SimpleVjpFn",
    "value_and_grad", "vjp"]


@dataclasses.dataclass(frozen=True)
class DiffState(PrefixMapping):
    """Differentiate argument ``argnum`` with respect to the Variables ``filter`` selects
    (graph mode with graph updates).

    >>> from flaxen import nnx
    >>> nnx.DiffState(0, nnx.PathContains('kernel')).argnum
    0
    """

    argnum: int
    filter: filterlib.Filter

    def map_prefix(self, path: tuple, variable: tp.Any) -> bool:
        return filterlib.to_predicate(self.filter)(path, variable)


# -- where each argument's arrays are --------------------------------------------------------

class _Layout:
    """Per positional argument: its leaf range, its graph-node roots and their values."""

    def __init__(self, args: tuple, lift: _lift.Lift) -> None:
        self.arg_leaves: list[range] = []
        start = 0
        for a in args:
            n = len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node))
            self.arg_leaves.append(range(start, start + n))
            start += n
        defs = lift.static.defs
        self.root_of_leaf = {p: r for r, p in enumerate(lift.static.node_pos)}
        self.root_values: list[range] = []
        start = 0
        for d in defs:
            n = len(var_def_paths((d,)))
            self.root_values.append(range(start, start + n))
            start += n

    def roots(self, n: int) -> list[int]:
        return [self.root_of_leaf[p] for p in self.arg_leaves[n] if p in self.root_of_leaf]

    def plain_leaves(self, n: int) -> list[int]:
        return [p for p in self.arg_leaves[n] if p not in self.root_of_leaf]


def _parse_argnums(argnums: tp.Any) -> tuple[tuple, dict, bool]:
    single = isinstance(argnums, (int, DiffState))
    items = (argnums,) if single else tuple(argnums)
    nums, filters = [], {}
    for a in items:
        if isinstance(a, DiffState):
            nums.append(a.argnum)
            filters[a.argnum] = a.filter
        elif isinstance(a, int):
            nums.append(a)
        else:
            raise NNXTransformError(
                "", f"argnums entries must be ints or nnx.DiffState, got {type(a).__name__}",
                "Pass e.g. argnums=(0, nnx.DiffState(1, nnx.Param)).")
    return tuple(nums), filters, single


def _check_argnums(nums: tuple, args: tuple, name: str) -> None:
    if any(n >= len(args) for n in nums):
        raise NNXTransformError(
            "", f"nnx.{name}: argnums={nums} but only {len(args)} positional argument(s) "
            "were given", "Pass the arguments to differentiate positionally.")


def _diff_positions(lift: _lift.Lift, layout: _Layout, nums: tuple, filters: dict,
                    graph_updates: bool) -> list[tuple[list[int], list[int]]]:
    """For each differentiated argument: (value positions, plain leaf positions)."""
    paths, objs = lift.paths, lift.leaf_objs
    defs = lift.static.defs
    out = []
    for n in nums:
        vpos: list[int] = []
        for r in layout.roots(n):
            if type(defs[r]) is NodeRef:
                continue
            rng = layout.root_values[r]
            # the filter picks among a graph node's Variables; a Variable passed directly
            # (alone or in a State / pytree) is differentiated unless a DiffState says not
            if graph_updates and (n in filters or type(defs[r]) is not VariableDef):
                pred = filterlib.to_predicate(filters.get(n, Param))
                vpos.extend(i for i in rng if pred(paths[i], objs[i]))
            else:
                vpos.extend(rng)
        out.append((vpos, layout.plain_leaves(n)))
    return out


def _check_aliasing(lift: _lift.Lift, layout: _Layout, nums: tuple, positions: list,
                    name: str) -> None:
    """Functional modes: a Variable may not be both differentiated and not."""
    from flaxen.nnx.transforms._axes import occurrences

    diff = {i for vp, _ in positions for i in vp}
    occ = occurrences(lift.static.defs)
    for n in range(len(layout.arg_leaves)):
        if n in nums:
            continue
        for r in layout.roots(n):
            if any(i in diff for _, i in occ[r]):
                raise NNXTransformError(
                    f"argument {n}", f"nnx.{name}: Inconsistent aliasing: a Variable of this "
                    "argument is also part of a differentiated argument",
                    "Pass it once, or use graph=True, graph_updates=True.")


def _graph_grads(args: tuple, n: int, lift: _lift.Lift, layout: _Layout, vpos: list[int],
                 lpos: list[int], gvals: list, gleaves: list) -> tp.Any:
    """Graph mode: the argument's structure with each graph node as a State of gradients."""
    defs = lift.static.defs
    by_pos = dict(zip(vpos, gvals))
    by_leaf = dict(zip(lpos, gleaves))
    treedef: tp.Any  # jax PyTreeDef
    leaves, treedef = jax.tree_util.tree_flatten(args[n], is_leaf=_lift.is_node)
    out = []
    for p, _leaf in zip(layout.arg_leaves[n], leaves):
        r = layout.root_of_leaf.get(p)
        if r is None:
            out.append(by_leaf.get(p))
            continue
        d = defs[r]
        rng = layout.root_values[r]
        if type(d) is VariableDef:
            i = rng[0]
            out.append(eng.new_variable(d.type, by_pos[i], d.thawed_metadata())
                       if i in by_pos else State({}))
            continue
        items = []
        if type(d) is NodeDef:
            vdefs = var_def_paths((d,))
            for i, (path, vd) in zip(rng, vdefs):
                if i in by_pos:
                    g = by_pos[i]
                    items.append((path, g if vd.type.__name__ == "ArrayLeaf" else
                                  eng.new_variable(vd.type, g, vd.thawed_metadata())))
        out.append(_nest(items) if items else State({}))
    return treedef.unflatten(out)


def _tree_grads(args: tuple, n: int, lift: _lift.Lift, layout: _Layout, full: list,
                lpos: list[int], gleaves: list) -> tp.Any:
    """Functional modes: the argument's own structure holding gradients."""
    defs = lift.static.defs
    roots = eng.unflatten(defs, full)[0] if defs else []
    by_leaf = dict(zip(lpos, gleaves))
    treedef: tp.Any  # jax PyTreeDef
    leaves, treedef = jax.tree_util.tree_flatten(args[n], is_leaf=_lift.is_node)
    out = []
    for p in layout.arg_leaves[n]:
        r = layout.root_of_leaf.get(p)
        out.append(by_leaf.get(p) if r is None else roots[r])
    return treedef.unflatten(out)


def _split_aux(f: tp.Callable, has_aux: bool, primal_box: list) -> tp.Callable:
    """``f`` returning only its aux part (None without ``has_aux``), the primal output
    handed over in ``primal_box``: the lifted function's output is what JAX treats as aux."""

    def call(*a: tp.Any, **k: tp.Any) -> tp.Any:
        out = f(*a, **k)
        primal, aux = out if has_aux else (out, None)
        primal_box.append(primal)
        return aux

    return call


def _inner_fn(f: tp.Callable, lift: _lift.Lift, values: list, positions: list,
              has_aux: bool, functional: str | None) -> tp.Callable:
    """The function JAX differentiates, of the differentiated values and leaves of each
    argument (``positions``: their indices into ``values`` (``lift.values``) and
    ``lift.leaves``): ``f`` lifted (``functional``: None for graph mode, else the
    transform's name), returning ``(primal, (values, out_leaves))`` for ``lift.finish``."""
    primal_box: list = []
    lifted = lift.pure(_split_aux(f, has_aux, primal_box), functional=functional)

    def inner(*diff: tp.Any) -> tp.Any:
        vals = list(values)
        leaves = list(lift.leaves)
        for (vp, lp), (dv, dl) in zip(positions, diff):
            for i, x in zip(vp, dv):
                vals[i] = x
            for j, x in zip(lp, dl):
                leaves[j] = x
        new_values, aux_leaves = lifted(vals, leaves)
        return primal_box.pop(), (new_values, aux_leaves)

    return inner


def _grad_impl(f: tp.Callable, argnums: tp.Any, has_aux: bool, holomorphic: bool,
               allow_int: bool, graph: bool | None, graph_updates: bool | None,
               return_value: bool, name: str) -> tp.Callable:
    resolve_bound(f, name)
    # the modes in force when the transform is applied, as in Flax (not at each call)
    g, gu = resolve_modes(graph, graph_updates)
    updates = g and gu
    check_prefix(argnums, "argnums", name, g, gu)
    nums, filters, single = _parse_argnums(argnums)

    @traceback_util.api_boundary
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        _check_argnums(nums, args, name)
        lift = _lift.Lift(args, kwargs, check=updates)
        if not g:
            _functional.check_no_shared(lift.static, name)
        layout = _Layout(args, lift)
        positions = _diff_positions(lift, layout, nums, filters, updates)
        values = lift.values
        diff_in = [([values[i] for i in vp], [lift.leaves[j] for j in lp])
                   for vp, lp in positions]
        if not updates and lift.static.defs:
            _check_aliasing(lift, layout, nums, positions, name)
        # a filter matching nothing is no error (as in Flax): that argument's gradient is an
        # empty State
        inner = _inner_fn(f, lift, values, positions, has_aux, None if updates else name)
        transform = jax.value_and_grad if return_value else jax.grad
        fn = transform(inner, argnums=tuple(range(len(nums))), has_aux=True,
                       holomorphic=holomorphic, allow_int=allow_int)
        if return_value:
            (loss, aux_parts), grads = fn(*diff_in)
        else:
            grads, aux_parts = fn(*diff_in)
        aux = lift.finish(lift.out, *aux_parts)  # type: ignore[arg-type]  # set by the trace
        if updates:
            results = [_graph_grads(args, n, lift, layout, vp, lp, gv, gl)
                       for n, (vp, lp), (gv, gl) in zip(nums, positions, grads)]
        else:
            results = []
            for n, (vp, lp), (gv, gl) in zip(nums, positions, grads):
                full = list(values)
                for i, x in zip(vp, gv):
                    full[i] = x
                results.append(_tree_grads(args, n, lift, layout, full, lp, gl))
        out_g = results[0] if single else tuple(results)
        if return_value:
            return ((loss, aux), out_g) if has_aux else (loss, out_g)
        return (out_g, aux) if has_aux else out_g

    return wrapper


def grad(f: tp.Callable[..., tp.Any] | None = None, *, argnums: tp.Any = 0,
         has_aux: bool = False, holomorphic: bool = False, allow_int: bool = False,
         reduce_axes: tp.Sequence[tp.Any] = (), graph: bool | None = None,
         graph_updates: bool | None = None) -> tp.Any:
    """Lifted ``jax.grad`` (see the module docstring for what the gradient looks like).

    ``argnums`` takes ints and ``nnx.DiffState(argnum, filter)``; usable as a decorator
    with or without arguments.
    """
    _no_reduce_axes("grad", reduce_axes)
    graph, graph_updates = resolve_modes(graph, graph_updates)
    if f is None:
        return functools.partial(grad, argnums=argnums, has_aux=has_aux,
                                 holomorphic=holomorphic, allow_int=allow_int,
                                 graph=graph, graph_updates=graph_updates)
    return _grad_impl(f, argnums, has_aux, holomorphic, allow_int, graph, graph_updates,
                      False, "grad")


def value_and_grad(f: tp.Callable[..., tp.Any] | None = None, *, argnums: tp.Any = 0,
                   has_aux: bool = False, holomorphic: bool = False, allow_int: bool = False,
                   reduce_axes: tp.Sequence[tp.Any] = (), graph: bool | None = None,
                   graph_updates: bool | None = None) -> tp.Any:
    """Lifted ``jax.value_and_grad``: ``(value, grads)``, or ``((value, aux), grads)``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    >>> loss, grads = nnx.value_and_grad(lambda m: jnp.sum(m.bias.value))(m)
    >>> float(loss), grads['bias'].value.tolist()
    (0.0, [1.0])
    """
    _no_reduce_axes("value_and_grad", reduce_axes)
    graph, graph_updates = resolve_modes(graph, graph_updates)
    if f is None:
        return functools.partial(value_and_grad, argnums=argnums, has_aux=has_aux,
                                 holomorphic=holomorphic, allow_int=allow_int,
                                 graph=graph, graph_updates=graph_updates)
    return _grad_impl(f, argnums, has_aux, holomorphic, allow_int, graph, graph_updates,
                      True, "value_and_grad")


# -- vjp / jvp (functional modes) --------------------------------------------------------------

def _functional_only(name: str, graph: bool, graph_updates: bool) -> None:
    if graph and graph_updates:
        raise NNXUnsupportedError(
            "", f"graph-mode with graph_updates is not supported for nnx.{name}: it works on "
            "the Variables' values and gives no way to write graph changes back",
            f"Pass graph_updates=False (or graph=False) to nnx.{name}.")


def _no_reduce_axes(name: str, reduce_axes: tp.Sequence[tp.Any]) -> None:
    # JAX dropped reduce_axes; Flax refuses it rather than ignoring it, and so does flaxen
    if reduce_axes:
        raise NNXUnsupportedError(
            "", f"nnx.{name}: the reduce_axes argument to {name} is deprecated and no longer "
            f"does anything (got reduce_axes={tuple(reduce_axes)!r})",
            "Drop reduce_axes, and sum the gradient over those axes yourself (e.g. with "
            "jax.lax.psum inside a shard_map) if that is what it was for.")


def _all_positions(args: tuple, lift: _lift.Lift) -> tuple[_Layout, list]:
    layout = _Layout(args, lift)
    defs = lift.static.defs
    pos = []
    for n in range(len(args)):
        vp = [i for r in layout.roots(n) if type(defs[r]) is not NodeRef
              for i in layout.root_values[r]]
        pos.append((vp, layout.plain_leaves(n)))
    return layout, pos


def vjp(f: tp.Callable[..., tp.Any] | None = None, *primals: tp.Any, has_aux: bool = False,
        reduce_axes: tp.Sequence[tp.Any] = (), graph: bool | None = None,
        graph_updates: bool | None = None) -> tp.Any:
    """Lifted ``jax.vjp`` (functional modes): ``(out, vjp_fn)`` or ``(out, vjp_fn, aux)``;
    ``vjp_fn(cotangent)`` returns one cotangent per primal, with the primal's structure.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> out, vjp_fn = nnx.vjp(lambda x: x * 2, jnp.array(3.0), graph_updates=False)
    >>> float(vjp_fn(jnp.array(1.0))[0])
    2.0
    """
    _no_reduce_axes("vjp", reduce_axes)
    _functional_only("vjp", *resolve_modes(graph, graph_updates))  # at once, as Flax
    if f is None:
        return functools.partial(_vjp_decorated, has_aux=has_aux, graph=graph,
                                 graph_updates=graph_updates)
    resolve_bound(f, "vjp")
    if not primals:
        return _vjp_decorated(f, has_aux=has_aux, graph=graph, graph_updates=graph_updates)
    return _vjp_call(f, primals, has_aux, graph, graph_updates)


def _vjp_decorated(f: tp.Callable, *, has_aux: bool, graph: bool | None,
                   graph_updates: bool | None) -> tp.Callable:
    @functools.wraps(f)
    def wrapper(*primals: tp.Any) -> tp.Any:
        return _vjp_call(f, primals, has_aux, graph, graph_updates)

    return wrapper


def _vjp_call(f: tp.Callable, primals: tuple, has_aux: bool, graph: bool | None,
              graph_updates: bool | None) -> tp.Any:
    g, gu = resolve_modes(graph, graph_updates)
    _functional_only("vjp", g, gu)
    lift = _lift.Lift(primals, {})
    if not g:
        _functional.check_no_shared(lift.static, "vjp")
    layout, positions = _all_positions(primals, lift)
    values = lift.values
    diff_in = [([values[i] for i in vp], [lift.leaves[j] for j in lp]) for vp, lp in positions]
    out, pullback, aux_parts = jax.vjp(
        _inner_fn(f, lift, values, positions, has_aux, "vjp"), *diff_in, has_aux=True)
    aux = lift.finish(lift.out, *aux_parts)  # type: ignore[arg-type]  # set by the trace

    def vjp_fn(cotangent: tp.Any) -> tuple:
        grads = pullback(cotangent)
        results = []
        for n, (vp, lp), (gv, gl) in zip(range(len(primals)), positions, grads):
            full = list(values)
            for i, x in zip(vp, gv):
                full[i] = x
            results.append(_tree_grads(primals, n, lift, layout, full, lp, gl))
        return tuple(results)

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def jvp(f: tp.Callable[..., tp.Any] | None = None, primals: tuple = (), tangents: tuple = (),
        *, has_aux: bool = False, graph: bool | None = None,
        graph_updates: bool | None = None) -> tp.Any:
    """Lifted ``jax.jvp`` (functional modes): ``(out, tangent_out)`` (``, aux``); tangents
    have the primals' structure (a Module's tangent is a Module holding tangents).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> out, t = nnx.jvp(lambda x: x * 2, (jnp.array(3.0),), (jnp.array(1.0),),
    ...                  graph_updates=False)
    >>> float(out), float(t)
    (6.0, 2.0)
    """
    _functional_only("jvp", *resolve_modes(graph, graph_updates))  # at once, as Flax
    if f is None:
        return functools.partial(_jvp_decorated, has_aux=has_aux, graph=graph,
                                 graph_updates=graph_updates)
    resolve_bound(f, "jvp")
    return _jvp_call(f, tuple(primals), tuple(tangents), has_aux, graph, graph_updates)


def _jvp_decorated(f: tp.Callable, *, has_aux: bool, graph: bool | None,
                   graph_updates: bool | None) -> tp.Callable:
    @functools.wraps(f)
    def wrapper(primals: tuple, tangents: tuple) -> tp.Any:
        return _jvp_call(f, tuple(primals), tuple(tangents), has_aux, graph, graph_updates)

    return wrapper


def _jvp_call(f: tp.Callable, primals: tuple, tangents: tuple, has_aux: bool,
              graph: bool | None, graph_updates: bool | None) -> tp.Any:
    g, gu = resolve_modes(graph, graph_updates)
    _functional_only("jvp", g, gu)
    lift = _lift.Lift(primals, {})
    if not g:
        _functional.check_no_shared(lift.static, "jvp")
    _, positions = _all_positions(primals, lift)
    tlift = _lift.Lift(tangents, {})
    if tlift.static.graphdef != lift.static.graphdef or len(tlift.leaves) != len(lift.leaves):
        raise NNXTransformError(
            "", "nnx.jvp: the tangents do not have the structure of the primals",
            "Build them from the primals, e.g. jax.tree.map(jnp.ones_like, primals).")
    values = lift.values
    tvalues = tlift.values
    diff_in = tuple(([values[i] for i in vp], [lift.leaves[j] for j in lp])
                    for vp, lp in positions)
    diff_t = tuple(([tvalues[i] for i in vp], [tlift.leaves[j] for j in lp])
                   for vp, lp in positions)
    out, t_out, aux_parts = jax.jvp(
        _inner_fn(f, lift, values, positions, has_aux, "jvp"), diff_in, diff_t, has_aux=True)
    aux = lift.finish(lift.out, *aux_parts)  # type: ignore[arg-type]  # set by the trace
    return (out, t_out, aux) if has_aux else (out, t_out)


# remat lives in its own file; Flax's module path names it here
from flaxen.nnx.transforms._checkpointing import remat  # noqa: E402

# Flax 0.12.8's type variables and aliases of nnx.transforms.autodiff
A = tp.TypeVar("A")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
AxisName = tp.Hashable
