"""Today's ``nnx.custom_vjp``: ``jax.custom_vjp`` for functions of graph nodes.

The arrays of the arguments become the primal inputs of one ``jax.custom_vjp`` function
(the differentiated ones and, with ``None`` cotangents, the others), so nothing is closed
over. The user's rules see Modules:

- ``fwd(*args) -> (out, residuals)``: called on the rebuilt arguments, like ``f``.
- graph mode with graph updates: ``bwd(*nondiff_args, res, (inputs_g, out_g))`` where
  ``inputs_g`` holds, per differentiated argument, a ``State`` of the cotangents of its
  (updated) state; it returns one ``State`` per differentiated argument. A
  ``DiffState(argnum, filter)`` in ``nondiff_argnums`` differentiates only the Variables
  ``filter`` selects.
- functional modes: ``bwd(*nondiff_args, res, out_g)`` returns one cotangent per
  differentiated argument with that argument's structure (e.g. ``nnx.clone(m)`` holding
  gradients); when the function updated Variables of differentiated arguments, ``bwd``
  also receives ``updates_g``: the arguments' structure with cotangents at the updated
  Variables and ``None`` elsewhere.

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> @nnx.custom_vjp(graph_updates=False)
... def f(x):
...     return jnp.sin(x)
>>> f.defvjp(lambda x: (f(x), jnp.cos(x)), lambda cos_x, g: (2 * cos_x * g,))
>>> float(jax.grad(f)(0.0))
2.0
"""

from __future__ import annotations

import functools
import inspect
import typing as tp

import jax

from flaxen.errors import NNXRulesMissingError, NNXTransformError
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _lift, filterlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graph_ops import _nest
from flaxen.nnx._graphdef import NodeDef, NodeRef, VariableDef
from flaxen.nnx.statelib import _flat_mapping
from flaxen.nnx.transforms import _functional
from flaxen.nnx.transforms._common import (
    check_prefix,
    resolve_bound,
    resolve_kwargs,
    resolve_modes,
)

__all__ = ["CustomVjp", "SimpleCustomVjp", "custom_vjp"]

A = tp.TypeVar("A")


def _is_array(x: tp.Any) -> bool:
    return isinstance(x, (jax.Array, jax.core.Tracer)) or hasattr(x, "__jax_array__") or (
        hasattr(x, "dtype") and hasattr(x, "shape"))


class _Plan:
    """Which arrays of a call are differentiated, and where each argument's arrays are."""

    def __init__(self, args: tuple, lift: _lift.Lift, nondiff: frozenset, filters: dict,
                 updates: bool) -> None:
        from flaxen.nnx.transforms._axes import occurrences

        self.lift = lift
        defs = lift.static.defs
        occ = occurrences(defs) if defs else []
        self.arg_leaves: list[range] = []
        # each argument's structure with its graph nodes as leaves: the shape of its
        # cotangent in graph mode (a State in place of each node, arrays as arrays)
        self.arg_treedefs: list[tp.Any] = []
        start = 0
        for a in args:
            leaves, treedef = jax.tree_util.tree_flatten(a, is_leaf=_lift.is_node)
            n = len(leaves)
            self.arg_leaves.append(range(start, start + n))
            self.arg_treedefs.append(treedef)
            start += n
        root_of = {p: r for r, p in enumerate(lift.static.node_pos)}
        self.root_of = root_of
        self.occ = occ
        paths, objs = lift.paths, lift.leaf_objs
        self.arg_values: list[list[tuple[tuple, int]]] = []  # (path, value pos) per argument
        diff_v: list[int] = []
        seen: set[int] = set()
        for k, rng in enumerate(self.arg_leaves):
            items = []
            for p in rng:
                r = root_of.get(p)
                if r is not None:
                    items.extend(occ[r])
            self.arg_values.append(items)
            if k in nondiff:
                continue
            pred = filterlib.to_predicate(filters[k]) if k in filters else None
            for _path, i in items:
                if i in seen:
                    continue
                if pred is None or pred(paths[i], objs[i]):
                    seen.add(i)
                    diff_v.append(i)
        self.diff_args = [k for k in range(len(args)) if k not in nondiff]
        self.diff_v = diff_v
        self.diff_l = [p for k in self.diff_args for p in self.arg_leaves[k]
                       if p not in root_of and _is_array(lift.leaves[p])]
        dv, dl = set(diff_v), set(self.diff_l)
        self.nondiff_v = [i for i in range(len(lift.paths)) if i not in dv]
        self.nondiff_l = [p for p, x in enumerate(lift.leaves)
                          if p not in root_of and p not in dl and _is_array(x)]
        if not updates:
            nd_reach = {i for k in nondiff for _, i in self.arg_values[k]}
            if nd_reach & dv:
                raise NNXTransformError(
                    "", "nnx.custom_vjp: Duplicate Variable: the same Variable is reached "
                    "from a differentiated and a non-differentiated argument",
                    "Pass it once, or use graph=True, graph_updates=True.")

    def assemble(self, diff: tuple, nondiff: tuple) -> tuple[list, list]:
        dv, dl = diff
        nv, nl = nondiff
        vals = [None] * len(self.lift.paths)
        leaves = list(self.lift.leaves)
        for i, x in zip(self.diff_v, dv):
            vals[i] = x
        for i, x in zip(self.nondiff_v, nv):
            vals[i] = x
        for p, x in zip(self.diff_l, dl):
            leaves[p] = x
        for p, x in zip(self.nondiff_l, nl):
            leaves[p] = x
        return vals, leaves

    def split_inputs(self) -> tuple[tuple, tuple]:
        values, leaves = self.lift.values, self.lift.leaves
        return (([values[i] for i in self.diff_v], [leaves[p] for p in self.diff_l]),
                ([values[i] for i in self.nondiff_v], [leaves[p] for p in self.nondiff_l]))


class _CustomVjpBase:
    """What :class:`CustomVjp` and :class:`SimpleCustomVjp` share: the rules, and one call
    body for every mode (``graph``/``graph_updates``: None follows the defaults in force at
    call time). Like Flax's, neither is a descriptor: a method is decorated unbound and
    called as ``f(module, ...)``."""

    def __init__(self, fun: tp.Callable, nondiff_argnums: tuple, graph: bool | None,
                 graph_updates: bool | None) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = nondiff_argnums
        self.graph = graph
        self.graph_updates = graph_updates
        self.nondiff: set[int] = set()
        self.filters: dict[int, tp.Any] = {}
        for a in nondiff_argnums:
            if isinstance(a, int):
                self.nondiff.add(a)
            elif hasattr(a, "argnum") and hasattr(a, "filter"):
                self.filters[a.argnum] = a.filter
            else:
                raise NNXTransformError(
                    "", f"nnx.custom_vjp: nondiff_argnums entries must be ints or "
                    f"nnx.DiffState, got {type(a).__name__}", "")
        self.fwd: tp.Callable | None = None
        self.bwd: tp.Callable | None = None
        self.symbolic_zeros = False

    def defvjp(self, fwd: tp.Callable, bwd: tp.Callable, symbolic_zeros: bool = False
               ) -> None:
        self.fwd = fwd
        self.bwd = bwd
        self.symbolic_zeros = symbolic_zeros

    # -- the call ---------------------------------------------------------------------------

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        # keyword arguments go to their positions: the primal inputs are positional
        if self.fwd is None:  # as jax.custom_vjp: no call before the rules are given
            name = getattr(self.fun, "__name__", repr(self.fun))
            raise NNXRulesMissingError(
                "", f"No VJP defined for custom_vjp function {name} using defvjp.")
        args = resolve_kwargs(self.fun, args, kwargs)
        g, gu = resolve_modes(self.graph, self.graph_updates)
        updates = g and gu
        lift = _lift.Lift(args, {}, check=updates)
        if not updates:
            _functional.check_no_shared(lift.static, "custom_vjp")
        nondiff = frozenset(self.nondiff)
        plan = _Plan(args, lift, nondiff, self.filters if updates else {}, updates)
        box: dict = {}
        fun, fwd, bwd = self.fun, self.fwd, self.bwd
        nondiff_sorted = sorted(nondiff)

        def body(call: tp.Callable, diff: tuple, nd: tuple) -> tuple:
            vals, leaves = plan.assemble(diff, nd)
            args_in, kwargs, inner = _lift.enter(lift.static, vals, leaves)
            result = call(*args_in)
            out, res = result if call is not fun else (result, None)
            new_values, out_leaves, aux = _lift.exit(
                inner, out, functional=None if updates else "custom_vjp")
            box["aux"] = aux
            if updates:
                return (new_values, out_leaves), res, vals
            n_in = aux.n_input_leaves
            new, out_values = new_values[:n_in], new_values[n_in:]
            changed = {i for i, (a, b) in enumerate(zip(new, vals)) if a is not b}
            box["changed"] = changed
            box["updated"] = [i for i in plan.diff_v if i in changed]
            return (new, out_values, out_leaves), res, vals

        @jax.custom_vjp
        def prim(diff: tuple, nd: tuple) -> tuple:
            return body(fun, diff, nd)[0]

        def prim_fwd(diff: tuple, nd: tuple) -> tuple:
            if fwd is None:
                raise NNXTransformError("", "nnx.custom_vjp: no rules registered",
                                        "Call f.defvjp(fwd, bwd) before differentiating f.")
            outs, res, vals = body(fwd, diff, nd)
            return outs, (res, nd, diff)

        def prim_bwd(residuals: tuple, cts: tuple) -> tuple:
            res, nd, diff = residuals
            vals, leaves = plan.assemble(diff, nd)
            args_in = _lift.enter(lift.static, vals, leaves)[0]
            nd_args = [args_in[i] for i in nondiff_sorted]
            if updates:
                grads = self._bwd_graph(bwd, plan,  # type: ignore[arg-type]  # set with fwd
                                         box["aux"], nd_args, res, cts, args)
            else:
                grads = self._bwd_functional(
                    bwd, plan,  # type: ignore[arg-type]  # set with fwd
                    box, nd_args, res, cts, vals, args)
            return grads, None

        prim.defvjp(prim_fwd, prim_bwd)
        outs = prim(*plan.split_inputs())
        if updates:
            new_values, out_leaves = outs
            return lift.finish(box["aux"], new_values, out_leaves)
        new, out_values, out_leaves = outs
        # write back only what the function changed: the primitive's outputs are fresh
        # tracers even for untouched Variables, which would look like updates one level up
        changed = box["changed"]
        objs = lift.leaf_objs
        _lift.check_foreign_writes([objs[i] for i in changed], [new[i] for i in changed])
        for i in changed:
            if hasattr(objs[i], "raw_value"):
                object.__setattr__(objs[i], "raw_value", new[i])
        return _lift.build_output(box["aux"], out_values, out_leaves)

    # -- bwd adapters -------------------------------------------------------------------------

    @staticmethod
    def _to_diff(plan: _Plan, per_arg: tp.Sequence[tp.Any], from_state: bool) -> tuple:
        """The user's per-argument cotangents as the (values, leaves) of the diff inputs."""
        ct_v: dict[int, tp.Any] = {}
        ct_l: dict[int, tp.Any] = {}
        diff_l = set(plan.diff_l)
        for k, ct in zip(plan.diff_args, per_arg):
            if ct is None:
                continue
            items = plan.arg_values[k]
            if from_state:
                parts = _graph_ct_parts(plan, k, ct)
                if parts is not None:
                    for p, x in zip(plan.arg_leaves[k], parts):
                        if x is None:
                            continue
                        r = plan.root_of.get(p)
                        if r is None:
                            if p in diff_l:
                                ct_l[p] = getattr(x, "raw_value", x)
                            continue
                        flat = _flat_mapping(x) if hasattr(x, "flat_state") else {}
                        for path, i in plan.occ[r]:
                            leaf = flat.get(path)
                            if leaf is not None:
                                ct_v[i] = getattr(leaf, "raw_value", leaf)
                    continue
                flat = {}
                if hasattr(ct, "flat_state"):
                    flat = _flat_mapping(ct)
                elif isinstance(ct, (tuple, list)):  # a pytree argument: one State per node
                    for sub in ct:
                        if hasattr(sub, "flat_state"):
                            flat.update(_flat_mapping(sub))
                for path, i in items:
                    leaf = flat.get(path)
                    if leaf is not None:
                        ct_v[i] = getattr(leaf, "raw_value", leaf)
                continue
            tl = _lift.Lift((ct,), {})
            tvals = tl.values
            tocc: dict[tp.Any, int] = {}
            if tl.static.defs:
                from flaxen.nnx.transforms._axes import occurrences

                for r_items in occurrences(tl.static.defs):
                    for path, i in r_items:
                        tocc.setdefault(path, i)
            for path, i in items:
                j = tocc.get(path)
                if j is not None and tvals[j] is not None:
                    ct_v[i] = tvals[j]
            plain = [x for x in tl.leaves if x is not None]
            mine = [p for p in plan.arg_leaves[k] if p in diff_l]
            for p, x in zip(mine, plain):
                ct_l[p] = x
        return ([ct_v.get(i) for i in plan.diff_v], [ct_l.get(p) for p in plan.diff_l])

    def _bwd_graph(self, bwd: tp.Callable, plan: _Plan, aux: _lift.OutStatic, nd_args: list,
                   res: tp.Any, cts: tuple, args: tuple) -> tuple:
        ct_values, ct_out_leaves = cts
        lift = plan.lift
        n_in = aux.n_input_leaves
        # as Flax: each differentiated argument's shape, a State of the updates' cotangents
        # in place of each graph node and None in place of everything else
        ins_g = []
        for k in plan.diff_args:
            parts: list[tp.Any] = []
            for p in plan.arg_leaves[k]:
                r = plan.root_of.get(p)
                if r is None:
                    parts.append(None)
                    continue
                pieces = []
                for path, i in plan.occ[r]:
                    x = ct_values[i] if i < n_in else None
                    obj = lift.leaf_objs[i]
                    pieces.append((path, eng.new_variable(type(obj), x,
                                                          dict(obj.get_metadata()))
                                   if hasattr(obj, "get_metadata") else x))
                parts.append(_nest(pieces))
            ins_g.append(plan.arg_treedefs[k].unflatten(parts))
        out_leaves = list(ct_out_leaves)
        if aux.graphdef.defs[aux.n_inputs:]:
            roots, _ = eng.unflatten(aux.graphdef.defs, list(ct_values))
            for p, n in zip(aux.out_node_pos, roots[aux.n_inputs:]):
                out_leaves[p] = n
        out_g = aux.out_treedef.unflatten(out_leaves)
        result = bwd(*nd_args, res, (tuple(ins_g), out_g))
        if not isinstance(result, tuple):
            result = (result,)
        return self._to_diff(plan, result, from_state=True)

    def _bwd_functional(self, bwd: tp.Callable, plan: _Plan, box: dict, nd_args: list,
                        res: tp.Any, cts: tuple, vals: list, args: tuple) -> tuple:
        ct_new, ct_out_values, ct_out_leaves = cts
        out_g = _lift.build_output(box["aux"], ct_out_values, ct_out_leaves)
        extra: tuple = ()
        updated = box.get("updated") or []
        if _takes_updates(bwd, len(nd_args)):
            extra = (self._updates_g(plan, set(updated), ct_new, vals, args),)
        result = bwd(*nd_args, res, out_g, *extra)
        if not isinstance(result, tuple):
            result = (result,)
        return self._to_diff(plan, result, from_state=False)

    @staticmethod
    def _updates_g(plan: _Plan, updated: set, ct_new: list, vals: list, args: tuple
                   ) -> tuple:
        """The differentiated arguments, cotangents at updated Variables, None elsewhere."""
        lift = plan.lift
        defs = lift.static.defs
        full = [ct_new[i] if i in updated else vals[i] for i in range(len(vals))]
        roots, _ = eng.unflatten(defs, full) if defs else ([], {})
        # blank the attributes holding Variables that were not updated
        counter = [0]

        def blank(node: tp.Any, d: tp.Any) -> None:
            if type(d) is not NodeDef:
                return
            for key, sub in d.attributes:
                if type(sub) is VariableDef:
                    i = counter[0]
                    counter[0] += 1
                    if i not in updated and isinstance(node, GraphNode):
                        node.__dict__[str(key) if node._graph_int_keys else key] = None
                elif type(sub) is NodeDef:
                    child = (node.__dict__.get(str(key) if getattr(
                        node, "_graph_int_keys", False) else key)
                        if isinstance(node, GraphNode) else None)
                    blank(child, sub)
                elif type(sub) is NodeRef:
                    continue

        for r, d in zip(roots, defs):
            blank(r, d)
        out = []
        for k in plan.diff_args:
            treedef: tp.Any  # jax PyTreeDef
            _, treedef = jax.tree_util.tree_flatten(args[k], is_leaf=_lift.is_node)
            new = []
            for p in plan.arg_leaves[k]:
                r = plan.root_of.get(p)
                new.append(roots[r] if r is not None else None)
            out.append(treedef.unflatten(new))
        return tuple(out)


def _graph_ct_parts(plan: _Plan, k: int, ct: tp.Any) -> list | None:
    """Argument ``k``'s cotangent from a graph-mode bwd, one entry per leaf of the argument
    (graph nodes as leaves): a State (or None) per node, an array (or None) per array. None
    when ``ct`` does not have the argument's shape (then the States in it are read by path)."""
    try:
        return plan.arg_treedefs[k].flatten_up_to(ct)
    except (ValueError, TypeError):
        return None


def _takes_updates(bwd: tp.Callable, n_nondiff: int) -> bool:
    """Whether ``bwd`` takes the optional ``updates_g`` argument (after ``res, g``)."""
    try:
        params = list(inspect.signature(bwd).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= n_nondiff + 3


class CustomVjp(_CustomVjpBase, tp.Generic[A]):
    """A function with a custom VJP over graph-node arguments, in graph mode with graph
    updates (what ``nnx.custom_vjp`` returns there); register the rules with
    ``defvjp(fwd, bwd)``. ``bwd`` receives and returns ``State`` cotangents (see the module
    docstring).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> class Scale(nnx.Module):
    ...     def __init__(self):
    ...         self.w = nnx.Param(jnp.array(3.0))
    >>> f = CustomVjp(lambda m: m.w[...] ** 2, ())
    >>> def bwd(res, g):
    ...     (m_g,), out_g = g  # the input's State cotangent, the output's
    ...     return (nnx.State({'w': 10 * out_g}),)
    >>> f.defvjp(lambda m: (f(m), None), bwd)
    >>> float(nnx.grad(f)(Scale())['w'][...])
    10.0
    """

    def __init__(self, fun: tp.Callable[..., A], nondiff_argnums: tuple = ()) -> None:
        super().__init__(fun, tuple(nondiff_argnums), True, True)


class SimpleCustomVjp(_CustomVjpBase, tp.Generic[A]):
    """:class:`CustomVjp` in the functional modes (what ``nnx.custom_vjp`` returns with
    ``graph=False`` or ``graph_updates=False``): ``bwd`` returns cotangents with the
    arguments' own structure, and only the input Variables' new values are written back.

    >>> import jax, jax.numpy as jnp
    >>> f = SimpleCustomVjp(lambda x: x * 3, (), False)
    >>> f.defvjp(lambda x: (x * 3, None), lambda res, g: (g * 10,))
    >>> float(jax.grad(f)(1.0))
    10.0
    """

    def __init__(self, fun: tp.Callable[..., A], nondiff_argnums: tuple = (),
                 graph: bool | None = None) -> None:
        super().__init__(fun, tuple(nondiff_argnums), graph, False)


def custom_vjp(fun: tp.Callable | None = None, *, nondiff_argnums: tuple = (),
               graph: bool | None = None, graph_updates: bool | None = None) -> tp.Any:
    """Lifted ``jax.custom_vjp`` (see the module docstring for the rule signatures): a
    :class:`CustomVjp` in graph mode with graph updates, else a :class:`SimpleCustomVjp`.
    The modes are those in force when it is applied, as in Flax.

    >>> from flaxen import nnx
    >>> type(nnx.custom_vjp(lambda x: x)).__name__
    'CustomVjp'
    >>> type(nnx.custom_vjp(lambda x: x, graph=False)).__name__
    'SimpleCustomVjp'
    """
    if fun is None:
        return functools.partial(custom_vjp, nondiff_argnums=nondiff_argnums, graph=graph,
                                 graph_updates=graph_updates)
    resolve_bound(fun, "custom_vjp")
    g, gu = resolve_modes(graph, graph_updates)
    check_prefix(tuple(nondiff_argnums), "nondiff_argnums", "custom_vjp", g, gu)
    if g and gu:
        return CustomVjp(fun, tuple(nondiff_argnums))
    return SimpleCustomVjp(fun, tuple(nondiff_argnums), g)

