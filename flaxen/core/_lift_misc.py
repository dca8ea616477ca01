"""Lifted jit, remat, autodiff, control flow and variable mapping over Scopes.

Each is a short function on :func:`flaxen.core._packing.pack`; public via ``flaxen.core.lift``.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax

from flaxen.core._filters import (
    CollectionFilter,
    PRNGSequenceFilter,
    is_filter_empty,
    subtract_filters,
    union_filters,
)
from flaxen.core._lift_maps import scan
from flaxen.core._packing import _squeeze_scopes, _unsqueeze_scopes, pack, tree_map_rngs
from flaxen.core._rng import LazyRng
from flaxen.core.scope import Scope
from flaxen.errors import CarryStructureError

C = TypeVar("C")


def _identity(x: Any) -> Any:
    return x


def _scope_count(scope_tree: Any) -> int:
    return len(jax.tree_util.tree_leaves(scope_tree, is_leaf=lambda x: isinstance(x, Scope)))


# -- rng reseeding (jit, fold_rngs) ----------------------------------------------------------


def _reseeded(rng_groups: tuple, counters_of: list) -> tuple:
    """Every lifted stream replaced by one fresh ``make_rng`` key of its outer scope.

    Needed where a trace may be cached (jit): the keys drawn inside must not depend on
    Python-side counters that a cache hit would not advance.
    """
    out = []
    for group in rng_groups:
        new_group = []
        for i, rngs in enumerate(group):
            scope = counters_of[i]
            new_group.append({name: LazyRng(scope.make_rng(name), ()) for name in rngs})
        out.append(tuple(new_group))
    return tuple(out)


def fold_rngs(
    fn: Callable[..., Any],
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> Callable[..., Any]:
    """Lifts ``fn(scope, module_hash_key, *args, **kwargs)``, called as
    ``fold_rngs(fn)(scope, module_hash_key, *args, **kwargs)`` (as in Flax).

    Inside, every lifted stream restarts from its base key with no name suffix, and the
    counters stay shared with the outer scopes (keys drawn inside advance them). As in
    Flax, the counter advance of the first call with a given ``module_hash_key`` (and
    scope structure) is remembered process-wide, and later calls with that key advance the
    outer counters by the same amounts (what a cached trace would do), whatever they drew.
    """

    def wrapper(scope_tree: Any, module_hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        leaves, treedef = jax.tree_util.tree_flatten(
            scope_tree, is_leaf=lambda x: isinstance(x, Scope))
        fingerprint = (module_hash_key, treedef)
        hash(fingerprint)  # the key must be hashable, as in Flax
        scopes = [s for s in leaves if isinstance(s, Scope)]
        before = [dict(s.rng_counters) for s in scopes]
        def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args, **kwargs):
            rng_groups = tuple(
                tuple({name: LazyRng(rng.rng, ()) for name, rng in streams.items()}
                      for streams in group)
                for group in rng_groups)
            scope = scope_fn(variable_groups, rng_groups)
            y = fn(scope, module_hash_key, *args, **kwargs)
            return y, repack_fn(scope)

        y = pack(inner, (variables,), (variables,), (rngs,), name="fold_rngs",
                 enable_kwargs=True)(scope_tree, *args, **kwargs)
        advance = _FOLD_RNGS_ADVANCE.get(fingerprint)
        if advance is None:
            _FOLD_RNGS_ADVANCE[fingerprint] = [
                {k: v - b.get(k, 0) for k, v in s.rng_counters.items()
                 if isinstance(v, int)}
                for s, b in zip(scopes, before)]
        else:
            for s, b, adv in zip(scopes, before, advance):
                for k, v in list(s.rng_counters.items()):
                    if isinstance(v, int):
                        s.rng_counters[k] = b.get(k, 0) + adv.get(k, 0)
        return y

    return wrapper


def fold_rngs_reseeded(
    fn: Callable[..., Any],
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> Callable[..., Any]:
    """Runs ``fn(scope, ...)`` with every lifted stream reseeded by one ``make_rng`` call.

    The RNG handling of ``flaxen.linen.fold_rngs`` (which matches ``flax.linen.fold_rngs``).
    """

    def wrapper(scope_tree: Any, *args: Any, **kwargs: Any) -> Any:
        roots = jax.tree_util.tree_leaves(scope_tree, is_leaf=lambda x: isinstance(x, Scope))

        def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args, **kwargs):
            rng_groups = _reseeded(rng_groups, roots)
            scope = scope_fn(variable_groups, rng_groups)
            y = fn(scope, *args, **kwargs)
            return y, repack_fn(scope)

        return pack(inner, (variables,), (variables,), (rngs,), name="fold_rngs",
                    enable_kwargs=True)(scope_tree, *args, **kwargs)

    return wrapper


# Counter advance of the first fold_rngs call per (module_hash_key, scope structure).
_FOLD_RNGS_ADVANCE: dict[Any, list[dict[str, int]]] = {}


# -- jit ------------------------------------------------------------------------------------

_JIT_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_JIT_CONTEXT = threading.local()


def _hashable_filter(f: Any) -> Any:
    if isinstance(f, (list, set, frozenset)):
        return tuple(sorted(f))
    return f


def jit(
    fn: Callable[..., Any],
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] = (),
    device: Any = None,
    backend: str | None = None,
) -> Callable[..., Any]:
    """A ``jax.jit`` of ``fn(scope, module_hash_key, *args)``; traces are reused across calls.

    Called as ``jit(fn)(scope, module_hash_key, *args)`` (Flax's convention). The hashable
    ``module_hash_key`` is part of the cache key and reaches ``fn`` unchanged.
    ``static_argnums``/``donate_argnums`` count the scope as 0 and ``args`` from 1 (the key
    is not counted); index 0 is ignored. RNG streams are reseeded with one ``make_rng`` per
    stream and call, so repeated calls draw fresh keys.

    >>> import jax
    >>> from flaxen.core import init
    >>> def f(scope, key, x):
    ...     return x * scope.param('k', lambda rng, shape: 1.0, ())
    >>> float(init(lambda s, x: jit(f)(s, 'f', x))(jax.random.key(0), 2.0)[0])
    2.0
    """
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(donate_argnums, int):
        donate_argnums = (donate_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    # User index i >= 1 is args[i - 1], i.e. position i + 2 of
    # core(fingerprint, variable_groups, rng_groups, *args); the scope (0) never reaches jax.
    jit_static = (0,) + tuple(i + 2 for i in static_argnums if i > 0)
    jit_donate = tuple(i + 2 for i in donate_argnums if i > 0)

    # Wrapping fn lets jax check static_argnums/static_argnames against fn's own signature,
    # so an out-of-range index fails when the transform is built, as in Flax.
    @functools.wraps(fn)
    def core(fingerprint, variable_groups, rng_groups, *args, **kwargs):
        scope_fn, repack_fn = _JIT_CONTEXT.fns
        scope = scope_fn(variable_groups, rng_groups)
        y = fn(scope, fingerprint[1], *args, **kwargs)
        return y, repack_fn(scope)

    jit_kwargs = {}
    if device is not None:
        jit_kwargs["device"] = device
    if backend is not None:
        jit_kwargs["backend"] = backend
    jitted = jax.jit(core, static_argnums=jit_static, static_argnames=tuple(static_argnames),
                     donate_argnums=jit_donate, **jit_kwargs)

    def wrapper(scope_tree: Any, module_hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        roots = jax.tree_util.tree_leaves(scope_tree, is_leaf=lambda x: isinstance(x, Scope))
        # The trace depends on the scopes' mutability and flags and on the key: all static.
        # Not on their paths: the variables and keys of the scope come in as arguments, so
        # modules configured alike at different paths share one trace (as in Flax).
        fingerprint = (
            tuple((_hashable_filter(s.mutable), tuple(sorted(s.flags.items()))) for s in roots),
            module_hash_key,
        )

        def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args, **kwargs):
            rng_groups = _reseeded(rng_groups, roots)
            previous = getattr(_JIT_CONTEXT, "fns", None)
            _JIT_CONTEXT.fns = (scope_fn, repack_fn)
            try:
                return jitted(fingerprint, variable_groups, rng_groups, *args, **kwargs)
            finally:
                _JIT_CONTEXT.fns = previous

        return pack(inner, (variables,), (variables,), (rngs,), name="jit",
                    enable_kwargs=True)(scope_tree, *args, **kwargs)

    return wrapper


# -- remat ----------------------------------------------------------------------------------


def checkpoint(
    fn: Callable[..., Any],
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
    concrete: bool = False,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: Callable[..., bool] | None = None,
) -> Callable[..., Any]:
    """A ``jax.checkpoint`` (rematerialisation) of ``fn(scope, *args)``.

    ``static_argnums`` count the arguments after the scope.
    """
    if concrete:
        raise NotImplementedError(
            "remat(concrete=True) is no longer supported by JAX; use static_argnums for "
            "arguments that drive Python control flow."
        )
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args, **kwargs):
        @functools.partial(jax.checkpoint, prevent_cse=prevent_cse, policy=policy,
                           static_argnums=tuple(i + 2 for i in static_argnums))
        def rematted(variable_groups, rng_groups, *args):
            scope = scope_fn(variable_groups, rng_groups)
            y = fn(scope, *args, **kwargs)
            return y, repack_fn(scope)

        return rematted(variable_groups, rng_groups, *args)

    return pack(inner, (variables,), (variables,), (rngs,), name="remat", enable_kwargs=True)


remat = checkpoint


def remat_scan(
    body_fn: Callable[..., Any],
    lengths: Sequence[int],
    policy: Callable[..., bool] | None = None,
    variable_broadcast: CollectionFilter = False,
    variable_carry: CollectionFilter = False,
    variable_axes: Mapping[CollectionFilter, Any] = {True: 0},  # noqa: B006
    split_rngs: Mapping[PRNGSequenceFilter, bool] = {True: True},  # noqa: B006
) -> Callable[..., Any]:
    """``body_fn(scope, carry) -> carry`` repeated ``prod(lengths)`` times as nested scans.

    Each level but the outermost is rematerialised, so memory grows like
    ``n ** (1 / len(lengths))``. Variables get one leading axis per level.
    """
    lengths = tuple(lengths)
    if not lengths:
        raise ValueError("remat_scan needs at least one length, e.g. lengths=(10, 10).")
    scan_fn = functools.partial(scan, variable_broadcast=variable_broadcast,
                                variable_carry=variable_carry, variable_axes=variable_axes,
                                split_rngs=split_rngs)
    if len(lengths) == 1:
        def single(scope: Scope, carry: Any) -> tuple[Any, tuple]:
            return body_fn(scope, carry), ()

        return lambda scope, carry: scan_fn(single, length=lengths[0])(scope, carry)[0]

    @functools.partial(checkpoint, policy=policy, prevent_cse=False)
    def nested(scope: Scope, carry: Any) -> tuple[Any, tuple]:
        inner_fn = remat_scan(body_fn, lengths[1:], policy, variable_broadcast,
                              variable_carry, variable_axes, split_rngs)
        return inner_fn(scope, carry), ()

    return lambda scope, carry: scan_fn(nested, length=lengths[0])(scope, carry)[0]


# -- autodiff ------------------------------------------------------------------------------------


def vjp(
    fn: Callable[..., Any],
    scope: Scope,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Sequence[Any] = (),
    vjp_variables: CollectionFilter = "params",
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> tuple[Any, ...]:
    """``jax.vjp`` of ``fn(scope, *primals)`` with respect to the ``vjp_variables``.

    Returns ``(y, vjp_fn)`` (plus ``aux`` with ``has_aux``); ``vjp_fn(ct)`` gives
    ``(variable_cotangents, *primal_cotangents)``.
    """
    del reduce_axes
    n = _scope_count(scope)

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        vjp_vars, other_vars = variable_groups

        def wrapper(vjp_vars, *args):
            inner_scope = scope_fn((_unsqueeze_scopes(vjp_vars, n), other_vars), rng_groups)
            if has_aux:
                y, aux = fn(inner_scope, *args)
            else:
                y, aux = fn(inner_scope, *args), None
            return y, (aux, repack_fn(inner_scope))

        y, bwd, (aux, out_vars) = jax.vjp(wrapper, _squeeze_scopes(vjp_vars), *args,
                                          has_aux=True)
        return ((y, bwd, aux) if has_aux else (y, bwd)), out_vars

    return pack(inner, (vjp_variables, variables), (variables,), (rngs,), name="vjp")(
        scope, *primals)


def value_and_grad(
    fn: Callable[..., Any],
    scope: Scope,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Sequence[Any] = (),
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> tuple[Any, ...]:
    """``(y, grads)`` of scalar ``fn(scope, *primals)`` w.r.t. the primals (a tuple).

    With ``has_aux`` the result is ``(y, aux, grads)`` (as in Flax).
    """
    del reduce_axes

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        def wrapper(*args):
            inner_scope = scope_fn(variable_groups, rng_groups)
            if has_aux:
                y, aux = fn(inner_scope, *args)
            else:
                y, aux = fn(inner_scope, *args), None
            return y, (aux, repack_fn(inner_scope))

        y, bwd, (aux, out_vars) = jax.vjp(wrapper, *args, has_aux=True)
        grads = bwd(jax.numpy.ones_like(y))
        return ((y, aux, grads) if has_aux else (y, grads)), out_vars

    return pack(inner, (variables,), (variables,), (rngs,), name="value_and_grad")(
        scope, *primals)


def grad(fn: Callable[..., Any], scope: Scope, *primals: Any, has_aux: bool = False,
         **kwargs: Any) -> Any:
    """The gradients part of :func:`value_and_grad` (with ``aux``: ``(grads, aux)``)."""
    if has_aux:
        _, aux, grads = value_and_grad(fn, scope, *primals, has_aux=True, **kwargs)
        return grads, aux
    return value_and_grad(fn, scope, *primals, **kwargs)[1]


def jvp(
    fn: Callable[..., Any],
    scope: Scope,
    primals: Sequence[Any],
    tangents: Sequence[Any],
    variable_tangents: Mapping[str, Any],
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> tuple[Any, Any]:
    """``jax.jvp`` of ``fn(scope, *primals)``; collections named in ``variable_tangents``
    get those tangents, the others are constant. Returns ``(y, y_tangent)``."""
    tangent_cols = tuple(variable_tangents.keys())

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, primals, tangents):
        diff_vars, other_vars = variable_groups

        def wrapper(diff_vars, *primals):
            inner_scope = scope_fn((diff_vars, other_vars), rng_groups)
            y = fn(inner_scope, *primals)
            return y, repack_fn(inner_scope)

        # One tangent tree per scope, holding only the collections that scope has (at init
        # a collection may be absent though its tangent is given, as an empty dict).
        var_tangents = tuple({col: variable_tangents[col] for col in d if col in
                              variable_tangents} for d in diff_vars)
        (y, out_vars), (y_t, _) = jax.jvp(wrapper, (diff_vars, *primals),
                                          (var_tangents, *tangents))
        return (y, y_t), out_vars

    return pack(inner, (tangent_cols, variables), (variables,), (rngs,), name="jvp")(
        scope, tuple(primals), tuple(tangents))


def custom_vjp(
    fn: Callable[..., Any],
    forward_fn: Callable[..., Any],
    backward_fn: Callable[..., Any],
    grad_vars: CollectionFilter = "params",
    nondiff_argnums: Sequence[int] = (),
) -> Callable[..., Any]:
    """``fn(scope, *args)`` with a custom backward pass.

    ``forward_fn(scope, *args) -> (y, residuals)``; ``backward_fn(*nondiff_args, residuals,
    y_cotangent) -> (grad_vars_cotangent, *arg_cotangents)``.
    """
    nondiff_argnums = tuple(nondiff_argnums)

    def wrapper(scope_tree: Any, *args: Any, **kwargs: Any) -> Any:
        n = _scope_count(scope_tree)

        def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
            grad_vars_g, other_vars = variable_groups

            def f(grad_variables, *args):
                inner_scope = scope_fn((_unsqueeze_scopes(grad_variables, n), other_vars),
                                       rng_groups)
                y = fn(inner_scope, *args)
                return y, repack_fn(inner_scope)

            def f_fwd(grad_variables, *args):
                inner_scope = scope_fn((_unsqueeze_scopes(grad_variables, n), other_vars),
                                       rng_groups)
                y, res = forward_fn(inner_scope, *args)
                return (y, repack_fn(inner_scope)), res

            def f_bwd(*bwd_args):
                nondiff, res, (y_ct, _) = bwd_args[:-2], bwd_args[-2], bwd_args[-1]
                var_ct, *arg_cts = backward_fn(*nondiff, res, y_ct)
                return (var_ct, *arg_cts)

            # ``nondiff_argnums`` count ``fn(scope, *args)``'s arguments; the grad variables sit
            # where the scope was, so the indices carry over unchanged.
            f_custom = jax.custom_vjp(f, nondiff_argnums=nondiff_argnums)
            f_custom.defvjp(f_fwd, f_bwd)
            return f_custom(_squeeze_scopes(grad_vars_g), *args)

        # ``pack`` warns about keyword arguments and drops them, as for vmap and scan.
        return pack(inner, (grad_vars, True), (True,), (True,), name="custom_vjp")(
            scope_tree, *args, **kwargs)

    return wrapper


# -- control flow ----------------------------------------------------------------------------


def while_loop(
    cond_fn: Callable[[Scope, C], bool],
    body_fn: Callable[[Scope, C], C],
    scope: Scope,
    init: C,
    carry_variables: CollectionFilter = False,
    broadcast_variables: CollectionFilter = True,
    split_rngs: Mapping[PRNGSequenceFilter, bool] = {},  # noqa: B006
) -> C:
    """``jax.lax.while_loop`` over ``body_fn(scope, c)`` while ``cond_fn(scope, c)``.

    ``carry_variables`` may change in the body (not in shape); ``broadcast_variables`` are
    read-only. Variables cannot be created in the body. Streams with
    ``split_rngs[s]=True`` get the key folded with the iteration number.
    """
    rng_filters, rng_splits = tuple(split_rngs.keys()), tuple(split_rngs.values())

    def inner(scope_fn, repack_fn, variable_groups, rng_groups):
        carry_vars, broadcast_vars = variable_groups

        def rngs_for(i):
            return tuple(
                tree_map_rngs(lambda r: LazyRng(jax.random.fold_in(r.rng, i), r.suffix), g)
                if split else g for g, split in zip(rng_groups, rng_splits))

        def make_scope(cvars, i, mutable):
            return scope_fn((cvars, broadcast_vars), rngs_for(i), mutable_filter=mutable)

        def cond(state):
            _, cvars, i = state
            return cond_fn(make_scope(cvars, i, False), state[0])

        def body(state):
            c, cvars, i = state
            inner_scope = make_scope(cvars, i, carry_variables)
            c = body_fn(inner_scope, c)
            cvars_out = repack_fn(inner_scope)[0]
            if jax.tree_util.tree_structure(cvars_out) != jax.tree_util.tree_structure(cvars):
                raise CarryStructureError(
                    "while_loop: the carry variables changed structure in the body. Variables "
                    "cannot be created inside a while_loop body; create them before the loop."
                )
            return c, cvars_out, i + 1

        mutable_carry = repack_fn(scope_fn(variable_groups, rng_groups,
                                           mutable_filter=carry_variables))[0]
        c, cvars, _ = jax.lax.while_loop(cond, body, (init, mutable_carry, 0))
        return c, (cvars, ())

    broadcast_variables = subtract_filters(broadcast_variables, carry_variables)
    return pack(inner, (carry_variables, broadcast_variables), (carry_variables, False),
                rng_filters, name="while_loop")(scope)


def _lifted_branches(branches, scope_fn, repack_fn, variable_groups, rng_groups):
    def make_branch(branch_fn):
        def branch(*ops):
            inner_scope = scope_fn(variable_groups, rng_groups)
            y = branch_fn(inner_scope, *ops)
            return y, repack_fn(inner_scope)
        return branch
    return [make_branch(b) for b in branches]


def cond(
    pred: Any,
    true_fun: Callable[..., C],
    false_fun: Callable[..., C],
    scope: Scope,
    *operands: Any,
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> C:
    """``jax.lax.cond`` over ``branch(scope, *operands)``; both branches must create and
    update variables of the same structure."""

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *operands):
        t, f = _lifted_branches((true_fun, false_fun), scope_fn, repack_fn,
                                variable_groups, rng_groups)
        return jax.lax.cond(pred, t, f, *operands)

    return pack(inner, (variables,), (variables,), (rngs,), name="cond")(scope, *operands)


def switch(
    index: Any,
    branches: Sequence[Callable[..., C]],
    scope: Scope,
    *operands: Any,
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> C:
    """``jax.lax.switch`` over ``branches[index](scope, *operands)``; all branches must
    create and update variables of the same structure."""

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *operands):
        wrapped = _lifted_branches(branches, scope_fn, repack_fn, variable_groups, rng_groups)
        return jax.lax.switch(index, wrapped, *operands)

    return pack(inner, (variables,), (variables,), (rngs,), name="switch")(scope, *operands)


# -- variable mapping ------------------------------------------------------------------------


def map_variables(
    fn: Callable[..., Any],
    mapped_collections: CollectionFilter,
    map_in_fn: Callable[..., Any] = _identity,
    map_out_fn: Callable[..., Any] = _identity,
    init: bool = False,
    mutable: bool = False,
    rngs: PRNGSequenceFilter = True,
    variables: CollectionFilter = True,
) -> Callable[..., Any]:
    """Runs ``fn(scope, ...)`` on variables of ``mapped_collections`` passed through
    ``map_in_fn``; with ``init`` or ``mutable``, updates go back through ``map_out_fn``.

    ``map_in_fn``/``map_out_fn`` receive one ``{collection: tree}`` dict per scope.
    """
    is_target_out = bool(mutable) or bool(init)
    in_vars = (mapped_collections, variables)
    out_vars = in_vars if is_target_out else (False, subtract_filters(variables,
                                                                      mapped_collections))

    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups, *args, **kwargs):
        target, rest = variable_groups
        if init:
            scopes = scope_fn((target, rest), rng_groups)
            leaves = jax.tree_util.tree_leaves(scopes, is_leaf=lambda x: isinstance(x, Scope))
            if any(not is_filter_empty(s.mutable) for s in leaves):
                fn(scopes, *args, **kwargs)
                target, _ = repack_fn(scopes)
                target = tuple(map_out_fn(t) for t in target)
        target = tuple(map_in_fn(t) for t in target)
        mutable_filter = True if is_target_out else subtract_filters(True, mapped_collections)
        scopes = scope_fn((target, rest), rng_groups, mutable_filter=mutable_filter)
        y = fn(scopes, *args, **kwargs)
        out_target, out_rest = repack_fn(scopes)
        if is_target_out:
            out_target = tuple(map_out_fn(t) for t in out_target)
        return y, (out_target, out_rest)

    return pack(wrapper, in_vars, out_vars, (rngs,), name="map_variables", enable_kwargs=True)


def transform(
    fn: Callable[..., Any],
    target: CollectionFilter,
    trans_in_fn: Callable[..., Any] = _identity,
    trans_out_fn: Callable[..., Any] = _identity,
    init: bool = False,
    mutable: bool = False,
    rngs: PRNGSequenceFilter = True,
    variables: CollectionFilter = True,
) -> Callable[..., Any]:
    """The older name of :func:`map_variables` (``target`` = ``mapped_collections``)."""
    return map_variables(fn, target, trans_in_fn, trans_out_fn, init, mutable, rngs, variables)


def swap_collection(fn: Callable[..., Any], col_a: str, col_b: str) -> Callable[..., Any]:
    """Runs ``fn(scope, ...)`` with collections ``col_a`` and ``col_b`` swapped."""

    def swap(target: dict) -> dict:
        out = dict(target)
        a, b = target.get(col_a), target.get(col_b)
        out.pop(col_a, None)
        out.pop(col_b, None)
        if a is not None:
            out[col_b] = a
        if b is not None:
            out[col_a] = b
        return out

    return map_variables(fn, union_filters([col_a], [col_b]), swap, swap, mutable=True)


def named_call(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn(scope, ...)`` run under ``jax.named_scope(name)`` (shows up in profiles)."""

    @functools.wraps(fn)
    def wrapper(scope: Scope, *args: Any, **kwargs: Any) -> Any:
        with jax.named_scope(name):
            return fn(scope, *args, **kwargs)

    return wrapper
