"""Today's ``nnx.vmap``, ``nnx.pmap`` and ``nnx.transform_metadata`` (Flax 0.12.8 faces).

``in_axes``/``out_axes`` are JAX prefixes of the arguments/outputs; where they reach a graph
node they may be an axis for all its Variables, a :class:`StateAxes` (graph mode with graph
updates) or an ``nnx.prefix`` result (all modes). RNG streams need no special treatment:
``nnx.split_rngs`` / ``nnx.with_rngs`` give them one key (and count) per slice beforehand.
Each transform is a short face over :func:`._mapped.mapped_call`.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(model, jnp.ones((5, 2))).shape
(5, 3)
"""

from __future__ import annotations

import functools
import typing as tp

import jax

from flaxen import traceback_util
from flaxen.nnx import spmd
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.transforms._axes import NodePrefix, StateAxes, prefix
from flaxen.nnx.transforms._callable_types import (
    ForiLoopBodyFn,
    PmapFn,
    ScanFn,
    SimpleForiLoopBodyFn,
    SimplePmapFn,
    SimpleScanFn,
    SimpleVmapFn,
    SimpleWhileLoopBodyFn,
    SimpleWhileLoopCondFn,
    VmapFn,
    WhileLoopBodyFn,
    WhileLoopCondFn,
)
from flaxen.nnx.transforms._common import check_prefix, resolve_bound, resolve_kwargs
from flaxen.nnx.transforms._mapped import mapped_call
from flaxen.nnx.variablelib import Variable
from flaxen.typing import Leaf as Leaf  # Flax imports it here from flax.typing

__all__ = ["ForiLoopBodyFn", "NodePrefix", "pmap", "PmapFn", "prefix", "ScanFn",
    "SimpleForiLoopBodyFn", "SimplePmapFn", "SimpleScanFn", "SimpleVmapFn",
    "SimpleWhileLoopBodyFn", "SimpleWhileLoopCondFn", "StateAxes", "transform_metadata", "vmap",
    "VmapFn", "WhileLoopBodyFn", "WhileLoopCondFn"]

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])


class _Missing:
    pass


def _metadata_hooks(metadata: tp.Mapping[str, tp.Any]) -> tuple[tp.Any, tp.Any]:
    """Inner/outer hooks that remove / re-insert the partition name of mapped Variables."""
    if not metadata or spmd.PARTITION_NAME not in metadata:
        return None, None

    def remove(objs: list, prefixes: list) -> None:
        for v, a in zip(objs, prefixes):
            if isinstance(v, Variable) and isinstance(a, int):
                spmd.remove_axis(v, a, metadata)

    def add(objs: list, prefixes: list) -> None:
        for v, a in zip(objs, prefixes):
            if isinstance(v, Variable) and isinstance(a, int):
                spmd.add_axis(v, a, metadata)

    return remove, add


def vmap(
    f: tp.Any = _Missing,
    *,
    in_axes: tp.Any = 0,
    out_axes: tp.Any = 0,
    axis_name: tp.Any = None,
    axis_size: int | None = None,
    spmd_axis_name: tp.Any = None,
    transform_metadata: tp.Mapping[str, tp.Any] = {},  # noqa: B006 - read only
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> tp.Any:
    """Lifted ``jax.vmap``: graph nodes among the arguments are mapped by ``in_axes``,
    their Variable updates written back, graph nodes in the output stacked by ``out_axes``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> make = nnx.vmap(lambda r: nnx.Linear(2, 3, rngs=r), in_axes=0, axis_size=4)
    >>> ens = make(nnx.Rngs(0).split(4))
    >>> ens.kernel.shape
    (4, 2, 3)
    >>> nnx.vmap(lambda m, x: m(x), in_axes=(0, None))(ens, jnp.ones((2,))).shape
    (4, 3)
    """
    graph, graph_updates = resolve_modes(graph, graph_updates)
    if f is _Missing:
        return functools.partial(
            vmap, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name,
            axis_size=axis_size, spmd_axis_name=spmd_axis_name,
            transform_metadata=transform_metadata, graph=graph, graph_updates=graph_updates)
    resolve_bound(f, "vmap")
    check_prefix(in_axes, "in_axes", "vmap", graph, graph_updates)
    check_prefix(out_axes, "out_axes", "vmap", graph, graph_updates)
    inner_hook, outer_hook = _metadata_hooks(transform_metadata)

    def run(pure: tp.Callable, ins: list, late: list) -> tp.Any:
        return jax.vmap(pure, in_axes=tuple(ins), out_axes=late, axis_name=axis_name,
                        axis_size=axis_size, spmd_axis_name=spmd_axis_name)

    @traceback_util.api_boundary
    @functools.wraps(f)
    def vmap_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        args, kwargs = resolve_kwargs(f, args, kwargs), {}
        return mapped_call(f, args, kwargs, fn_name="vmap", in_prefix=in_axes, kw_prefix=0,
                           out_prefix=out_axes, graph=graph, graph_updates=graph_updates,
                           transform=run, inner_hook=inner_hook,
                           outer_hook=outer_hook)

    return vmap_wrapper


def pmap(
    f: tp.Any = _Missing,
    *,
    axis_name: tp.Any = None,
    in_axes: tp.Any = 0,
    out_axes: tp.Any = 0,
    static_broadcasted_argnums: int | tp.Iterable[int] = (),
    devices: tp.Sequence[jax.Device] | None = None,
    backend: str | None = None,
    axis_size: int | None = None,
    donate_argnums: int | tp.Iterable[int] = (),
    global_arg_shapes: tp.Any = None,
    transform_metadata: tp.Mapping[str, tp.Any] = {},  # noqa: B006 - read only
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> tp.Any:
    """Lifted ``jax.pmap`` (prefixes as in :func:`vmap`).

    >>> import jax, jax.numpy as jnp
    >>> from flaxen import nnx
    >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> f = nnx.pmap(lambda m, x: m(x), in_axes=(None, 0), axis_size=1)
    >>> f(model, jnp.ones((1, 4, 2))).shape
    (1, 4, 3)
    """
    graph, graph_updates = resolve_modes(graph, graph_updates)
    if f is _Missing:
        return functools.partial(
            pmap, axis_name=axis_name, in_axes=in_axes, out_axes=out_axes,
            static_broadcasted_argnums=static_broadcasted_argnums, devices=devices,
            backend=backend, axis_size=axis_size, donate_argnums=donate_argnums,
            global_arg_shapes=global_arg_shapes, transform_metadata=transform_metadata,
            graph=graph, graph_updates=graph_updates)
    resolve_bound(f, "pmap")
    check_prefix(in_axes, "in_axes", "pmap", graph, graph_updates)
    check_prefix(out_axes, "out_axes", "pmap", graph, graph_updates)
    inner_hook, outer_hook = _metadata_hooks(transform_metadata)

    def run(pure: tp.Callable, ins: list, late: list) -> tp.Any:
        return jax.pmap(pure, axis_name=axis_name, in_axes=tuple(ins), out_axes=0,
                        devices=devices, backend=backend, axis_size=axis_size)

    @traceback_util.api_boundary
    @functools.wraps(f)
    def pmap_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        args, kwargs = resolve_kwargs(f, args, kwargs), {}
        return mapped_call(f, args, kwargs, fn_name="pmap", in_prefix=in_axes, kw_prefix=0,
                           out_prefix=out_axes, graph=graph, graph_updates=graph_updates,
                           transform=run, post=True, inner_hook=inner_hook,
                           outer_hook=outer_hook)

    return pmap_wrapper


def transform_metadata(
    f: tp.Any = _Missing,
    *,
    in_axes: tp.Any = 0,
    out_axes: tp.Any = 0,
    partition: str | None,
    graph: bool | None = None,
) -> tp.Any:
    """Keeps sharding metadata right for a function that a mapping transform wraps: inside,
    the partition name is removed at each mapped Variable's axis (``in_axes``); afterwards
    it is inserted again, and into the Variables of the output (``out_axes``). Arrays are
    untouched.

    >>> from flaxen import nnx
    >>> @nnx.vmap(in_axes=(None,), axis_size=2, graph_updates=False)
    ... @nnx.transform_metadata(in_axes=(None,), out_axes=0, partition='b')
    ... def make(rngs):
    ...     init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ('a', None))
    ...     return nnx.Linear(2, 3, kernel_init=init, rngs=rngs)
    >>> with nnx.use_eager_sharding(False):  # axis names only: no mesh here
    ...     print(make(nnx.Rngs(0)).kernel.out_sharding)
    ('b', 'a', None)
    """
    if f is _Missing:
        return functools.partial(transform_metadata, in_axes=in_axes, out_axes=out_axes,
                                 partition=partition, graph=graph)
    graph, _ = resolve_modes(graph, None)
    check_prefix(in_axes, "in_axes", "transform_metadata", graph, True)
    check_prefix(out_axes, "out_axes", "transform_metadata", graph, True)
    meta = {spmd.PARTITION_NAME: partition}
    remove, add = _metadata_hooks(meta)

    def run(pure: tp.Callable, ins: list, late: list) -> tp.Any:
        return pure

    @functools.wraps(f)
    def transform_metadata_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        args, kwargs = resolve_kwargs(f, args, kwargs), {}
        return mapped_call(f, args, kwargs, fn_name="transform_metadata", in_prefix=in_axes,
                           kw_prefix=0, out_prefix=out_axes, graph=graph,
                           graph_updates=True, transform=run, inner_hook=remove,
                           outer_hook=add)

    return transform_metadata_wrapper


# scan and the loops live in their own files; Flax's module path names them here
from flaxen.nnx.transforms._axis_loop import Carry, scan  # noqa: E402
from flaxen.nnx.transforms._loops import fori_loop, while_loop  # noqa: E402

__all__ += ["Carry", "fori_loop", "scan", "while_loop"]

# -- Flax 0.12.8's type variables and aliases of nnx.transforms.iteration ----------------------
from flaxen.nnx.module import Module as _Module  # noqa: E402
from flaxen.nnx.statelib import State as _State  # noqa: E402

A = tp.TypeVar("A")
B = tp.TypeVar("B")
C = tp.TypeVar("C")
G = tp.TypeVar("G", bound=tp.Callable[..., tp.Any])
M = tp.TypeVar("M", bound=_Module)
MA = tp.TypeVar("MA", bound=_Module)
N = tp.TypeVar("N", bound=_Module)
StrInt = tp.TypeVar("StrInt", str, int)
AxisName = tp.Hashable
Leaves = list[tp.Any]
Index = int
T = tp.TypeVar("T")
AxisFn = tp.Callable[[_State | Variable, int, tp.Mapping], _State | Variable]


# -- scan's broadcast wrapper -------------------------------------------------------------------
from flaxen import struct as _struct  # noqa: E402


class Broadcasted(_struct.PyTreeNode):
    """A value ``nnx.scan`` hands to every step unchanged (an argument with axis ``None``):
    wrapped so it travels through ``jax.lax.scan``'s carry as a pytree of its own, told apart
    from the carry the user returns.

    >>> import jax, jax.numpy as jnp
    >>> b = Broadcasted(jnp.arange(3))
    >>> jax.tree.leaves(b)[0].tolist(), b.replace(data=1).data
    ([0, 1, 2], 1)
    """

    data: tp.Any
