"""Lifted ``vmap`` and ``scan``: mapping and looping over functions of Scopes.

Both are built on :func:`flaxen.core._packing.pack`; public through ``flaxen.core.lift``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from flaxen.core import axes_scan, meta
from flaxen.core._filters import (
    CollectionFilter,
    PRNGSequenceFilter,
    intersect_filters,
    is_filter_empty,
    subtract_filters,
)
from flaxen.core._packing import _split_in_out_axes, _unzip, pack, tree_map_rngs
from flaxen.core._rng import LazyRng
from flaxen.core.axes_scan import broadcast
from flaxen.core.scope import Scope
from flaxen.errors import BatchSizeError, CarryStructureError

_map_rngs = tree_map_rngs


def _axis_size(variable_axes: tuple, variable_groups: tuple, in_axes: Any, args: tuple,
               axis_size: int | None) -> int:
    """The batch size of a lifted vmap: one size read per leaf of the axis specs.

    As in Flax, each mapped axis spec (one per variable group, ``in_axes`` as given)
    contributes the size of the first array under it, and every size must agree, even with
    an explicit ``axis_size`` (which then wins over a single inferred size).
    """
    def size_under(axis: Any, tree: Any) -> Any:
        if axis is None:
            return ()
        leaves = jax.tree_util.tree_leaves(tree)
        return jnp.shape(leaves[0])[axis] if leaves else ()

    found = jax.tree_util.tree_map(size_under, (variable_axes, in_axes),
                                   (variable_groups, args), is_leaf=lambda x: x is None)
    sizes = sorted(set(jax.tree_util.tree_leaves(found)))
    if len(sizes) > 1:
        raise BatchSizeError(
            "Inconsistent batch axis sizes: {" + ", ".join(map(str, sizes)) + "}: the "
            f"inputs mapped by in_axes={in_axes!r} and the variables mapped by variable_axes "
            "must all have one size along their mapped axes. Give every mapped input the "
            "size the mapped variables were created with, or change in_axes."
        )
    if axis_size is not None:
        return axis_size
    if not sizes:
        raise BatchSizeError(
            "axis_size should be specified manually: no input (in_axes) or existing "
            "variable (variable_axes) is mapped, so vmap has no size to go by. Pass "
            "axis_size=..., or map an input."
        )
    return sizes[0]


def vmap(
    fn: Callable[..., Any],
    variable_axes: Mapping[CollectionFilter, Any],
    split_rngs: Mapping[PRNGSequenceFilter, bool],
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: str | None = None,
    spmd_axis_name: str | None = None,
    metadata_params: dict[Any, Any] = {},  # noqa: B006 - mirrors Flax's signature
) -> Callable[..., Any]:
    """A ``jax.vmap`` of ``fn(scope, *args)``.

    Collections in ``variable_axes`` are mapped along the given axis (created stacked
    during init); the others are broadcast. Streams with ``split_rngs[s]=True`` get one
    key per slice. Boxed variables get ``add_axis``/``remove_axis`` with
    ``metadata_params``.
    """
    in_axes_of, out_axes_of = _split_in_out_axes(variable_axes)
    variable_in_groups, variable_in_axes = _unzip(in_axes_of.items())
    variable_out_groups, variable_out_axes = _unzip(out_axes_of.items())
    rng_groups_f, rng_splits = _unzip(split_rngs.items())

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        variable_groups = tuple(
            meta.remove_axis(g, ax, metadata_params) if ax is not None else g
            for g, ax in zip(variable_groups, variable_in_axes))
        call_in_axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
        size = _axis_size(variable_in_axes, variable_groups, call_in_axes, args, axis_size)

        def split(rng: LazyRng) -> LazyRng:
            return LazyRng(jax.random.split(rng.rng, size), rng.suffix)

        rng_groups = tuple(_map_rngs(split, g) if s else g
                           for g, s in zip(rng_groups, rng_splits))
        rng_axes = tuple(0 if s else None for s in rng_splits)
        if not isinstance(call_in_axes, tuple):
            call_in_axes = (call_in_axes,) * len(args)

        @functools.partial(
            jax.vmap,
            in_axes=(variable_in_axes, rng_axes, call_in_axes),
            out_axes=(out_axes, variable_out_axes),
            axis_name=axis_name,
            axis_size=size,
            spmd_axis_name=spmd_axis_name,
        )
        def mapped(variable_groups, rng_groups, args):
            scope = scope_fn(variable_groups, rng_groups)
            y = fn(scope, *args)
            return y, repack_fn(scope)

        y, out_groups = mapped(variable_groups, rng_groups, tuple(args))
        out_groups = tuple(
            meta.add_axis(g, ax, metadata_params) if ax is not None else g
            for g, ax in zip(out_groups, variable_out_axes))
        return y, out_groups

    return pack(inner, variable_in_groups, variable_out_groups, rng_groups_f, name="vmap")


# ---------------------------------------------------------------------------------------
# scan


def scan(
    fn: Callable[..., Any],
    variable_axes: Mapping[CollectionFilter, Any] = {},  # noqa: B006
    variable_broadcast: CollectionFilter = False,
    variable_carry: CollectionFilter = False,
    split_rngs: Mapping[PRNGSequenceFilter, bool] = {},  # noqa: B006
    in_axes: Any = 0,
    out_axes: Any = 0,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
    _split_transpose: bool = False,
    data_transform: Callable[..., Any] | None = None,
    metadata_params: dict[Any, Any] = {},  # noqa: B006
    check_constancy_invariants: bool = True,
) -> Callable[..., Any]:
    """A ``jax.lax.scan`` of ``fn(scope, carry, *xs) -> (carry, ys)``.

    ``variable_axes`` collections are scanned (stacked along the axis during init),
    ``variable_broadcast`` ones are shared by all iterations (created before the loop
    during init), ``variable_carry`` ones are carried and may change each iteration (they
    cannot be created inside the body). Streams with ``split_rngs[s]=True`` get a fresh key
    per iteration. ``in_axes`` may use :data:`broadcast` for inputs passed whole.
    """
    del check_constancy_invariants
    in_axes_of, out_axes_of = _split_in_out_axes(variable_axes)
    variable_in_groups, variable_in_axes = _unzip(in_axes_of.items())
    variable_out_groups, variable_out_axes = _unzip(out_axes_of.items())
    rng_groups_f, rng_splits = _unzip(split_rngs.items())

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, init_carry, *args):
        broadcast_vars, carry_vars, *scan_vars = variable_groups
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        axes = tuple(axes)
        axis_leaves = axes_scan.broadcast_prefix(axes, tuple(args))
        arg_leaves, arg_tree = jax.tree_util.tree_flatten(tuple(args))
        size = length
        if size is None:
            for ax, leaf in zip(axis_leaves, arg_leaves):
                if ax is not broadcast and ax is not None:
                    size = jnp.shape(leaf)[ax]
                    break
        if size is None:
            raise ValueError(
                "scan cannot infer the number of iterations: no input is scanned. Pass "
                "length=... or scan over an input (in_axes other than broadcast)."
            )
        scanned_x = [axes_scan.move_to_front(leaf, ax)
                     for ax, leaf in zip(axis_leaves, arg_leaves) if ax is not broadcast]
        static_x = [leaf for ax, leaf in zip(axis_leaves, arg_leaves) if ax is broadcast]

        def merge_args(xs_slice):
            it_x, it_b = iter(xs_slice), iter(static_x)
            leaves = [next(it_b) if ax is broadcast else next(it_x) for ax in axis_leaves]
            return jax.tree_util.tree_unflatten(arg_tree, leaves)

        def split(rng: LazyRng) -> LazyRng:
            return LazyRng(jax.random.split(rng.rng, size), rng.suffix)

        split_groups = tuple(_map_rngs(split, g) if s else None
                             for g, s in zip(rng_groups, rng_splits))
        bcast_groups = tuple(None if s else g for g, s in zip(rng_groups, rng_splits))
        scan_vars = [axes_scan.move_to_front(meta.remove_axis(g, ax, metadata_params), ax)
                     for g, ax in zip(scan_vars, variable_in_axes)]

        def run_body(bvars, cvars, svars, rngs_slice, carry, xs_slice, mutable_filter):
            rngs = tuple(sl if b is None else b for sl, b in zip(rngs_slice, bcast_groups))
            groups = (bvars, cvars, *svars)
            if data_transform is not None:
                groups, rngs = data_transform(groups, rngs)
            scope = scope_fn(groups, rngs, mutable_filter)
            carry, ys = fn(scope, carry, *merge_args(xs_slice))
            return carry, ys, repack_fn(scope)

        def first_slice(tree):
            return jax.tree_util.tree_map(lambda x: x[0], tree)

        probe = scope_fn(variable_groups, rng_groups)
        # Only the mutable carry collections travel through the loop; the rest are
        # constants (the repacked structure tells which is which).
        mutable_carry = repack_fn(probe)[1]
        if _pass1_observable(probe, variable_broadcast, rng_groups):
            # Pass 1 (as in Flax, the body is traced once before the loop): creates the
            # broadcast variables during init and draws keys from the shared counters;
            # the values of scanned/carried variables are dropped. Split keys are inputs
            # of the pass: a broadcast variable must not depend on them.
            def pass1(svars, carry, xs_slice, split_slices):
                _, _, out = run_body(broadcast_vars, carry_vars, svars, split_slices, carry,
                                     xs_slice, True)
                return out[0]

            pass1_args = ([first_slice(g) for g in scan_vars], init_carry,
                          [first_slice(x) for x in scanned_x],
                          tuple(None if g is None else first_slice(g) for g in split_groups))
            new_broadcast = _eval_independent(pass1, pass1_args)
            broadcast_vars = tuple({**b, **_merge_cols(b, nb)}
                                   for b, nb in zip(broadcast_vars, new_broadcast))
        else:
            # Nothing the first pass does could be seen: no broadcast collection is
            # mutable and no RNG stream enters. Skip its trace (the loop body's trace
            # raises the same errors).
            new_broadcast = tuple({} for _ in broadcast_vars)

        def body(state, xs):
            carry, cvars = state
            svars, rngs_slice, xs_slice = xs
            merged = tuple({**c, **m} for c, m in zip(carry_vars, cvars))
            carry, ys, out = run_body(broadcast_vars, merged, svars, rngs_slice, carry,
                                      xs_slice, subtract_filters(True, variable_broadcast))
            _, cvars_out, *svars_out = out
            _check_carry(cvars, cvars_out)
            return (carry, cvars_out), (ys, tuple(svars_out))

        carry_in = (init_carry, mutable_carry)
        (carry, cvars_out), (ys, svars_out) = jax.lax.scan(
            body, carry_in, (scan_vars, split_groups, scanned_x),
            length=size, reverse=reverse, unroll=unroll, _split_transpose=_split_transpose)
        svars_out = [meta.add_axis(axes_scan.move_from_front(g, ax), ax, metadata_params)
                     for g, ax in zip(svars_out, variable_out_axes)]
        ys = _move_out(ys, out_axes)
        return (carry, ys), (new_broadcast, cvars_out, *svars_out)

    return pack(inner, (variable_broadcast, variable_carry) + variable_in_groups,
                (variable_broadcast, variable_carry) + variable_out_groups,
                rng_groups_f, name="scan")


def _pass1_observable(probe: Any, variable_broadcast: CollectionFilter,
                      rng_groups: tuple) -> bool:
    """Whether scan's first pass could change anything: create broadcast variables or
    advance the RNG counters shared with the outer scopes (``probe``: the inner scopes)."""
    if any(streams for group in rng_groups for streams in group):
        return True
    for s in jax.tree_util.tree_leaves(probe, is_leaf=lambda x: isinstance(x, Scope)):
        if not is_filter_empty(intersect_filters(s.mutable, variable_broadcast)):
            return True
    return False


def _merge_cols(old: dict, new: dict) -> dict:
    out = {}
    for col, tree in new.items():
        base = old.get(col)
        out[col] = {**base, **tree} if isinstance(base, Mapping) else tree
    return out


def _check_carry(before: tuple, after: tuple) -> None:
    if jax.tree_util.tree_structure(before) != jax.tree_util.tree_structure(after):  # type: ignore[operator]
        raise CarryStructureError(
            "A variable_carry collection changed structure inside the scan body (variables "
            f"before: {jax.tree_util.tree_structure(before)}, after: "
            f"{jax.tree_util.tree_structure(after)}). Carry variables cannot be created inside "
            "the body: initialize them before the scan, e.g. by calling the body once."
        )


def _move_out(ys: Any, out_axes: Any) -> Any:
    if isinstance(out_axes, int):
        return axes_scan.move_from_front(ys, out_axes)
    leaves, tree = jax.tree_util.tree_flatten(ys)
    axes = axes_scan.broadcast_prefix(out_axes, ys)
    return jax.tree_util.tree_unflatten(
        tree, [leaf if ax is None else jnp.moveaxis(leaf, 0, ax)
               for ax, leaf in zip(axes, leaves)])


def _eval_independent(fn: Callable[..., Any], args: tuple) -> Any:
    """Traces ``fn(*args)`` and computes the outputs that do not depend on ``args``.

    Used for scan's first pass: broadcast variables must not depend on the scanned data,
    the carry or a split RNG. The trace also consumes RNG counters exactly as Flax's first
    pass does. Only the equations the outputs need are evaluated (none of them reads
    ``args``), so nothing of the rest of the body reaches the enclosing trace.
    """
    from jax.extend import core as jex_core

    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    out_tree = jax.tree_util.tree_structure(out_shape)
    jaxpr = closed.jaxpr
    if not jaxpr.outvars:
        return jax.tree_util.tree_unflatten(out_tree, [])
    is_var = jex_core.Var
    dependent = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(isinstance(v, is_var) and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(out_shape)[0]]
    for path, var in zip(paths, jaxpr.outvars):
        if isinstance(var, is_var) and var in dependent:
            raise ValueError(
                f"A variable_broadcast variable at {jax.tree_util.keystr(path)} depends on the "
                "scanned inputs, the carry or an RNG split per iteration. Broadcast variables "
                "are shared by all iterations and must only depend on broadcast RNGs and "
                "other broadcast variables."
            )
    needed = {v for v in jaxpr.outvars if isinstance(v, is_var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if any(v in needed for v in eqn.outvars):
            kept.append(eqn)
            needed.update(v for v in eqn.invars if isinstance(v, is_var))
    kept.reverse()
    effects = frozenset().union(*(eqn.effects for eqn in kept))
    sliced = jaxpr.replace(invars=[], eqns=kept, effects=effects)
    out_flat = jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(sliced, closed.consts))()
    return jax.tree_util.tree_unflatten(out_tree, out_flat)
