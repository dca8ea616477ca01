"""Today's ``nnx.shard_map``: ``jax.shard_map`` over graph nodes.

``in_specs`` is a prefix of the arguments; for a graph node (or Variable) it may be one
``PartitionSpec`` for all its Variables, an ``nnx.StateSharding`` (graph mode with graph
updates) or an ``nnx.prefix`` result. Variables of the inputs come back with their input
spec; graph nodes in the output use ``out_specs``. Built on :func:`._mapped.mapped_call`.

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> mesh = jax.sharding.Mesh(jax.devices()[:1], ('d',))
>>> P = jax.sharding.PartitionSpec
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> f = nnx.shard_map(lambda m, x: m(x), mesh=mesh, in_specs=(P(), P('d')), out_specs=P('d'))
>>> f(m, jnp.ones((4, 2))).shape
(4, 3)
"""

from __future__ import annotations

import functools
import typing as tp

import jax

from flaxen import traceback_util
from flaxen.nnx._modes import resolve_modes
from flaxen.nnx.transforms._common import check_prefix, resolve_bound
from flaxen.nnx.transforms._mapped import mapped_call

__all__ = ["shard_map"]


class _Missing:
    pass


def shard_map(
    f: tp.Any = _Missing,
    *,
    mesh: tp.Any,
    in_specs: tp.Any,
    out_specs: tp.Any,
    axis_names: tp.AbstractSet[tp.Any] = frozenset(),
    check_vma: bool = True,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> tp.Any:
    """Lifted ``jax.shard_map`` (see the module docstring).

    >>> import jax, jax.numpy as jnp
    >>> from flaxen import nnx
    >>> mesh = jax.sharding.Mesh(jax.devices()[:1], ('d',))
    >>> count = nnx.Variable(jnp.array(0))
    >>> @nnx.shard_map(mesh=mesh, in_specs=(jax.P(),), out_specs=jax.P())
    ... def step(count):
    ...     count[...] += 1
    >>> step(count); int(count[...])
    1
    """
    graph, graph_updates = resolve_modes(graph, graph_updates)
    if f is _Missing:
        return functools.partial(shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 axis_names=axis_names, check_vma=check_vma, graph=graph,
                                 graph_updates=graph_updates)
    resolve_bound(f, "shard_map")
    check_prefix(in_specs, "in_specs", "shard_map", graph, graph_updates)
    check_prefix(out_specs, "out_specs", "shard_map", graph, graph_updates)
    kwargs_sm: dict[str, tp.Any] = {"check_vma": check_vma}
    if axis_names:
        kwargs_sm["axis_names"] = set(axis_names)

    def run(pure: tp.Callable, ins: list, late: list) -> tp.Any:
        return jax.shard_map(pure, mesh=mesh, in_specs=tuple(ins), out_specs=late,
                             **kwargs_sm)

    @traceback_util.api_boundary
    @functools.wraps(f)
    def shard_map_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return mapped_call(f, args, kwargs, fn_name="shard_map", in_prefix=in_specs,
                           kw_prefix=jax.sharding.PartitionSpec(), out_prefix=out_specs,
                           graph=graph, graph_updates=graph_updates, transform=run,
                           what="in_specs", out_what="out_specs")

    return shard_map_wrapper
