"""``pack``: the one primitive behind every lifted transformation (see ``lift``).

1. scope de-duplication: of the scopes passed in, only roots (scopes without an ancestor
   in the set) are lifted; the others are re-created from their root by path;
2. filtering: variables and RNG streams are split into groups by the filters, each
   collection/stream going to the *first* matching group (unmatched ones are not lifted);
3. the transform-specific call (``fn(scope_fn, repack_fn, variable_groups, rng_groups,
   *args)``), typically through a JAX transform;
4. scope reconstruction: ``scope_fn(variable_groups, rng_groups)`` builds inner scopes;
5. repacking: ``repack_fn(inner_scopes)`` gives the mutable variables back as groups;
6. commit: the repacked variables are written into the original scopes.

RNG streams enter a transform as the outer scope's ``LazyRng`` with shared counters, so
keys drawn inside are the ones Flax draws (``split_rngs`` splits the underlying key).
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax

from flaxen.core._filters import (
    CollectionFilter,
    PRNGSequenceFilter,
    group_collections,
    in_filter,
    intersect_filters,
    union_filters,
)
from flaxen.core._rng import LazyRng
from flaxen.core.frozen_dict import FrozenDict
from flaxen.core.scope import Scope, _copy_dicts
from flaxen.typing import In, Out  # the axis markers live with the public type aliases

T = TypeVar("T")


def _split_in_out_axes(xs: Mapping[CollectionFilter, Any]) -> tuple[dict, dict]:
    ins, outs = {}, {}
    for key, value in xs.items():
        if isinstance(value, In):
            ins[key] = value.axis
        elif isinstance(value, Out):
            outs[key] = value.axis
        else:
            ins[key] = value
            outs[key] = value
    return ins, outs


def _unzip(items: Any) -> tuple[tuple, tuple]:
    items = list(items)
    return tuple(k for k, _ in items), tuple(v for _, v in items)


# ---------------------------------------------------------------------------------------
# pack


def _is_scope(x: Any) -> bool:
    return isinstance(x, Scope)


def _dedup(scopes: list[Scope]) -> tuple[list[Scope], list[tuple[int, tuple[str, ...]]]]:
    """Stage 1: the root scopes, and for each scope (root index, path below that root)."""
    ids = {id(s) for s in scopes}
    roots: list[Scope] = []
    root_index: dict[int, int] = {}
    for s in scopes:
        ancestor = s.parent
        is_root = True
        while ancestor is not None:
            if id(ancestor) in ids:
                is_root = False
                break
            ancestor = ancestor.parent
        if is_root and id(s) not in root_index:
            root_index[id(s)] = len(roots)
            roots.append(s)
    refs = []
    for s in scopes:
        path: list[str] = []
        node: Any = s  # every scope reaches a root in root_index through its parents
        while id(node) not in root_index:
            path.append(node.name)
            node = node.parent
        refs.append((root_index[id(node)], tuple(reversed(path))))
    return roots, refs


def _scope_collections(scope: Scope) -> dict[str, Any]:
    out = {}
    for col in scope._store.variables:
        found = scope._collection(col)
        if found is not None:
            out[col] = found
    return out


def _sorted_dicts(x: Any) -> Any:
    """``x`` with the keys of every (Frozen)dict level sorted.

    Flax copies the variables entering a lifted transform with a pytree map, which sorts
    dict keys; that order is the one of the variables the transform hands back (visible
    where no JAX transform re-sorts them, e.g. ``map_variables``).
    """
    if isinstance(x, FrozenDict):
        return FrozenDict({k: _sorted_dicts(x[k]) for k in sorted(x)})
    if isinstance(x, dict):
        return {k: _sorted_dicts(x[k]) for k in sorted(x)}
    return x


def _copy_mutable(variables: Mapping[str, Any], mutable: CollectionFilter) -> dict:
    return {col: _copy_dicts(v) if in_filter(mutable, col) else v
            for col, v in variables.items()}


def pack(
    fn: Callable[..., Any],
    in_variable_filters: Sequence[CollectionFilter],
    out_variable_filters: Sequence[CollectionFilter],
    rng_filters: Sequence[PRNGSequenceFilter],
    name: str | None = None,
    enable_kwargs: bool = False,
) -> Callable[..., Any]:
    """Lifts ``fn(scope_fn, repack_fn, variable_groups, rng_groups, *args)`` to scopes.

    The result is called as ``wrapper(scope_tree, *args)``. ``variable_groups`` holds one
    entry per ``in_variable_filters`` item; each is a tuple with one ``{collection: vars}``
    dict per root scope. ``rng_groups`` is the same for RNG streams (``LazyRng`` values).
    ``fn`` must return ``(out, repacked)`` where ``repacked = repack_fn(inner_scopes)``.
    See the module docstring for the stages.
    """
    in_variable_filters = tuple(in_variable_filters)
    out_variable_filters = tuple(out_variable_filters)
    rng_filters = tuple(rng_filters)

    @functools.wraps(fn)
    def wrapper(scope_tree: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs and not enable_kwargs:
            # Flax warns and carries on without them; code that relies on the keyword's
            # default keeps working, so this stays a warning rather than an error.
            warnings.warn(
                f'kwargs are not supported in {name}, so "{", ".join(kwargs)}" is(are) '
                "ignored: the wrapped function runs with their defaults. Pass these "
                "arguments positionally to have them used.",
                RuntimeWarning,
                stacklevel=2,
            )
            kwargs = {}
        scopes, treedef = jax.tree_util.tree_flatten(scope_tree, is_leaf=_is_scope)
        for s in scopes:
            if not isinstance(s, Scope):
                raise TypeError(
                    f"The lifted transform {name or fn.__name__!r} expects Scopes in its first "
                    f"argument, found {type(s).__name__}."
                )
            s._check_valid()
        roots, refs = _dedup(scopes)

        # Stage 2: filter variables and RNGs of every root into groups.
        variable_groups = tuple(zip(*(group_collections(_scope_collections(r),
                                                        in_variable_filters)
                                      for r in roots))) or tuple(() for _ in in_variable_filters)
        rng_groups = tuple(zip(*(group_collections(r.rngs, rng_filters) for r in roots))) or (
            tuple(() for _ in rng_filters))
        # Weak: an inner scope built inside a nested trace (scan's first pass) holds that
        # trace's tracers and must be freed when the trace ends; one still alive at the end
        # (bound to a Module, say) is invalidated then.
        inner_scopes: list[weakref.ref[Scope]] = []

        def scope_fn(variable_groups: Sequence, rng_groups: Sequence,
                     mutable_filter: CollectionFilter = True) -> Any:
            # Stage 4: rebuild inner scopes from (possibly transformed) groups.
            inner_roots = []
            for i, root in enumerate(roots):
                variables: dict[str, Any] = {}
                for group in variable_groups:
                    variables.update(group[i])
                rngs: dict[str, Any] = {}
                for group in rng_groups:
                    rngs.update(group[i])
                mutable = intersect_filters(root.mutable, mutable_filter)
                mutable = intersect_filters(mutable, _union_all(out_variable_filters))
                inner = Scope(_copy_mutable(_sorted_dicts(variables), mutable), rngs=rngs,
                              name=root.name,
                              mutable=mutable, parent=None, path=root.path,
                              debug_path=_lifted_debug_path(root.debug_path, name),
                              flags=root.flags)
                # Counters are shared with the outer scope, as in Flax: keys drawn inside
                # continue the outer sequence.
                inner.rng_counters = root.rng_counters
                inner._child_counters = root._child_counters
                inner.reservations = root.reservations.__class__(set)
                inner_roots.append(inner)
                inner_scopes.append(weakref.ref(inner))
            out = []
            for root_i, path in refs:
                s = inner_roots[root_i]
                for p in path:
                    s = s.push(p, reuse=True)
                out.append(s)
            return jax.tree_util.tree_unflatten(treedef, out)

        def repack_fn(inner_tree: Any) -> tuple:
            # Stage 5: mutable variables of the inner roots, grouped by the out filters.
            inner_roots: list[Scope | None] = [None] * len(roots)
            leaves = jax.tree_util.tree_leaves(inner_tree, is_leaf=_is_scope)
            for (root_i, _), leaf in zip(refs, leaves):
                while leaf.parent is not None:
                    leaf = leaf.parent
                inner_roots[root_i] = leaf
            groups_per_root: list[Any] = []
            for inner in inner_roots:
                if inner is None:
                    groups_per_root.append(tuple({} for _ in out_variable_filters))
                    continue
                mutable_vars = {col: v for col, v in _scope_collections(inner).items()
                                if inner.is_mutable_collection(col)}
                groups_per_root.append(group_collections(mutable_vars, out_variable_filters))
            return tuple(zip(*groups_per_root)) or tuple(() for _ in out_variable_filters)

        try:
            y, out_groups = fn(scope_fn, repack_fn, variable_groups, rng_groups,
                               *args, **kwargs)
        finally:
            for ref in inner_scopes:
                inner = ref()
                if inner is not None:
                    inner.invalidate()
        # Stage 6: commit the updated variables to the original scopes.
        for group in out_groups:
            for i, cols in enumerate(group):
                root = roots[i]
                for col, tree in cols.items():
                    if not root.is_mutable_collection(col):
                        continue
                    for var_name, value in tree.items():
                        root.put_variable(col, var_name, value)
        return y

    return wrapper


def _lifted_debug_path(debug_path: tuple, name: str | None) -> tuple:
    """``debug_path`` with its last name wrapped in the transform's: ``('a', 'vmap(b)')``."""
    if not name:
        return debug_path
    if not debug_path:
        # A root scope has no name to wrap; errors still say which transform they came
        # from (``"/jit()"``), as Flax's do.
        return (f"{name}()",)
    return (*debug_path[:-1], f"{name}({debug_path[-1]})")


def _union_all(filters: Sequence[CollectionFilter]) -> CollectionFilter:
    out: CollectionFilter = False
    for f in filters:
        out = union_filters(out, f)
    return out


def _squeeze_scopes(group: tuple) -> Any:
    return group[0] if len(group) == 1 else group


def _unsqueeze_scopes(value: Any, n: int) -> tuple:
    return (value,) if n == 1 else tuple(value)


def tree_map_rngs(fn: Callable[[LazyRng], Any], tree: Any) -> Any:
    """Maps ``fn`` over the ``LazyRng`` leaves of ``tree``."""
    return jax.tree_util.tree_map(fn, tree, is_leaf=lambda x: isinstance(x, LazyRng))
