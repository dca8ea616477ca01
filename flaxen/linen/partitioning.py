"""The legacy ``flax.linen.partitioning`` API: logical axis names kept in ``*_axes`` collections.

Before ``nn.Partitioned`` boxes, a parameter's logical axis names were recorded beside it:
``param_with_axes('kernel', init, shape, axes=('embed', 'mlp'))`` stores the array in
``params`` and ``AxisMetadata(names=('embed', 'mlp'))`` at ``params_axes/kernel_axes``.
:func:`get_axis_names` turns that collection into ``PartitionSpec`` s of logical names;
:func:`scan_with_axes` / :func:`vmap_with_axes` add the mapped axis to them. The rule
helpers are the ones of :mod:`flaxen.linen.spmd` under their old names.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> from flaxen.linen import partitioning as nn_partitioning
>>> class Foo(nn.Module):
...     @nn.compact
...     def __call__(self, x):
...         w = nn_partitioning.param_with_axes(
...             'w', nn.initializers.ones, (x.shape[-1], 2), axes=('embed', 'mlp'))
...         return x @ w
>>> variables = Foo().init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
>>> tuple(nn_partitioning.get_axis_names(variables['params_axes'])['w'])
('embed', 'mlp')
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.sharding import PartitionSpec

from flaxen import struct
from flaxen.core import lift
from flaxen.core.frozen_dict import FrozenDict, freeze
from flaxen.core.meta import PARTITION_NAME
from flaxen.core.scope import CollectionFilter, PRNGSequenceFilter, Variable
from flaxen.linen import transforms
from flaxen.linen._state import context
from flaxen.linen._transform_wrap import lift_transform
from flaxen.linen.spmd import (
    LogicalPartitionSpec,
    LogicalPartitionSpecPytree,
    LogicalRules,
    RulesFallback,
    _with_sharding_constraint,  # noqa: F401 - Flax exposes it here (tests replace it)
    get_logical_axis_rules,
    logical_axis_rules,
    logical_to_mesh,
    logical_to_mesh_axes,
    set_logical_axis_rules,
    with_logical_constraint,
)

# t5x/maxtext spell the scan axis markers ``nn_partitioning.ScanIn(axis)``.
from flaxen.typing import In as ScanIn
from flaxen.typing import Out as ScanOut

__all__ = [
    "AxisMetadata", "PartitionedVariable", "RulesFallback", "axis_rules", "get_axis_names",
    "get_axis_rules", "logical_to_mesh", "logical_to_mesh_axes", "param_with_axes", "remat",
    "scan_with_axes", "set_axis_rules", "variable_with_axes", "vmap_with_axes",
    "with_sharding_constraint", "LogicalPartitionSpec", "LogicalPartitionSpecPytree",
    "LogicalRules", "core_remat_static", "ScanIn", "ScanOut",
]

# The rule helpers under their legacy names.
axis_rules = logical_axis_rules
set_axis_rules = set_logical_axis_rules
get_axis_rules = get_logical_axis_rules
with_sharding_constraint = with_logical_constraint


@struct.dataclass
class AxisMetadata:
    """The logical axis names of one variable, stored in a ``<collection>_axes`` collection.

    A pytree without leaves: transforms and ``tree_map`` pass it through unchanged.
    """

    names: Any = struct.field(pytree_node=False)


def _current_module(module: Any, what: str) -> Any:
    if module is None:
        module = context.module_stack[-1]
    if module is None:
        raise ValueError(
            f"{what} must be called inside a Module's setup or @compact method (or be "
            "given module=...): no Module is running."
        )
    return module


def _is_names(x: Any) -> bool:
    return isinstance(x, (tuple, PartitionSpec)) and all(
        isinstance(e, str) or e is None for e in x)


def _check_axes(name: str, axes: Any, value: Any) -> None:
    """One name per dimension (an empty tuple names none); pytree axes leaf by leaf."""
    if not _is_names(axes):
        for path, names in jax.tree_util.tree_flatten_with_path(axes, is_leaf=_is_names)[0]:
            try:
                leaf = functools.reduce(lambda v, k: v[getattr(k, "key", getattr(
                    k, "idx", None))], path, value)
            except (KeyError, IndexError, TypeError):
                raise ValueError(
                    f"Variable {name!r}: the axes pytree has an entry at "
                    f"{jax.tree_util.keystr(path)} that the value does not; give axes with "
                    "the same structure as the value."
                ) from None
            _check_axes(name + jax.tree_util.keystr(path), names, leaf)
        return
    ndim = getattr(value, "ndim", None)
    if axes and ndim is not None and len(axes) != ndim:
        raise ValueError(
            f"Variable {name!r} has {ndim} dimensions (shape {value.shape}) but "
            f"{len(axes)} axis names {tuple(axes)} were given; give one name per dimension."
        )


def _record_axes(module: Any, collection: str, name: str, axes: tuple) -> None:
    def reduce_fn(old: Any, new: AxisMetadata) -> AxisMetadata:
        if isinstance(old, AxisMetadata) and old != new:
            raise ValueError(
                f"Inconsistent axis names for {collection}/{name}: recorded {old.names}, now "
                f"{new.names}. A variable must keep the same logical axes on every call."
            )
        return new

    names = tuple(axes) if _is_names(axes) else axes
    module.sow(f"{collection}_axes", f"{name}_axes", AxisMetadata(names), reduce_fn=reduce_fn)


def param_with_axes(name: str, init_fn: Callable[..., Any], *init_args: Any,
                    axes: tuple[str, ...] | None = None, module: Any = None,
                    **init_kwargs: Any) -> Any:
    """``module.param(...)`` that also records ``axes`` at ``params_axes/<name>_axes``.

    The value is constrained to the logical ``axes`` (a no-op outside a mesh). ``module``
    defaults to the Module whose method is running.
    """
    module = _current_module(module, "param_with_axes")
    value = module.param(name, init_fn, *init_args, **init_kwargs)
    if axes is not None:
        _check_axes(f"params/{name}", axes, value)
        value = with_sharding_constraint(value, tuple(axes) if _is_names(axes) else axes)
        _record_axes(module, "params", name, axes)
    return value


class PartitionedVariable(Variable):
    """A Variable whose reads and writes are constrained to its logical ``axes``."""

    __slots__ = ("axes", "fallback")

    def __init__(self, scope: Any, collection: str, name: str,
                 axes: tuple[str, ...] | None = None,
                 fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED) -> None:
        super().__init__(scope, collection, name)
        self.axes = axes
        self.fallback = fallback

    @property
    def value(self) -> Any:
        value = Variable.value.fget(self)  # type: ignore[attr-defined]
        if self.axes is None:
            return value
        return with_sharding_constraint(value, self.axes, fallback=self.fallback)

    @value.setter
    def value(self, value: Any) -> None:
        if self.axes is not None:
            value = with_sharding_constraint(value, self.axes, fallback=self.fallback)
        Variable.value.fset(self, value)  # type: ignore[attr-defined]


def variable_with_axes(collection: str, name: str, init_fn: Callable[..., Any] | None = None,
                       *init_args: Any, axes: tuple[str, ...] | None = None,
                       module: Any = None,
                       fallback: RulesFallback = RulesFallback.AXIS_IS_UNSHARDED,
                       **init_kwargs: Any) -> PartitionedVariable:
    """``module.variable(...)`` recording ``axes`` at ``<collection>_axes/<name>_axes``.

    Returns a :class:`PartitionedVariable` whose value is constrained to ``axes``.
    """
    module = _current_module(module, "variable_with_axes")
    var = module.variable(collection, name, init_fn, *init_args, **init_kwargs)
    if axes is not None:
        _check_axes(f"{collection}/{name}", axes, var.value)
        _record_axes(module, collection, name, axes)
    return PartitionedVariable(var.scope, collection, name, axes, fallback)


def get_axis_names(axes_metadata: Mapping[str, Any]) -> FrozenDict:
    """``{name: PartitionSpec(*logical_names)}`` from a ``*_axes`` collection.

    The ``_axes`` suffix of every key is dropped, so the result mirrors the variables'
    own tree and can be fed to :func:`logical_to_mesh`.
    """

    def convert(tree: Any) -> Any:
        if isinstance(tree, AxisMetadata):
            return jax.tree_util.tree_map(lambda n: PartitionSpec(*n), tree.names,
                                          is_leaf=_is_names)
        if isinstance(tree, Mapping):
            return {(k[:-5] if isinstance(k, str) and k.endswith("_axes") else k): convert(v)
                    for k, v in tree.items()}
        return tree

    return freeze(convert(axes_metadata))


# --- transforms that keep the *_axes metadata in step ------------------------------------


def _insert_axis(tree: Any, index: int, axis_name: str) -> Any:
    def f(x: Any) -> Any:
        if not isinstance(x, AxisMetadata):
            return x
        names = list(x.names)
        names.insert(index, axis_name)
        return AxisMetadata(tuple(names))

    return jax.tree_util.tree_map(f, tree, is_leaf=lambda x: isinstance(x, AxisMetadata))


def _remove_axis(tree: Any, index: int) -> Any:
    def f(x: Any) -> Any:
        if not isinstance(x, AxisMetadata) or len(x.names) <= index:
            return x
        return AxisMetadata(x.names[:index] + x.names[index + 1:])

    return jax.tree_util.tree_map(f, tree, is_leaf=lambda x: isinstance(x, AxisMetadata))


def _with_axes_collections(variable_axes: Mapping, cols: Mapping[str, Any]) -> dict:
    # The *_axes collections hold leafless boxes: mapping them along the same axis as their
    # collection lets them be written inside the transform without moving any data.
    out = dict(variable_axes)
    for col, axis in cols.items():
        out.setdefault(f"{col}_axes", axis)
    return out


def scan_with_axes(
    target: Any,
    variable_axes: Mapping[CollectionFilter, Any] = {},  # noqa: B006 - Flax's default
    variable_broadcast: CollectionFilter = False,
    variable_carry: CollectionFilter = False,
    split_rngs: Mapping[PRNGSequenceFilter, bool] = {},  # noqa: B006
    in_axes: Any = 0,
    out_axes: Any = 0,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
    axis_name: str = "layers",
    axes_collections: tuple[str, ...] = ("params",),
    data_transform: Callable[..., Any] | None = None,
    methods: Any = None,
) -> Any:
    """``nn.scan`` that also inserts ``axis_name`` into the ``*_axes`` metadata.

    For every collection of ``axes_collections`` scanned along axis ``i``, the recorded
    logical names get ``axis_name`` at position ``i`` (``nn.Partitioned`` boxes too).
    """
    cols = {c: variable_axes[c] for c in axes_collections if c in variable_axes}
    scanned = transforms.scan(
        target, variable_axes=_with_axes_collections(variable_axes, cols),
        variable_broadcast=variable_broadcast, variable_carry=variable_carry,
        split_rngs=split_rngs, in_axes=in_axes, out_axes=out_axes, length=length,
        reverse=reverse, unroll=unroll, data_transform=data_transform,
        metadata_params={PARTITION_NAME: axis_name}, methods=methods)
    for col, index in cols.items():
        scanned = transforms.map_variables(
            scanned, f"{col}_axes", functools.partial(_remove_axis, index=index),
            functools.partial(_insert_axis, index=index, axis_name=axis_name),
            mutable=True, methods=methods)
    return scanned


def vmap_with_axes(
    target: Any,
    variable_axes: Mapping[CollectionFilter, Any],
    split_rngs: Mapping[PRNGSequenceFilter, bool] = {},  # noqa: B006 - Flax's default
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: str | None = None,
    partitioning_axis_names: Mapping[Any, str] = {},  # noqa: B006
    spmd_axis_name: str | None = None,
    methods: Any = None,
) -> Any:
    """``nn.vmap`` that inserts ``partitioning_axis_names[col]`` into ``<col>_axes`` metadata.

    ``partitioning_axis_names`` maps a mapped collection to the logical name of its new axis.
    """
    names = {col: (variable_axes[col], name) for col, name in partitioning_axis_names.items()
             if variable_axes.get(col) is not None}
    axes = _with_axes_collections(variable_axes, {c: ix for c, (ix, _) in names.items()})
    vmapped = transforms.vmap(
        target, variable_axes=axes, split_rngs=split_rngs, in_axes=in_axes, out_axes=out_axes,
        axis_size=axis_size, axis_name=axis_name, spmd_axis_name=spmd_axis_name,
        methods=methods)
    for col, (index, axis_name_) in names.items():
        vmapped = transforms.map_variables(
            vmapped, f"{col}_axes", functools.partial(_remove_axis, index=index),
            functools.partial(_insert_axis, index=index, axis_name=axis_name_),
            mutable=True, methods=methods)
    return vmapped


def core_remat_static(fn: Callable[..., Any], variables: CollectionFilter = True,
                      rngs: PRNGSequenceFilter = True, concrete: bool = False,
                      prevent_cse: bool = True, static_argnums: tuple[int, ...] = (),
                      policy: Callable[..., bool] | None = None) -> Callable[..., Any]:
    """The functional-core remat of ``fn(scope, *args)`` whose ``static_argnums`` (counted
    after the scope) are passed as Python values, not traced.

    >>> import jax, jax.numpy as jnp
    >>> from flaxen.core import init
    >>> def body(scope, x, n):
    ...     return x * n
    >>> init(core_remat_static(body, static_argnums=(1,)))(jax.random.key(0), jnp.ones(2), 3)[0]
    Array([3., 3.], dtype=float32)
    """
    return lift.checkpoint(fn, variables, rngs, concrete, prevent_cse, static_argnums, policy)


_core_remat_static = core_remat_static


def remat(target: Any, variables: CollectionFilter = True, rngs: PRNGSequenceFilter = True,
          concrete: bool = False, prevent_cse: bool = True,
          static_argnums: int | tuple[int, ...] = (),
          policy: Callable[..., bool] | None = None, methods: Any = None) -> Any:
    """``nn.remat`` under its legacy name (``static_argnums`` count ``self`` as 0)."""
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    if any(i < 1 for i in static):
        raise ValueError(
            f"remat static_argnums={static}: argument 0 is the Module itself; count the "
            "method's arguments from 1."
        )
    return lift_transform(
        _core_remat_static, target, variables=variables, rngs=rngs, concrete=concrete,
        prevent_cse=prevent_cse, static_argnums=tuple(i - 1 for i in static),
        policy=policy, methods=methods, class_prefix="Core_remat_static")

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen.core.frozen_dict import unfreeze  # noqa: E402, F401
from flaxen.traverse_util import flatten_dict, unflatten_dict  # noqa: E402, F401

# Type aliases Flax's module imports from flax.typing (code written for Flax imports them from
# here too); the very objects of flaxen.typing.
from flaxen.typing import (  # noqa: E402, F401
    Array,
    ArrayPytree,
    InOutAxis,
    InOutScanAxis,
    PartitionSpecPytree,
)
