"""Today's ``nnx.scan`` (Flax 0.12.8): ``Carry`` markers in ``in_axes``/``out_axes``.

``in_axes`` has one entry per positional argument (or one for all): ``nnx.Carry`` (the loop
carry, at most one), an int (scanned along that axis), ``None`` (broadcast: the same value
each step), a ``StateAxes`` (per-Variable choice by filter) or a pytree prefix of those.
``out_axes`` says where the function's output holds the carry and along which axis the other
outputs are stacked. Variables anywhere in the arguments are updated in place: carried
state ends with its final value, scanned state is restacked, and broadcast Variables keep
their updates when ``graph_updates=False`` (they are then carried). The arguments are lifted
by :class:`~flaxen.nnx._lift.Lift` in roots mode: every leaf has a path from its argument's
position, from which its axis is read; each step enters fresh copies, and with
``graph_updates=False`` :func:`~flaxen.nnx._lift.check_carry` holds the state fixed.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> def cumsum(total, x):
...   total = total + x
...   return total, total
>>> total, ys = nnx.scan(cumsum)(jnp.array(0.0), jnp.arange(4.0))
>>> float(total), ys.tolist()
(6.0, [0.0, 1.0, 3.0, 6.0])
"""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

from flaxen import traceback_util
from flaxen.errors import NNXArgumentError, NNXStructureChangeError, NNXTransformError
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _lift, filterlib, spmd
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graphdef import NodeRef, VariableDef
from flaxen.nnx._lift import Lift, is_node
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.rnglib import RngCount, RngKey
from flaxen.nnx.transforms._common import arrays_for_scalars, resolve_bound, resolve_kwargs
from flaxen.nnx.variablelib import Variable

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])


class Carry:
    """Marks, in ``nnx.scan``'s ``in_axes``/``out_axes``, the argument that is the carry."""




# -- axes specs ------------------------------------------------------------------------------

def _is_state_axes(x: tp.Any) -> bool:
    return hasattr(x, "filters") and hasattr(x, "axes") and not isinstance(x, type)


def _state_axes_items(x: tp.Any) -> list[tuple[tp.Callable, tp.Any]]:
    return [(filterlib.to_predicate(f), a) for f, a in zip(x.filters, x.axes)]


def _spec_leaves(spec: tp.Any) -> list:
    if _is_state_axes(spec):
        return list(spec.axes)
    if spec is Carry:
        return [Carry]
    return jax.tree_util.tree_leaves(spec, is_leaf=lambda x: x is None or x is Carry
                                     or _is_state_axes(x))


def _has_carry(spec: tp.Any) -> bool:
    return any(a is Carry or (_is_state_axes(a) and Carry in list(a.axes))
               for a in _spec_leaves(spec))


def _has_plain_carry(spec: tp.Any) -> bool:
    return any(a is Carry for a in _spec_leaves(spec)) and not _is_state_axes(spec)


def _top_entries(spec: tp.Any) -> list:
    return list(spec) if isinstance(spec, (tuple, list)) else [spec]


def _check_axes(in_axes: tp.Any, out_axes: tp.Any) -> None:
    """The mistakes visible when the transform is made (before any call)."""
    n_carry = sum(1 for a in _top_entries(in_axes) if a is Carry)
    if n_carry > 1:
        raise NNXTransformError(
            "in_axes", f"nnx.scan: Found multiple Carry definitions in in_axes={in_axes!r}",
            "Mark exactly one argument as nnx.Carry (group several values in one tuple).")
    # a Carry inside StateAxes (that state carried through the loop) does not count here: as
    # in Flax, only a Carry marking a whole argument needs its partner in out_axes
    if _has_plain_carry(in_axes) != _has_plain_carry(out_axes):
        raise NNXTransformError(
            "in_axes/out_axes", "nnx.scan: If one of in_axes or out_axes has Carry, the other "
            f"must also have Carry (got in_axes={in_axes!r}, out_axes={out_axes!r})",
            "Mark the carry on both sides, e.g. in_axes=(nnx.Carry, 0), "
            "out_axes=(nnx.Carry, 0).")
    for a in _top_entries(out_axes):
        if _is_state_axes(a):
            if any(x is None for x in a.axes):
                raise NNXTransformError(
                    "out_axes", f"nnx.scan: Cannot broadcast output state. Got StateAxes "
                    f"{a!r} with a None axis in out_axes",
                    "Outputs are stacked along an int axis (or are the Carry); use an int.")
            if any(x is Carry for x in a.axes):
                raise NNXTransformError(
                    "out_axes", f"nnx.scan: Cannot carry output state. Got StateAxes "
                    f"{a!r} with a Carry axis in out_axes",
                    "Carry state by marking it in in_axes' StateAxes only; outputs are "
                    "stacked along an int axis (or are the Carry).")
            continue
        if any(x is None for x in _spec_leaves(a)) or a is None:
            raise NNXTransformError(
                "out_axes", f"nnx.scan: Cannot broadcast output state: out_axes={out_axes!r} "
                "holds None", "Outputs are stacked along an int axis (or are the Carry); "
                "use an int, e.g. 0.")


def _nested_carry_error(where: str, spec: tp.Any) -> NNXTransformError:
    return NNXTransformError(
        where, f"nnx.scan: Carry must be a whole argument or output, found nested in {spec!r}",
        "Use nnx.Carry as a top-level entry of in_axes/out_axes.")


def _leaf_axis(spec: tp.Any, sub_path: tuple, leaf: tp.Any) -> tp.Any:
    """The axis (int, None or Carry) of the leaf at ``sub_path`` inside an argument whose
    entry in ``in_axes`` is ``spec``."""
    top = spec
    for i, k in enumerate(sub_path):
        if spec is None or spec is Carry or isinstance(spec, int) or _is_state_axes(spec):
            break
        if hasattr(spec, "map_prefix"):  # nnx.prefix of a graph node: one axis per path
            return spec.map_prefix(sub_path[i:], leaf)
        if isinstance(spec, Variable):
            spec = spec.raw_value
            break
        try:
            if isinstance(spec, GraphNode):
                spec = spec.__dict__[str(k) if type(spec)._graph_int_keys else k]
            else:
                spec = spec[k]
        except (KeyError, IndexError, TypeError) as e:
            raise NNXArgumentError(
                eng.path_str(sub_path[: i + 1]), f"nnx.scan: in_axes prefix {top!r} has no "
                f"entry for this argument key ({type(e).__name__})",
                "Give in_axes a prefix of the argument's structure.") from None
        if spec is Carry:
            raise _nested_carry_error("in_axes", top)
    if isinstance(spec, Variable):
        spec = spec.raw_value
    if hasattr(spec, "map_prefix"):
        return spec.map_prefix((), leaf)
    if _is_state_axes(spec):
        for pred, axis in _state_axes_items(spec):
            if pred(sub_path, leaf):
                return axis
        return None
    if spec is not None and spec is not Carry and not isinstance(spec, int):
        if spec is Carry or Carry in _spec_leaves(spec):
            raise _nested_carry_error("in_axes", top)
        raise NNXArgumentError(
            eng.path_str(sub_path), f"nnx.scan: in_axes prefix {top!r} does not reach this "
            "leaf", "Give in_axes a prefix of the argument's structure.")
    return spec


_CACHE_SIZE = 16


def _is_array_like(x: tp.Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))


def _axis0(x: tp.Any, axis: int) -> tp.Any:
    # a Variable's value may be a pytree (e.g. the dict nnx.capture sows into)
    if axis == 0:
        return x
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, axis, 0), x)


def _from0(x: tp.Any, axis: int) -> tp.Any:
    if axis == 0:
        return x
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, axis), x)


# -- the transform ---------------------------------------------------------------------------

class _Plan:
    """Per leaf of the walked arguments: 'carry', 'scan' (with its axis) or 'const'."""

    def __init__(self, lift: Lift, roots: tp.Sequence[tp.Any], in_axes: tp.Any,
                 graph_updates: bool) -> None:
        entries = in_axes if isinstance(in_axes, (tuple, list)) else None
        n_args = len(roots)
        if entries is not None and len(entries) != n_args:
            raise NNXArgumentError(
                "in_axes", f"nnx.scan: in_axes has {len(entries)} entries but the function "
                f"got {n_args} positional arguments", "Give one in_axes entry per argument.")
        self.kinds: list[str] = []
        self.axes: list[tp.Any] = []
        seen: dict[int, tp.Any] = {}
        for path, leaf in zip(lift.paths, lift.leaf_objs):
            spec = entries[path[0]] if entries is not None else in_axes
            ax = _leaf_axis(spec, path[1:], leaf)
            if ax is Carry:
                kind = "carry"
            elif ax is None:
                kind = "carry" if isinstance(leaf, Variable) and not graph_updates else "const"
            else:
                kind = "scan"
            self.kinds.append(kind)
            self.axes.append(ax)
            if isinstance(leaf, Variable):
                seen[id(leaf)] = ax
        self._follow_keys(lift)
        if entries is not None and len(seen) and n_args > 1:
            _check_aliasing(roots, entries)

    def _follow_keys(self, lift: Lift) -> None:
        """A stream's counter goes with its key: a scanned key of a split stream (one key per
        step) scans the stream's same-shaped counter too, whatever the filter said."""
        key_axis = {p[:-1]: ax for p, leaf, ax, kind in
                    zip(lift.paths, lift.leaf_objs, self.axes, self.kinds)
                    if isinstance(leaf, RngKey) and kind == "scan"}
        if not key_axis:
            return
        for j, (p, leaf) in enumerate(zip(lift.paths, lift.leaf_objs)):
            ax = key_axis.get(p[:-1])
            if (isinstance(leaf, RngCount) and ax is not None and self.kinds[j] != "scan"
                    and np.ndim(leaf.raw_value) > 0):
                self.kinds[j] = "scan"
                self.axes[j] = ax


def _check_aliasing(roots: tp.Sequence[tp.Any], entries: tp.Sequence[tp.Any]) -> None:
    """A Variable reached from two arguments must get the same axis from both."""
    first: dict[int, tuple[tp.Any, tuple]] = {}
    for i, root in enumerate(roots):
        if not any(is_node(x) for x in jax.tree_util.tree_leaves(root, is_leaf=is_node)):
            continue
        fg = eng.flatten([root], root_paths=[(i,)])
        for path, leaf in zip(fg.paths, fg.leaves):
            if not isinstance(leaf, Variable):
                continue
            ax = _leaf_axis(entries[i], path[1:], leaf)
            prev = first.setdefault(id(leaf), (ax, path))
            if prev[0] is not ax and prev[0] != ax:
                raise NNXTransformError(
                    eng.path_str(path), f"nnx.scan: Inconsistent aliasing: this Variable is "
                    f"also at {eng.path_str(prev[1])} with axis {prev[0]!r}, here with {ax!r}",
                    "Pass a shared Variable once, or give both places the same in_axes.")


def _split_output(out: tp.Any, out_axes: tp.Any) -> tuple[tp.Any, tp.Any, tp.Any, int | None]:
    """``(carry, ys, ys_axes, carry_position)`` of the function's output."""
    if out_axes is Carry:
        return out, None, None, -1
    if isinstance(out_axes, (tuple, list)) and any(a is Carry for a in out_axes):
        if not isinstance(out, (tuple, list)) or len(out) != len(out_axes):
            raise NNXArgumentError(
                "", f"nnx.scan: the function must return a tuple of {len(out_axes)} items "
                f"matching out_axes={out_axes!r}", "Return (carry, outputs...) as out_axes "
                "says.")
        j = next(i for i, a in enumerate(out_axes) if a is Carry)
        ys = tuple(o for i, o in enumerate(out) if i != j)
        axes = tuple(a for i, a in enumerate(out_axes) if i != j)
        return out[j], ys, axes, j
    if _has_carry(out_axes):
        raise _nested_carry_error("out_axes", out_axes)
    return None, out, out_axes, None


def _join_output(carry: tp.Any, ys: tp.Any, pos: int | None) -> tp.Any:
    if pos is None:
        return ys
    if pos == -1:
        return carry
    items = list(ys)
    items.insert(pos, carry)
    return tuple(items)


def _stack_axes(ys: tp.Any, axes: tp.Any) -> list:
    """The out axis of each leaf of ``ys`` (in the engine's walk order) from the prefix
    ``axes``: an int for all, or one entry (int or StateAxes) per output item."""
    if isinstance(axes, int):
        return [axes] * len(eng.flatten([ys]).leaves)
    if (isinstance(axes, (tuple, list)) and isinstance(ys, (tuple, list))
            and len(axes) == len(ys)):
        out: list = []
        for spec, y in zip(axes, ys):
            fg = eng.flatten([y])
            for p, leaf in zip(fg.paths, fg.leaves):
                ax = spec if isinstance(spec, int) else 0
                if _is_state_axes(spec):
                    for pred, a in _state_axes_items(spec):
                        if pred(p, leaf):
                            ax = a
                            break
                out.append(ax)
        return out
    leaves = jax.tree_util.tree_leaves(axes)
    ax = leaves[0] if leaves and isinstance(leaves[0], int) else 0
    return [ax] * len(eng.flatten([ys]).leaves)


def scan(
    f: F | None = None,
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
    in_axes: tp.Any = (Carry, 0),
    out_axes: tp.Any = (Carry, 0),
    transform_metadata: tp.Mapping[str, tp.Any] = {},  # noqa: B006 - read only
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> tp.Any:
    """Lifted ``jax.lax.scan`` over functions of Modules, Variables and arrays.

    See the module docstring for ``in_axes``/``out_axes``. ``length`` is needed when nothing
    is scanned. Usable as a decorator with keyword arguments only.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    ... def total(c, x):
    ...   return c + x
    >>> float(total(jnp.array(0.0), jnp.arange(5.0)))
    10.0
    """
    if f is None:
        return functools.partial(
            scan, length=length, reverse=reverse, unroll=unroll,
            _split_transpose=_split_transpose, in_axes=in_axes, out_axes=out_axes,
            transform_metadata=transform_metadata, graph=graph, graph_updates=graph_updates)
    resolve_bound(f, "scan")
    _check_axes(in_axes, out_axes)
    has_partition = spmd.PARTITION_NAME in transform_metadata
    cache: dict[tp.Any, tuple] = {}

    def _make_runner(lift: Lift, kinds: list, axes: list, n: int, updates: bool,
                     carry_pos: int | None, kwargs: dict, jit: bool) -> tuple:
        """The pure ``(init, xs, consts) -> scan results`` for one argument structure, and
        the dict its trace fills with the static facts of the step's result."""
        carry_idx = [i for i, k in enumerate(kinds) if k == "carry"]
        scan_idx = [i for i, k in enumerate(kinds) if k == "scan"]
        const_idx = [i for i, k in enumerate(kinds) if k == "const"]
        n_leaves = len(kinds)
        trace: dict[str, tp.Any] = {}

        def body(consts: list, c: list, x: list) -> tuple[list, tuple]:
            vals: list = [None] * n_leaves
            for i, v in zip(const_idx, consts):
                vals[i] = v
            for i, v in zip(carry_idx, c):
                vals[i] = v
            for i, v in zip(scan_idx, x):
                vals[i] = v
            inner, _, entered = _lift.enter(lift.static, vals, lift.leaves)
            built = entered.built
            if has_partition:  # each step sees its slice's layout
                for i in scan_idx:
                    if isinstance(lift.leaf_objs[i], Variable):
                        var = _inner_var(lift, i, built)
                        if var is not None:
                            spmd.remove_axis(var, axes[i], transform_metadata)
            out = f(*inner, **kwargs)
            carry_out, ys, ys_axes, jpos = _split_output(out, out_axes)
            after = list(inner)
            if carry_pos is not None:
                after[carry_pos] = arrays_for_scalars(carry_out)
            fg = eng.flatten([*after, ys], root_paths=[*((i,) for i in range(len(after))),
                                                      ("out",)])
            ident = ("Carry references must be the same between iterations" if updates
                     else "scan Variable identity must be preserved across iterations")
            if updates:
                if carry_pos is not None:
                    _check_refs(after[carry_pos], built, ident)
            else:
                _lift.check_carry(lift, fg.defs, fg.refs, built, "nnx.scan", ident,
                                  n_roots=len(after))
                if any(type(d) is NodeRef and d.index < len(lift.refs)
                       for d in _ys_refs(fg.defs[-1])):
                    raise NNXTransformError(
                        "", "nnx.scan with graph_updates=False does not support Variable "
                        "aliasing between inputs and outputs: an output returns an input's "
                        "Variable or Module", "Return arrays (v[...]) instead, or use "
                        "graph_updates=True.")
            new = fg.values()
            order = _leaf_order(lift, fg, built)
            pos_in = {j: k for k, (kind, j) in enumerate(order) if kind == "in"}
            missing = [j for j in range(n_leaves) if j not in pos_in]
            if missing:
                raise NNXTransformError(
                    eng.path_str(lift.paths[missing[0]]), "nnx.scan: the function removed "
                    "this input leaf from its argument", "Keep the inputs' state in place.")
            extra_k = [k for k, (kind, _) in enumerate(order) if kind == "extra"]
            trace["defs"] = fg.defs
            trace["order"] = order
            trace["jpos"] = jpos
            trace["extra_axes"] = _extra_axes([fg.paths[k] for k in extra_k],
                                              [fg.leaves[k] for k in extra_k], ys, ys_axes,
                                              in_axes)
            return ([new[pos_in[i]] for i in carry_idx],
                    ([new[pos_in[i]] for i in scan_idx], [new[k] for k in extra_k]))

        def run(init: list, xs: list, consts: list) -> tuple:
            return jax.lax.scan(
                functools.partial(body, consts), init, xs, length=n, reverse=reverse,
                unroll=unroll, _split_transpose=_split_transpose)

        return (jax.jit(run) if jit else run), trace

    @traceback_util.api_boundary
    @functools.wraps(f)
    def scan_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        graph_mode, updates = resolve_modes(graph, graph_updates)
        if kwargs:
            args, kwargs = resolve_kwargs(f, args, kwargs), {}
        if in_axes is Carry and len(args) != 1:
            raise NNXTransformError(
                "", f"nnx.scan: When in_axes=Carry, the function must take exactly one "
                f"argument (the carry), got {len(args)}",
                "Pass one argument, or give in_axes one entry per argument.")
        entries = _top_entries(in_axes) if isinstance(in_axes, (tuple, list)) else None
        roots = list(args)
        for i, a in enumerate(roots):
            spec = entries[i] if entries is not None and i < len(entries) else in_axes
            if spec is not None:
                roots[i] = arrays_for_scalars(a)
        lift = Lift(tuple(roots), {}, roots=True)
        # tree mode (graph=False) and graph_updates=False carry broadcast Variables through
        # the loop so that writes to them inside the body reach the caller, as in Flax
        plan = _Plan(lift, roots, in_axes, updates and graph_mode)
        kinds, axes, values = plan.kinds, plan.axes, lift.values
        carry_idx = [i for i, k in enumerate(kinds) if k == "carry"]
        scan_idx = [i for i, k in enumerate(kinds) if k == "scan"]
        n = length
        if n is None:
            for i in scan_idx:
                for a in jax.tree_util.tree_leaves(values[i]):
                    n = np.shape(a)[axes[i]] if np.ndim(a) else None
                    break
                if n is not None:
                    break
        if n is None:
            raise NNXArgumentError(
                "length", "nnx.scan cannot tell how many steps to run: nothing is scanned",
                "Pass length=... .")
        for i in scan_idx:
            for a in jax.tree_util.tree_leaves(values[i]):
                shape = np.shape(a)
                if shape and -len(shape) <= axes[i] < len(shape) and shape[axes[i]] == n:
                    continue
                raise NNXArgumentError(
                    eng.path_str(lift.paths[i]), f"nnx.scan: this input has shape {shape}, "
                    f"it cannot be scanned along axis {axes[i]} for {n} steps",
                    "Scan inputs whose axis has the scan's length, or broadcast it (None).")
        xs = [_axis0(values[i], axes[i]) for i in scan_idx]
        carry_pos = next((i for i, a in enumerate(entries or ()) if a is Carry),
                         0 if in_axes is Carry else None)
        saved_meta = [dict(leaf._var_metadata) if isinstance(leaf, Variable) else None
                      for leaf in lift.leaf_objs]

        const_idx = [i for i, k in enumerate(kinds) if k == "const"]
        consts = [values[i] for i in const_idx]
        key = (lift.static.defs, tuple(kinds), tuple(axes), n, updates)
        cacheable = not kwargs and all(_is_array_like(v) for v in values)
        if cacheable:
            try:
                hash(key)
            except TypeError:
                cacheable = False
        entry = cache.get(key) if cacheable else None
        if entry is None:
            entry = _make_runner(lift, kinds, axes, n, updates, carry_pos, kwargs, cacheable)
            if cacheable:
                if len(cache) >= _CACHE_SIZE:
                    del cache[next(iter(cache))]
                cache[key] = entry
        run, trace = entry
        init = [values[i] for i in carry_idx]
        c_out, (s_out, extra_out) = run(init, xs, consts)
        final = list(values)
        for i, v in zip(carry_idx, c_out):
            final[i] = v
        for i, v in zip(scan_idx, s_out):
            final[i] = _from0(v, axes[i])
        extra_axes = trace["extra_axes"]
        extra_final = iter([_from0(v, a) for v, a in zip(extra_out, extra_axes)])
        ordered = [final[j] if kind == "in" else next(extra_final)
                   for kind, j in trace["order"]]
        built_roots = lift.write_back(trace["defs"], ordered)
        for j, (leaf, meta) in enumerate(zip(lift.leaf_objs, saved_meta)):
            if meta is not None and not (has_partition and kinds[j] == "scan"):
                object.__setattr__(leaf, "_var_metadata", meta)
        if has_partition:
            _add_axes(built_roots, trace["order"], kinds, axes, extra_axes,
                      transform_metadata)
        n_args = len(roots)
        carry_res = built_roots[carry_pos] if carry_pos is not None else None
        if not updates and carry_res is not None:
            carry_res = _detached(carry_res)
        return _join_output(carry_res, built_roots[n_args], trace["jpos"])

    return scan_wrapper


def _detached(tree: tp.Any) -> tp.Any:
    """Functional modes: the returned carry with new graph nodes around the same Variables.
    The inputs were brought up to date in place; the nodes of the output, like any pytree
    output, are not the inputs (an enclosing functional ``nnx.jit`` refuses returning its
    inputs), while each Variable keeps its identity (as Flax's scan preserves it)."""
    treedef: tp.Any  # jax PyTreeDef
    leaves, treedef = jax.tree_util.tree_flatten(
        tree, is_leaf=lambda x: isinstance(x, (GraphNode, Variable)))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, (GraphNode, Variable))]
    if not pos:
        return tree
    fg = eng.flatten(tuple(leaves[i] for i in pos))
    copies, _ = eng.unflatten(fg.defs, fg.leaves)  # Variables given: reused as they are
    for i, c in zip(pos, copies):
        leaves[i] = c
    return treedef.unflatten(leaves)


def _leaf_order(lift: Lift, fg: tp.Any, built: dict) -> list[tuple[str, int]]:
    """For each leaf of the walk after a step: ``("in", j)`` when it is input leaf ``j``
    (the same Variable copy, or an array at the same path), else ``("extra", k)``."""
    by_path = {p: j for j, p in enumerate(lift.paths)}
    leaf_objs, refs = lift.leaf_objs, lift.refs
    var_pos = {}
    for i, ref in enumerate(refs):
        if isinstance(ref, Variable) and i in built:
            var_pos[id(built[i])] = i
    ref_leaf = {id(leaf): j for j, leaf in enumerate(leaf_objs) if isinstance(leaf, Variable)}
    order: list[tuple[str, int]] = []
    for k, (p, leaf) in enumerate(zip(fg.paths, fg.leaves)):
        if isinstance(leaf, Variable):
            pos = var_pos.get(id(leaf))
            if pos is not None:
                order.append(("in", ref_leaf[id(refs[pos])]))
                continue
        elif p in by_path and not isinstance(leaf_objs[by_path[p]], Variable):
            order.append(("in", by_path[p]))
            continue
        order.append(("extra", k))
    return order


def _inner_var(lift: Lift, leaf_pos: int, built: dict) -> tp.Any:
    target = lift.leaf_objs[leaf_pos]
    for i, ref in enumerate(lift.refs):
        if ref is target:
            return built.get(i)
    return None


def _ys_refs(d: tp.Any) -> list:
    out: list = []
    stack = [d]
    while stack:
        x = stack.pop()
        if type(x) is NodeRef:
            out.append(x)
        attrs = getattr(x, "attributes", None)
        if attrs and type(x) is not VariableDef:
            stack.extend(s for _, s in attrs)
    return out


def _check_refs(carry: tp.Any, built: dict, msg: str) -> None:
    """The carry a step returns may only hold the step's copies of the input objects."""
    copies = {id(o) for o in built.values()}
    for ref in eng.flatten([carry]).refs:
        if id(ref) not in copies:
            raise NNXStructureChangeError(
                "", f"nnx.scan: {msg}; the returned carry holds a new {type(ref).__name__} "
                "where its input had another object",
                "Update the carried objects in place and return the same objects.")


def _extra_axes(paths: list, leaves: list, ys: tp.Any, ys_axes: tp.Any, in_axes: tp.Any
                ) -> list:
    """Stacking axis of each leaf that is not one of the inputs' leaves: leaves created in an
    input (e.g. ``sow``: per its StateAxes, default 0) and the outputs (per ``out_axes``)."""
    entries = in_axes if isinstance(in_axes, (tuple, list)) else None
    out_axes_list = _stack_axes(ys, ys_axes) if ys_axes is not None else []
    res: list = []
    k = 0
    for p, leaf in zip(paths, leaves):
        if p and p[0] == "out":
            ax = out_axes_list[k] if k < len(out_axes_list) else 0
            k += 1
        else:
            spec = entries[p[0]] if entries is not None else in_axes
            try:
                ax = _leaf_axis(spec, p[1:], leaf)
            except (NNXArgumentError, NNXTransformError):
                ax = 0
            if not isinstance(ax, int):
                ax = 0
        res.append(ax)
    return res


def _add_axes(roots: list, order: list, kinds: list, axes: list, extra_axes: list,
              transform_metadata: tp.Mapping) -> None:
    """Puts the scanned axis back into the metadata of the scanned Variables and of those
    created inside (``spmd.add_axis``, which also calls each Variable's hook)."""
    k = 0
    for (kind, j), leaf in zip(order, eng.flatten(roots).leaves):
        if kind == "extra":
            ax = extra_axes[k]
            k += 1
        elif kinds[j] == "scan":
            ax = axes[j]
        else:
            continue
        if isinstance(leaf, Variable):
            spmd.add_axis(leaf, ax, transform_metadata)
