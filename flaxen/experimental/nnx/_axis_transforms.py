"""``nnx.vmap`` / ``nnx.scan`` and the module-wrapping ``Vmap`` / ``Scan`` / ``Jit`` / ``Remat``.

State of graph-node arguments is mapped by ``state_axes`` (a mapping from filter to axis;
``None`` broadcasts), RNG streams matching ``split_rngs`` get one key per mapped slice (the
outer stream advances by one), and other RNG streams are broadcast. Variables created inside
(e.g. a module built inside ``vmap``) come out stacked along their ``state_axes`` axis, with
``transform_metadata[PARTITION_NAME]`` inserted into their ``sharding`` metadata.

>>> import jax.numpy as jnp
>>> from flaxen.experimental import nnx  # the Flax 0.8.3 face these functions serve
>>> make = nnx.vmap(lambda rngs: nnx.Linear(2, 3, rngs=rngs), axis_size=4)
>>> stacked = make(nnx.Rngs(0))
>>> stacked.kernel.value.shape
(4, 2, 3)
"""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

from flaxen import traceback_util
from flaxen.errors import NNXArgumentError, NNXTransformError
from flaxen.experimental.nnx import filterlib as _filters
from flaxen.experimental.nnx.transforms import jit, remat
from flaxen.nnx import _lift, filterlib
from flaxen.nnx._graphdef import var_def_paths
from flaxen.nnx._variable_pytree import own_metadata as _own_metadata
from flaxen.nnx.module import Module
from flaxen.nnx.rnglib import RngKey, RngState
from flaxen.nnx.transforms._mapped import DefView, _from_axis0
from flaxen.nnx.variablelib import Variable

PARTITION_NAME = "partition_name"
_DEFAULT_STATE_AXES: tp.Mapping[filterlib.Filter, int | None] = {...: 0}


def _state_axis(path: tuple, var: tp.Any, axes: tp.Sequence[tuple[tp.Callable, tp.Any]]
                ) -> tp.Any:
    for pred, axis in axes:
        if pred(path, var):
            return axis
    return None  # state no filter names is broadcast


def _axes_items(state_axes: tp.Mapping) -> list[tuple[tp.Callable, tp.Any]]:
    return [(_filters.to_predicate(f), a) for f, a in dict(state_axes).items()]


def _plan_vars(lift: _lift.Lift, state_axes: tp.Mapping, split_rngs: tp.Any) -> list[tuple]:
    """For each State leaf: ('split', None) for split RNG state, ('bcast', None) or
    ('axis', a)."""
    flat = lift.flat
    if flat is None:
        return []
    items = _axes_items(state_axes)
    split_pred = _filters.to_predicate(split_rngs)
    split_streams = set()
    # A stream whose key is already a stack of keys (an Rngs created inside an earlier vmap or
    # Scan, e.g. in a module's __init__) holds one key per slice: it is mapped along axis 0,
    # whatever split_rngs says, and each slice's count advances on its own.
    stacked_streams = set()
    for p, v in zip(flat.paths, flat.variables):
        if isinstance(v, RngKey):
            if getattr(v.raw_value, "ndim", 0) > 0:
                stacked_streams.add(p[:-1])
            elif split_pred(p, v):
                split_streams.add(p[:-1])
    plan = []
    for p, v in zip(flat.paths, flat.variables):
        if isinstance(v, RngState):
            if p[:-1] in stacked_streams:
                stacked = isinstance(v, RngKey) or getattr(v.raw_value, "ndim", 0) > 0
                plan.append(("axis", 0) if stacked else ("bcast", None))
            elif p[:-1] in split_streams and isinstance(v, RngKey):
                plan.append(("split", None))  # its count is broadcast and written back
            else:
                plan.append(("bcast", None))
        else:
            a = _state_axis(p, v, items)
            plan.append(("bcast", None) if a is None else ("axis", a))
    return plan


def _leaf_axes(args: tuple, kwargs: dict, in_axes: tp.Any, in_axes_kwargs: tp.Any,
               lift: _lift.Lift) -> list:
    axes: list = []
    for i, a in enumerate(args):
        ax = in_axes[i] if isinstance(in_axes, (tuple, list)) else in_axes
        n = len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node))
        axes.extend([ax] * n)
    for k in sorted(kwargs):
        n = len(jax.tree_util.tree_leaves(kwargs[k], is_leaf=_lift.is_node))
        axes.extend([in_axes_kwargs] * n)
    for p in lift.node_pos:
        axes[p] = None
    return axes


def _split_keys(lift: _lift.Lift, plan: list, n: int) -> dict[int, tp.Any]:
    """Per-slice keys of the split RNG streams: ``split(fold_in(key, count), n)``. The
    outer key is kept; the count is broadcast, so the draws made inside advance it."""
    out: dict[int, tp.Any] = {}
    flat = lift.flat
    if flat is None:
        return out
    by_stream: dict[tuple, dict[str, int]] = {}
    ki: tp.Any  # every split stream has its RngKey
    for i, ((kind, _), p) in enumerate(zip(plan, flat.paths)):
        if kind == "split":
            by_stream.setdefault(p[:-1], {})[type(flat.variables[i]).__name__] = i
    for idx in by_stream.values():
        ki, ci = idx.get("RngKey"), idx.get("RngCount")
        key = flat.variables[ki].raw_value
        count = flat.variables[ci].raw_value if ci is not None else 0
        out[ki] = jax.random.split(jax.random.fold_in(key, count), n)
    return out


def _partition_hook(plan: list, transform_metadata: tp.Mapping,
                    then: tp.Callable | None = None) -> tp.Callable:
    """A Lift hook that removes the partition name from mapped Variables' ``sharding`` inside
    the transform (each slice sees its own layout); :func:`_restore_partitions` puts it back."""

    def hook(args: tuple, kwargs: dict, inner: tp.Any) -> tuple[tuple, dict]:
        if PARTITION_NAME in transform_metadata:
            name = transform_metadata[PARTITION_NAME]
            for (kind, ax), var in zip(plan, inner.leaf_objs()):
                if kind == "axis" and var is not None:
                    key = _names_key(var._var_metadata)
                    sharding = var._var_metadata.get(key)
                    if sharding and len(sharding) > ax and sharding[ax] == name:
                        _own_metadata(var)[key] = (*sharding[:ax], *sharding[ax + 1:])
        return then(args, kwargs) if then is not None else (args, kwargs)

    return hook


def _restore_partitions(lift: _lift.Lift, plan: list, transform_metadata: tp.Mapping) -> None:
    if PARTITION_NAME not in transform_metadata or lift.flat is None:
        return
    name = transform_metadata[PARTITION_NAME]
    for (kind, ax), var in zip(plan, lift.flat.leaves):
        if kind == "axis" and isinstance(var, Variable):
            sharding = var._var_metadata.get(_names_key(var._var_metadata))
            if sharding is not None and not (len(sharding) > ax and sharding[ax] == name):
                _insert_partition(var, ax, transform_metadata)


def _insert_partition(var: tp.Any, axis: int, transform_metadata: tp.Mapping) -> None:
    meta = var._var_metadata
    key = _names_key(meta)
    if key in meta and meta[key] is not None and axis is not None:
        names = list(meta[key])
        names.insert(axis, transform_metadata.get(PARTITION_NAME))
        _own_metadata(var)[key] = tuple(names)


def _names_key(meta: tp.Mapping) -> str:
    # Variables built by the shared constructor store `sharding=` as `out_sharding`
    return "sharding" if "sharding" in meta else "out_sharding"


def vmap(
    f: tp.Callable[..., tp.Any],
    *,
    in_axes: tp.Any = 0,
    out_axes: tp.Any = 0,
    axis_name: tp.Any = None,
    axis_size: int | None = None,
    spmd_axis_name: tp.Any = None,
    in_axes_kwargs: tp.Any = 0,
    state_axes: tp.Mapping[filterlib.Filter, int | None] = _DEFAULT_STATE_AXES,
    split_rngs: filterlib.Filter = ...,
    transform_metadata: tp.Mapping[str, tp.Any] = {},  # noqa: B006 - read only
) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.vmap`` over graph nodes (see the module docstring)."""

    @traceback_util.api_boundary
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        lift = _lift.Lift(args, kwargs)
        plan = _plan_vars(lift, state_axes, split_rngs)
        leaf_axes = _leaf_axes(args, kwargs, in_axes, in_axes_kwargs, lift)
        values = lift.values
        n = _axis_size(axis_size, lift, leaf_axes, plan, values, "vmap", "axis_size")
        split_vals = _split_keys(lift, plan, n)
        var_axes = []
        in_values = []
        for i, ((kind, a), v) in enumerate(zip(plan, values)):
            if kind == "split":
                in_values.append(split_vals.get(i, v))
                var_axes.append(0 if i in split_vals else None)
            else:
                in_values.append(v)
                var_axes.append(a if kind == "axis" else None)
        vm = jax.vmap(lift.pure(f, hook=_partition_hook(plan, transform_metadata)),
                      in_axes=(var_axes, leaf_axes), out_axes=(0, out_axes),
                      axis_name=axis_name, axis_size=n, spmd_axis_name=spmd_axis_name)
        new_values, out_leaves = vm(in_values, lift.leaves)
        fixed, new_axes = _settle_outputs(lift, plan, values, new_values, state_axes)
        result = lift.finish(lift.out, fixed, out_leaves)  # type: ignore[arg-type]  # set
        _mark_new(lift, new_axes, transform_metadata)
        _restore_partitions(lift, plan, transform_metadata)
        return result

    return wrapper


def _axis_size(given: int | None, lift: _lift.Lift, leaf_axes: list, plan: list,
               values: list, what: str, arg: str) -> int:
    if given is not None:
        return given
    for leaf, ax in zip(lift.leaves, leaf_axes):
        if ax is not None and leaf is not None:
            return np.shape(leaf)[ax]
    for (kind, a), v in zip(plan, values):
        if kind == "axis":
            return np.shape(v)[a]
    raise NNXTransformError(
        "", f"nnx.{what} cannot tell the mapped axis size: no argument is mapped",
        f"Pass {arg}=... .")


def _settle_outputs(lift: _lift.Lift, plan: list, values: list, new_values: list,
                    state_axes: tp.Mapping) -> tuple[list, list]:
    """Outer values of the leaves after a mapped call (axis 0 moved back to each leaf's
    axis; split RNG streams keep their key and advance by one) and, per leaf, the axis of
    a Variable created inside (None for the others)."""
    out: tp.Any = lift.out  # set by the call (an OutStatic)
    pairs = dict(out.idx_pairs)
    var_pos = {d.index: pos for pos, (_, d) in enumerate(var_def_paths(lift.static.defs))}
    items = _axes_items(state_axes)
    fixed = []
    new_axes: list = []
    for x, (path, d) in zip(new_values, out.var_paths):
        outer = pairs.get(d.index) if d.index >= 0 else None
        if outer is not None and outer in var_pos:
            pos = var_pos[outer]
            kind, a = plan[pos]
            if kind == "split":  # the outer stream keeps its key
                fixed.append(values[pos])
                new_axes.append(None)
                continue
            fixed.append(_from_axis0(x, a if kind == "axis" else None))
            new_axes.append(None)
            continue
        ax = 0 if issubclass(d.type, RngState) else _state_axis(path, DefView(d), items)
        fixed.append(_from_axis0(x, ax))
        new_axes.append(ax)
    return fixed, new_axes


def _mark_new(lift: _lift.Lift, new_axes: list, transform_metadata: tp.Mapping) -> None:
    for (_, d), ax in zip(lift.out.var_paths, new_axes):  # type: ignore[union-attr]
        if ax is not None and d.index >= 0:
            var = lift.built.get(d.index)
            if var is not None:
                _insert_partition(var, ax, transform_metadata)


def _move_out_axes(ys: tp.Any, out_axes: tp.Any) -> tp.Any:
    """Moves the stacked axis 0 of the scan outputs to ``out_axes`` (a prefix of ``ys``)."""
    if out_axes == 0 or out_axes is None or ys is None:
        return ys

    def move(ax: tp.Any, y: tp.Any) -> tp.Any:
        if ax in (0, None):
            return y
        return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, ax), y)

    return jax.tree_util.tree_map(move, out_axes, ys)


def _to_axis0(x: tp.Any, axis: int) -> tp.Any:
    if axis == 0:
        return x
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, axis, 0), x)


def scan(
    f: tp.Callable[..., tp.Any],
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
    _split_transpose: bool = False,
    in_axes: tp.Any = 0,
    in_axes_kwargs: tp.Any = 0,
    out_axes: tp.Any = 0,
    carry_argnum: int = 0,
    state_axes: tp.Mapping[filterlib.Filter, int | None] = _DEFAULT_STATE_AXES,
    split_rngs: filterlib.Filter = ...,
    transform_metadata: tp.Mapping[str, tp.Any] = {},  # noqa: B006 - read only
    scan_output: bool = True,
) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.lax.scan``: ``f(carry, *xs) -> (carry, y)`` (just ``carry`` when
    ``scan_output=False``), the carry at position ``carry_argnum``. Graph-node state mapped by
    ``state_axes`` is sliced per step and restacked; broadcast (``None``) state is carried,
    so updates to it are visible after the scan."""

    @traceback_util.api_boundary
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        args = list(args)  # type: ignore[assignment]  # a mutable copy
        if carry_argnum >= len(args):
            raise NNXArgumentError(
                "", f"nnx.scan: Expected at least {carry_argnum + 1} positional arguments (the "
                f"carry is argument {carry_argnum}), got {len(args)}",
                "Pass the carry (and the scanned inputs) positionally.")
        carry = args[carry_argnum]
        if any(_lift.is_node(leaf) for leaf in
               jax.tree_util.tree_leaves(carry, is_leaf=_lift.is_node)):
            raise NNXTransformError(
                f"argument {carry_argnum}", "nnx.scan: the carry holds a graph node",
                "Pass modules as other arguments; their state is scanned or carried per "
                "state_axes.")
        args[carry_argnum] = None  # type: ignore[index]
        lift = _lift.Lift(tuple(args), kwargs)
        plan = _plan_vars(lift, state_axes, split_rngs)
        axes_list = list(in_axes) if isinstance(in_axes, (tuple, list)) else in_axes
        if isinstance(axes_list, list) and len(axes_list) < len(args):
            axes_list = axes_list + [0] * (len(args) - len(axes_list))
        leaf_axes = _leaf_axes(tuple(args), kwargs, axes_list, in_axes_kwargs, lift)
        values = lift.values
        n = _axis_size(length, lift, leaf_axes, plan, values, "scan", "length")
        split_vals = _split_keys(lift, plan, n)
        scanned = [k == "axis" or (k == "split" and i in split_vals)
                   for i, (k, _) in enumerate(plan)]
        scanned_idx = [i for i, sc in enumerate(scanned) if sc]
        carried_idx = [i for i, sc in enumerate(scanned) if not sc]
        xs_vars = [split_vals[i] if i in split_vals else _to_axis0(values[i], plan[i][1])
                   for i in scanned_idx]
        xs_leaf_idx = [i for i, ax in enumerate(leaf_axes)
                       if ax is not None and lift.leaves[i] is not None]
        xs_leaves = [_to_axis0(lift.leaves[i], leaf_axes[i]) for i in xs_leaf_idx]
        n_in = len(values)
        step_carry: list = [None]

        def put_carry(a: tuple, k: dict) -> tuple[tuple, dict]:
            new_a = list(a)
            new_a[carry_argnum] = step_carry[0]
            return tuple(new_a), k

        def split_out(*a: tp.Any, **k: tp.Any) -> tp.Any:
            out = f(*a, **k)
            new_carry, y = out if scan_output else (out, None)
            step_carry[0] = new_carry
            return y

        pure = lift.pure(split_out, hook=_partition_hook(plan, transform_metadata, put_carry))
        in_layout = [(p, d.type) for p, d in var_def_paths(lift.static.defs)]

        def body(c: tuple, x: tuple) -> tuple:
            user_carry, carried = c
            svals, sleaves = x
            vals = list(values)
            for i, v in zip(carried_idx, carried):
                vals[i] = v
            for i, v in zip(scanned_idx, svals):
                vals[i] = v
            leaves = list(lift.leaves)
            for i, v in zip(xs_leaf_idx, sleaves):
                leaves[i] = v
            step_carry[0] = user_carry
            new_vals, out_leaves = pure(vals, leaves)
            out_s: tp.Any = lift.out  # set by pure (an OutStatic)
            layout = [(p, d.type) for p, d in out_s.var_paths[: out_s.n_input_leaves]]
            if layout != in_layout:
                raise NNXTransformError(
                    "", "nnx.scan: the scanned function changed the structure of its module "
                    "arguments (added or removed attributes)",
                    "Create all state before the scan, or build stacked modules with "
                    "nnx.Scan / nnx.vmap.")
            return ((step_carry[0], [new_vals[i] for i in carried_idx]),
                    ([new_vals[i] for i in scanned_idx], new_vals[n_in:], out_leaves))

        init = (carry, [values[i] for i in carried_idx])
        scanned_out: tp.Any
        extra_out: tp.Any
        out_leaves: tp.Any
        (carry_out, carried_out), (scanned_out, extra_out, out_leaves) = jax.lax.scan(
            body, init, (xs_vars, xs_leaves), length=n, reverse=reverse, unroll=unroll,
            _split_transpose=_split_transpose,
        )
        final = list(values)
        for i, v in zip(carried_idx, carried_out):
            final[i] = v
        for i, v in zip(scanned_idx, scanned_out):
            if plan[i][0] == "split":  # the outer stream keeps its key
                continue
            final[i] = _from_axis0(v, plan[i][1])
        items = _axes_items(state_axes)
        new_axes: list = [None] * n_in
        for v, (path, d) in zip(extra_out, lift.out.var_paths[n_in:]):  # type: ignore[union-attr]
            ax = 0 if issubclass(d.type, RngState) else _state_axis(path, DefView(d), items)
            final.append(_from_axis0(v, ax))
            new_axes.append(ax)
        ys = lift.finish(lift.out, final, out_leaves)  # type: ignore[arg-type]  # set by pure
        _mark_new(lift, new_axes, transform_metadata)
        _restore_partitions(lift, plan, transform_metadata)
        ys = _move_out_axes(ys, out_axes)
        return (carry_out, ys) if scan_output else carry_out

    return wrapper


# -- module wrappers ---------------------------------------------------------------------------

class _Lifted(Module):
    """Base of the module wrappers: builds the inner module, transforms its ``__call__``.

    ``Wrapper(Block, **transform_options)`` without ``module_init_args`` /
    ``module_init_kwargs`` returns a constructor: calling it with ``Block``'s own arguments
    builds the wrapper (``nnx.Scan(Block, length=4)(rngs=rngs)``), as the spec's examples do.
    """

    _inner_name = "module"

    def __new__(cls, module_constructor: tp.Any = None, *args: tp.Any, **kwargs: tp.Any
                ) -> tp.Any:
        if module_constructor is not None and kwargs.get("module_init_args") is None \
                and kwargs.get("module_init_kwargs") is None:
            return cls.constructor(module_constructor, *args, **kwargs)
        return super().__new__(cls)

    @classmethod
    def constructor(cls, module_constructor: tp.Callable[..., Module], *transform_args: tp.Any,
                    **transform_kwargs: tp.Any) -> tp.Callable[..., _Lifted]:
        """A function building ``cls(module_constructor, ...)`` from the module's arguments."""
        transform_kwargs.pop("module_init_args", None)
        transform_kwargs.pop("module_init_kwargs", None)

        @functools.wraps(module_constructor)
        def create(*args: tp.Any, **kwargs: tp.Any) -> _Lifted:
            return cls(module_constructor, *transform_args, **transform_kwargs,
                       module_init_args=args, module_init_kwargs=kwargs)

        return create

    def __getattr__(self, name: str) -> tp.Any:
        if name.startswith("__"):
            raise AttributeError(name)
        inner = self.__dict__.get(type(self)._inner_name)
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


class Vmap(_Lifted):
    """A module whose instances are vmapped: ``Vmap(Linear, axis_size=4, module_init_kwargs=
    dict(in_features=2, out_features=3, rngs=rngs))`` holds 4 stacked Linears."""

    _inner_name = "vmap_module"

    def __init__(self, module_constructor: tp.Callable[..., Module], *, in_axes: tp.Any = 0,
                 out_axes: tp.Any = 0, axis_name: tp.Any = None, axis_size: int | None = None,
                 spmd_axis_name: tp.Any = None, in_axes_kwargs: tp.Any = 0,
                 state_axes: tp.Mapping = _DEFAULT_STATE_AXES, split_rngs: tp.Any = ...,
                 transform_metadata: tp.Mapping = {},  # noqa: B006 - read only
                 module_init_args: tuple | None = None,
                 module_init_kwargs: tp.Mapping | None = None,
                 ) -> None:
        self.module_constructor = module_constructor
        self.in_axes = in_axes
        self.out_axes = out_axes
        self.axis_name = axis_name
        self.axis_size = axis_size
        self.spmd_axis_name = spmd_axis_name
        self.in_axes_kwargs = in_axes_kwargs
        self.state_axes = dict(state_axes)
        self.split_rngs = split_rngs
        self.transform_metadata = dict(transform_metadata)
        self.vmap_module = vmap(
            module_constructor, in_axes=None, in_axes_kwargs=None, axis_size=axis_size,
            state_axes=state_axes,
            split_rngs=split_rngs, transform_metadata=transform_metadata,
        )(*(module_init_args or ()), **dict(module_init_kwargs or {}))

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        in_axes = (None, *self.in_axes) if isinstance(self.in_axes, (tuple, list)) \
            else self.in_axes
        return vmap(
            lambda module, *a, **k: module(*a, **k), in_axes=in_axes, out_axes=self.out_axes,
            axis_name=self.axis_name, axis_size=self.axis_size,
            spmd_axis_name=self.spmd_axis_name, in_axes_kwargs=self.in_axes_kwargs,
            state_axes=self.state_axes, split_rngs=self.split_rngs,
            transform_metadata=self.transform_metadata,
        )(self.vmap_module, *args, **kwargs)


class Scan(_Lifted):
    """A stack of ``length`` modules applied in sequence with ``lax.scan``; the carry is the
    call's argument number ``carry_argnum - 1`` (1 counts the module itself)."""

    _inner_name = "scan_module"

    def __init__(self, module_constructor: tp.Callable[..., Module], *,
                 length: int | None = None, reverse: bool = False, unroll: int = 1,
                 _split_transpose: bool = False, in_axes: tp.Any = 0, in_axes_kwargs: tp.Any = 0,
                 out_axes: tp.Any = 0, carry_argnum: int = 1,
                 state_axes: tp.Mapping = _DEFAULT_STATE_AXES, split_rngs: tp.Any = ...,
                 transform_metadata: tp.Mapping = {},  # noqa: B006 - read only
                 scan_output: bool = True,
                 module_init_args: tuple | None = None,
                 module_init_kwargs: tp.Mapping | None = None,
                 ) -> None:
        if length is None:
            raise NNXArgumentError("", "nnx.Scan needs length= (the number of stacked "
                                   "modules)", "Pass e.g. nnx.Scan(Block, length=4).")
        self.module_constructor = module_constructor
        self.length = length
        self.reverse = reverse
        self.unroll = unroll
        self._split_transpose = _split_transpose
        self.in_axes = in_axes
        self.in_axes_kwargs = in_axes_kwargs
        self.out_axes = out_axes
        self.carry_argnum = carry_argnum
        self.state_axes = dict(state_axes)
        self.split_rngs = split_rngs
        self.transform_metadata = dict(transform_metadata)
        self.scan_output = scan_output
        self.scan_module = vmap(
            module_constructor, in_axes=None, in_axes_kwargs=None, axis_size=length,
            state_axes=state_axes,
            split_rngs=split_rngs, transform_metadata=transform_metadata,
        )(*(module_init_args or ()), **dict(module_init_kwargs or {}))

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        n_args = len(args) + 1
        # a tuple of in_axes counts the module itself as position 0, like carry_argnum
        in_axes = tuple(self.in_axes) if isinstance(self.in_axes, (tuple, list)) else tuple(
            None if i in (0, self.carry_argnum) else self.in_axes for i in range(n_args))
        return scan(
            lambda module, *a, **k: module(*a, **k), length=self.length, reverse=self.reverse,
            unroll=self.unroll, _split_transpose=self._split_transpose, in_axes=in_axes,
            in_axes_kwargs=self.in_axes_kwargs, out_axes=self.out_axes,
            carry_argnum=self.carry_argnum, state_axes=self.state_axes,
            split_rngs=self.split_rngs, transform_metadata=self.transform_metadata,
            scan_output=self.scan_output,
        )(self.scan_module, *args, **kwargs)


class Remat(_Lifted):
    """A module whose ``__call__`` is rematerialized (``jax.checkpoint``) in the backward pass."""

    _inner_name = "remat_module"

    def __init__(self, module_constructor: tp.Callable[..., Module], prevent_cse: bool = True,
                 static_argnums: tp.Any = (), policy: tp.Any = None, *,
                 module_init_args: tuple | None = None,
                 module_init_kwargs: tp.Mapping | None = None,
                 ) -> None:
        self.module_constructor = module_constructor
        self.prevent_cse = prevent_cse
        self.static_argnums = static_argnums
        self.policy = policy
        self.remat_module = module_constructor(*(module_init_args or ()),
                                               **dict(module_init_kwargs or {}))

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        nums = (self.static_argnums,) if isinstance(self.static_argnums, int) else tuple(
            self.static_argnums)
        return remat(lambda module, *a, **k: module(*a, **k), prevent_cse=self.prevent_cse,
                     static_argnums=tuple(i + 1 for i in nums), policy=self.policy,
                     )(self.remat_module, *args, **kwargs)


class Jit(_Lifted):
    """A module whose ``__call__`` runs under :func:`nnx.jit`."""

    _inner_name = "jit_module"

    def __init__(self, module_constructor: tp.Callable[..., Module], *,
                 module_init_args: tuple | None = None,
                 module_init_kwargs: tp.Mapping | None = None,
                 **jit_kwargs: tp.Any) -> None:
        self.module_constructor = module_constructor
        self.jit_module = module_constructor(*(module_init_args or ()),
                                             **dict(module_init_kwargs or {}))
        object.__setattr__(self, "_jit_fn", None)
        self.__dict__.pop("_jit_fn", None)
        self._jit_kwargs = tuple(sorted(jit_kwargs.items()))

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        fn = _JIT_CACHE.get(self._jit_kwargs)
        if fn is None:
            fn = _JIT_CACHE[self._jit_kwargs] = jit(_call_module, **dict(self._jit_kwargs))
        return fn(self.jit_module, *args, **kwargs)


def _call_module(module: Module, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
    return module(*args, **kwargs)  # type: ignore[operator]  # a Module defining __call__


_JIT_CACHE: dict[tuple, tp.Callable] = {}
