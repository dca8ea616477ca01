"""Multi-device and tracing helpers on top of JAX (``flaxen.jax_utils``).

- :func:`replicate` / :func:`unreplicate`: add / take a leading device axis, for ``pmap``.
- :func:`prefetch_to_device`: move batches onto devices ahead of use.
- :func:`pad_shard_unpad`: call a ``pmap``-ed function on a batch of any size.
- :func:`pmean`: mean over a named mapped axis.
- :func:`partial_eval_by_shape`: evaluate a function from input shapes only.
- :func:`scan_in_dim`: ``lax.scan`` over any axis (or several) of the inputs.

>>> import jax, numpy as np
>>> from flaxen import jax_utils
>>> n = jax.local_device_count()
>>> reps = jax_utils.replicate({'w': np.ones(3)})
>>> reps['w'].shape == (n, 3)
True
>>> jax_utils.unreplicate(reps)['w'].shape
(3,)
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import core, lax  # noqa: F401 - importable from here in Flax
from jax.api_util import debug_info as _debug_info
from jax.extend import linear_util as _lu
from jax.interpreters import partial_eval as _pe
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen.errors import BatchSizeError

__all__ = [
    "pad_shard_unpad",
    "partial_eval_by_shape",
    "pmean",
    "prefetch_to_device",
    "replicate",
    "scan_in_dim",
    "unreplicate",
]

lu, pe = _lu, _pe  # Flax's names for these JAX modules

_DEVICE_AXIS = "_device_put_sharded"  # Flax's default mesh-axis name for these helpers


@functools.lru_cache(maxsize=64)
def _leading_axis_sharding(devices: tuple, axis_name: str = _DEVICE_AXIS) -> NamedSharding:
    # A 1-D mesh over `devices` that splits an array's first axis, one row per device:
    # the layout jax.pmap expects of its inputs, so pmap can use such arrays in place.
    return NamedSharding(Mesh(np.asarray(devices, dtype=object), (axis_name,)),
                         PartitionSpec(axis_name))


def _path_str(path: tuple) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def _to_host(x: Any) -> np.ndarray:
    return np.asarray(x)


def replicate(tree: Any, devices: Sequence[jax.Device] | None = None,
              axis_name: str = _DEVICE_AXIS) -> Any:
    """Copy every array of ``tree`` to each device, stacked along a new leading axis.

    ``devices`` defaults to ``jax.local_devices()`` (the order ``jax.pmap`` uses). Leaves
    may be numpy/JAX arrays, Python scalars or typed PRNG keys; dtypes follow JAX's
    defaults (float64 becomes float32 unless x64 is enabled). The results are sharded over a
    one-axis mesh of ``devices`` whose axis is called ``axis_name``.

    >>> import jax, numpy as np
    >>> two = jax.local_devices()[:2]
    >>> replicate(np.arange(3), devices=two).shape
    (2, 3)
    """
    devices = tuple(jax.local_devices() if devices is None else devices)
    sharding = _leading_axis_sharding(devices, axis_name)
    count = len(devices)

    def stack(x: Any) -> Any:
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = stack(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        host = _to_host(x)
        # A zero-stride view: the copies are made by the transfer, not on the host.
        return jax.device_put(np.broadcast_to(host[None], (count, *host.shape)), sharding)

    return jax.tree_util.tree_map(stack, tree)


def unreplicate(tree: Any) -> Any:
    """Take the first copy of every leaf of a replicated ``tree`` (index 0 of axis 0).

    >>> import numpy as np
    >>> unreplicate({'x': np.arange(6).reshape(3, 2)})['x'].tolist()
    [0, 1]
    """
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def pmean(xs: Any, axis_name: Any) -> Any:
    """Mean of every leaf of ``xs`` over the mapped axis ``axis_name`` (inside pmap etc.).

    Deprecated (a ``DeprecationWarning`` per call, as in Flax): ``jax.lax.pmean`` takes the
    same arguments.

    >>> import jax, jax.numpy as jnp, warnings
    >>> n = jax.local_device_count()
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter('ignore', DeprecationWarning)
    ...     out = jax.pmap(lambda x: pmean(x, 'i'), axis_name='i')(jnp.arange(n * 1.0))
    >>> bool((out == (n - 1) / 2).all())
    True
    """
    warnings.warn(
        "flax.jax_utils.pmean is deprecated: use jax.lax.pmean instead, with the same "
        "arguments.",
        DeprecationWarning,
    )
    return jax.lax.pmean(xs, axis_name)


def prefetch_to_device(iterator: Iterable[Any], size: int,
                       devices: Sequence[jax.Device] | None = None,
                       axis_name: str = _DEVICE_AXIS) -> Iterator[Any]:
    """Yield the items of ``iterator`` with their arrays already split across ``devices``.

    Each leaf's first axis must be a multiple of the number of devices; it is cut into equal
    consecutive blocks, block ``i`` going to device ``i`` (``jax.local_devices()`` order by
    default, as ``jax.pmap`` expects; with one row per device, row ``i``). Up to
    ``size`` items are transferred ahead, so host-to-device copies overlap the
    computation on earlier items (2 is usually best on GPUs). The arrays are sharded over a
    one-axis mesh of ``devices`` whose axis is called ``axis_name``.

    >>> import jax, numpy as np
    >>> n = jax.local_device_count()
    >>> batches = ({'x': np.ones((n, 4))} for _ in range(3))
    >>> [b['x'].shape == (n, 4) for b in prefetch_to_device(batches, 2)]
    [True, True, True]
    """
    if size < 1:
        raise ValueError(
            f"prefetch_to_device needs size >= 1 (items to keep in flight), got {size}. "
            "Use size=2 on GPUs, or iterate the data directly to skip prefetching."
        )
    devices = tuple(jax.local_devices() if devices is None else devices)
    sharding = _leading_axis_sharding(devices, axis_name)

    def check(path: tuple, x: Any) -> Any:
        shape = np.shape(x)
        if not shape or shape[0] % len(devices):
            raise ValueError(
                f"prefetch_to_device: leaf {_path_str(path)} has shape {shape}, but its "
                f"first axis must be a multiple of the number of devices ({len(devices)}), "
                f"to be split evenly across them. Reshape each batch to "
                f"({len(devices)}, per_device_batch, ...) first, or drop the last rows."
            )
        return x

    def transfer(item: Any) -> Any:
        jax.tree_util.tree_map_with_path(check, item)
        return jax.device_put(item, sharding)

    iterator = iter(iterator)
    queue: collections.deque = collections.deque(
        transfer(item) for item in itertools.islice(iterator, size))
    while queue:
        # Start the next transfer before handing out the current item.
        for item in itertools.islice(iterator, 1):
            queue.append(transfer(item))
        yield queue.popleft()


def _spec_to_struct(spec: Any) -> jax.ShapeDtypeStruct:
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):
        return jax.ShapeDtypeStruct(spec.shape, spec.dtype)
    spec = tuple(spec)
    if len(spec) == 2 and isinstance(spec[0], (tuple, list)):
        shape, dtype = spec
    else:
        shape, dtype = spec, jnp.float32
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def partial_eval_by_shape(fn: Callable[..., Any], input_spec: Iterable[Any], *args: Any,
                          **kwargs: Any) -> Any:
    """Call ``fn(*inputs, *args, **kwargs)`` knowing only the inputs' shapes and dtypes.

    ``input_spec`` lists one entry per input: a shape (dtype float32), a
    ``(shape, dtype)`` pair, or anything with ``.shape`` and ``.dtype`` (e.g.
    ``jax.ShapeDtypeStruct``). Unlike ``jax.eval_shape``, parts of the result that do not
    depend on the inputs' values (e.g. parameters drawn from an RNG key passed in
    ``args``) come back as real values; the rest come back as ``jax.ShapeDtypeStruct``.

    >>> import jax.numpy as jnp
    >>> y, ones = partial_eval_by_shape(lambda x, k: (x @ x.T, jnp.ones(k)), [(2, 3)], 4)
    >>> y
    ShapeDtypeStruct(shape=(2, 2), dtype=float32)
    >>> ones.tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    structs = [_spec_to_struct(spec) for spec in input_spec]
    tree_box: list = []

    def traced_leaves(*inputs: Any) -> list:
        out = fn(*inputs, *args, **kwargs)
        leaves, treedef = jax.tree_util.tree_flatten(out)
        tree_box.append((leaves, treedef))
        # Only tracers go back to JAX; other leaves (Python values, dtypes, ...) are
        # already final and would not be valid JAX outputs anyway.
        return [leaf for leaf in leaves if isinstance(leaf, jax.core.Tracer)]

    info = _debug_info("partial_eval_by_shape", fn, tuple(structs), {})
    wrapped = _lu.wrap_init(traced_leaves, debug_info=info)
    in_pvals = [_pe.PartialVal.unknown(jax.core.ShapedArray(s.shape, s.dtype))
                for s in structs]
    _, out_pvals, _ = _pe.trace_to_jaxpr_nounits(wrapped, in_pvals)
    leaves, treedef = tree_box[-1]
    results = iter(out_pvals)
    final = []
    for leaf in leaves:
        if not isinstance(leaf, jax.core.Tracer):
            final.append(leaf)
            continue
        pval = next(results)
        if pval.is_known():
            final.append(pval.get_known())
        else:
            aval = pval.get_aval()
            final.append(jax.ShapeDtypeStruct(aval.shape, aval.dtype))
    return jax.tree_util.tree_unflatten(treedef, final)


def pad_shard_unpad(wrapped: Callable[..., Any], static_argnums: Sequence[int] = (0,),
                    static_argnames: Sequence[str] = (),
                    static_return: bool = False) -> Callable[..., Any]:
    """Wrap a ``pmap``-ed function so it accepts batches of any size.

    The returned function pads the leading (batch) axis of every non-static argument
    with zeros, in host memory, to ``devices * per_device`` rows, where ``per_device`` is
    ``max(ceil(batch / devices), min_device_batch)``; reshapes to
    ``(devices, per_device, ...)``; calls ``wrapped``; then (unless ``static_return``)
    reshapes each output back to ``(devices * per_device, ...)`` on the host and drops
    the padded rows. Passing a fixed keyword-only ``min_device_batch`` gives every batch
    the same shape, so a ragged last batch does not trigger a recompile. Positional
    arguments in ``static_argnums`` and keywords in ``static_argnames`` are passed
    through untouched (default: the first argument, usually the parameters).

    >>> import jax, numpy as np
    >>> scale = pad_shard_unpad(jax.pmap(lambda p, x: x * p))
    >>> params = replicate(np.float32(2.0))
    >>> scale(params, np.arange(5.0).reshape(5, 1), min_device_batch=2).ravel()
    array([0., 2., 4., 6., 8.], dtype=float32)
    """
    static_argnums = tuple(static_argnums)
    static_argnames = tuple(static_argnames)

    @functools.wraps(wrapped)
    def padded_call(*args: Any, min_device_batch: int | None = None, **kwargs: Any) -> Any:
        n_args = len(args)
        statics = {i % n_args for i in static_argnums if -n_args <= i < n_args}
        dynamic = {
            **{f"args[{i}]": a for i, a in enumerate(args) if i not in statics},
            **{k: v for k, v in kwargs.items() if k not in static_argnames},
        }
        batch = _common_batch_size(dynamic)
        devices = jax.local_device_count()
        per_device = max(math.ceil(batch / devices), min_device_batch or 0)

        def shard(x: Any) -> np.ndarray:
            return _pad_rows(_to_host(x), devices * per_device).reshape(
                devices, per_device, *np.shape(x)[1:])

        args = tuple(a if i in statics else jax.tree_util.tree_map(shard, a)
                     for i, a in enumerate(args))
        kwargs = {k: v if k in static_argnames else jax.tree_util.tree_map(shard, v)
                  for k, v in kwargs.items()}
        out = wrapped(*args, **kwargs)
        if static_return:
            return out

        def unshard(path: tuple, y: Any) -> np.ndarray:
            host = _to_host(y)
            if host.shape[:2] != (devices, per_device):
                raise ValueError(
                    f"pad_shard_unpad: output {_path_str(path)} has shape {host.shape}, "
                    f"but per-example outputs must start with (devices, per_device) = "
                    f"({devices}, {per_device}). Return per-example values, or pass "
                    "static_return=True for outputs that are not per-example (e.g. "
                    "metrics already reduced with psum)."
                )
            return host.reshape(devices * per_device, *host.shape[2:])[:batch]

        return jax.tree_util.tree_map_with_path(unshard, out)

    return padded_call


def _common_batch_size(dynamic: dict[str, Any]) -> int:
    sizes: dict[int, str] = {}
    for name, value in dynamic.items():
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            where = name + jax.tree_util.keystr(path)
            shape = np.shape(leaf)
            if not shape:
                raise ValueError(
                    f"pad_shard_unpad: argument {where} is a scalar, but every non-static "
                    "argument needs a leading batch axis. Mark it static with "
                    "static_argnums / static_argnames."
                )
            sizes.setdefault(shape[0], where)
    if not sizes:
        raise BatchSizeError(
            "pad_shard_unpad: no non-static array argument to take the batch size from. "
            "Pass at least one batched array that is not in static_argnums / "
            "static_argnames."
        )
    if len(sizes) > 1:
        found = ", ".join(f"{where} has {size}" for size, where in sorted(sizes.items()))
        raise BatchSizeError(
            f"pad_shard_unpad: non-static arguments disagree on the batch size ({found}). "
            "Give them the same leading dimension, or mark the odd ones static."
        )
    return next(iter(sizes))


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    if x.shape[0] == rows:
        return x
    padded = np.zeros((rows, *x.shape[1:]), dtype=x.dtype)
    padded[: x.shape[0]] = x
    return padded


def _scan_nested(fn: Callable[[Any, Any], Any], init: Any, xs: Any,
                 unrolls: tuple[int, ...]) -> tuple[Any, Any]:
    if not unrolls:
        return fn(init, xs)

    def body(carry, x):
        return _scan_nested(fn, carry, x, unrolls[1:])

    return jax.lax.scan(body, init, xs, unroll=unrolls[0])


def scan_in_dim(body_fn: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any,
                axis: int | Sequence[int] = (0,), unroll: int | Sequence[int] = (1,),
                keepdims: bool = False) -> tuple[Any, Any]:
    """``lax.scan`` over ``axis`` of every leaf of ``xs`` (several axes: nested scans).

    ``body_fn(carry, x) -> (carry, y)`` sees one slice at a time: with several axes, the first
    listed axis is the outermost loop. The outputs ``y`` are stacked back at the same axes.
    With ``keepdims=True`` the scanned axes stay in ``x`` (and must stay in ``y``) with size 1,
    which suits code written for whole arrays (e.g. attention decoding one position at a
    time). ``unroll`` is one value per axis, outermost first; a shorter tuple (or one int) is
    padded with 1s on the left, so ``unroll=4`` with three axes unrolls the innermost loop 4 times.

    >>> import jax.numpy as jnp
    >>> xs = jnp.arange(6.0).reshape(2, 3)
    >>> total, running = scan_in_dim(lambda c, x: (c + x, c + x), jnp.zeros(2), xs, axis=1)
    >>> total.tolist(), running.tolist()
    ([3.0, 12.0], [[0.0, 1.0, 3.0], [3.0, 7.0, 12.0]])
    """
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if not axes:
        raise ValueError("scan_in_dim needs at least one axis to scan over; got axis=().")
    n = len(axes)
    unrolls = (unroll,) if isinstance(unroll, int) else tuple(unroll)
    # As in Flax: a short `unroll` is padded with 1s on the left, so a single value unrolls the
    # innermost loop only; values past the number of axes are not used.
    unrolls = ((1,) * (n - len(unrolls)) + unrolls)[:n]
    lead = tuple(range(n))

    def norm(ndim: int) -> tuple[int, ...]:
        out = tuple(a % ndim if -ndim <= a < ndim else None for a in axes)
        if None in out or len(set(out)) != n:
            raise ValueError(
                f"scan_in_dim axis={axes} does not name {n} distinct axes of an input with "
                f"{ndim} dimensions."
            )
        return out  # type: ignore[return-value] # no None left: checked above

    def to_front(x):
        x = jnp.asarray(x)
        return jnp.moveaxis(x, norm(x.ndim), lead)

    def slice_in(x):  # (rest...) -> the scanned axes back in place, size 1
        x = x.reshape((1,) * n + x.shape)
        return jnp.moveaxis(x, lead, norm(x.ndim))

    def slice_out(y):
        y = jnp.asarray(y)
        y = jnp.moveaxis(y, norm(y.ndim), lead)
        return y.reshape(y.shape[n:])

    def body(carry, x):
        if keepdims:
            x = jax.tree.map(slice_in, x)
        carry, y = body_fn(carry, x)
        if keepdims:
            y = jax.tree.map(slice_out, y)
        return carry, y

    carry, ys = _scan_nested(body, init, jax.tree.map(to_front, xs), unrolls)
    return carry, jax.tree.map(lambda y: jnp.moveaxis(y, lead, norm(y.ndim)), ys)
