"""Helpers for scanning over pytrees along arbitrary axes, and the ``broadcast`` marker.

``in_axes`` of :func:`flaxen.core.lift.scan` may name an axis per input leaf, or
:data:`broadcast` for inputs passed whole to every iteration. :func:`scan` is
``jax.lax.scan`` with such ``in_axes``/``out_axes`` and a loop-invariant "broadcast" value
computed once by the body.

>>> import jax.numpy as jnp
>>> move_to_front({'a': jnp.zeros((2, 5))}, 1)['a'].shape
(5, 2)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp

# an axis to scan over, or None; ``broadcast`` marks an input passed whole to every step
ScanAxis = Optional[int]  # noqa: UP045  (Flax's alias is this typing form)


class _Broadcast:
    """Marks a scan input that is passed unchanged to every iteration."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "broadcast"

    def __reduce__(self):
        return (_Broadcast, ())


broadcast = _Broadcast()


def move_to_front(tree: Any, axis: int) -> Any:
    """Moves ``axis`` of every leaf to position 0."""
    if axis == 0:
        return tree
    return jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, axis, 0), tree)


def move_from_front(tree: Any, axis: int) -> Any:
    """Moves axis 0 of every leaf to position ``axis``."""
    if axis == 0:
        return tree
    return jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, 0, axis), tree)


def broadcast_prefix(prefix: Any, tree: Any) -> list:
    """One entry of the prefix tree ``prefix`` per leaf of ``tree`` (None/broadcast are leaves)."""
    out: list = []

    def add(p: Any, subtree: Any) -> None:
        out.extend([p] * len(jax.tree_util.tree_leaves(subtree)))

    jax.tree_util.tree_map(add, prefix, tree,
                           is_leaf=lambda x: x is None or x is broadcast)
    return out


def build_shaped_array(x: Any, batch_dim: bool = False) -> jax.core.ShapedArray:
    """The abstract value of ``x`` (shape, dtype, sharding, weak type), less its leading
    axis when ``batch_dim`` (a scanned input's per-step value).

    >>> build_shaped_array(jnp.ones((4, 3)), batch_dim=True).shape
    (3,)
    """
    shape = tuple(jnp.shape(x))
    aval = getattr(x, "aval", None)
    sharding = getattr(aval, "sharding", None)
    if batch_dim:
        shape = shape[1:]
        if sharding is not None:
            if len(sharding.spec) and sharding.spec[0] is not None:
                raise ValueError(
                    f"Batch dimension in scan `xs` cannot be sharded: the scanned input of "
                    f"shape {jnp.shape(x)} is sharded {sharding.spec} along axis 0; reshard "
                    "it so that the scanned axis is replicated."
                )
            sharding = sharding.update(spec=jax.sharding.PartitionSpec(*sharding.spec[1:]))
    extra = {k: getattr(x, k) for k in ("weak_type", "manual_type") if hasattr(x, k)}
    if sharding is not None:
        extra["sharding"] = sharding
    return jax.core.ShapedArray(shape, jnp.result_type(x), **extra)


def _to_front(ax: Any, xs: Any) -> Any:
    return () if ax is broadcast else move_to_front(xs, ax)


def _from_front(ax: Any, ys: Any) -> Any:
    return () if ax is broadcast else move_from_front(ys, ax)


def _stand_in(x: Any, batch_dim: bool = False) -> jax.ShapeDtypeStruct:
    aval = build_shaped_array(x, batch_dim)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def scan(
    fn: Callable[..., Any],
    in_axes: Any,
    out_axes: Any,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
    _split_transpose: bool = False,
    check_constancy_invariants: bool = True,
) -> Callable[..., Any]:
    """``jax.lax.scan`` over ``fn(broadcast_in, carry, *xs) -> (broadcast_out, carry, ys)``.

    Inputs are scanned along their ``in_axes`` entry, or passed whole when it is
    :data:`broadcast`; outputs are stacked along their ``out_axes`` entry. ``broadcast_out``
    is computed once (it must not depend on the carry or the scanned inputs) and returned
    in place of ``broadcast_in``; an output whose ``out_axes`` entry is ``broadcast`` is
    likewise loop-invariant and returned once. ``check_constancy_invariants=False`` skips
    that extra trace (and then allows no broadcast outputs).

    >>> loop = scan(lambda b, c, x: (b + 2, c + 1, 2 * x), in_axes=0, out_axes=0)
    >>> b, c, ys = loop(1, 2, jnp.arange(3))
    >>> int(b), int(c), ys.tolist()
    (3, 5, [0, 2, 4])
    """

    def inject(args: tuple, xs: Any) -> Any:
        return jax.tree_util.tree_map(
            lambda ax, arg, x: arg if ax is broadcast else x, in_axes, args, xs
        )

    def run(body: Callable[..., Any], init: Any, xs: Any) -> tuple[Any, Any]:
        return jax.lax.scan(body, init, xs, length=length, reverse=reverse, unroll=unroll,
                            _split_transpose=_split_transpose)

    def checked(broadcast_in: Any, init: Any, *args: Any) -> tuple[Any, Any, Any]:
        from flaxen import errors
        from flaxen.core._partial_eval import lazy_call

        xs = jax.tree_util.tree_map(_to_front, in_axes, args)

        def body(c: Any, xs_t: Any, invariants: bool = False) -> tuple[Any, Any]:
            b_out, c, ys = fn(broadcast_in, c, *inject(args, xs_t))
            if invariants:
                return b_out, jax.tree_util.tree_map(
                    lambda ax, y: y if ax is broadcast else (), out_axes, ys)
            return c, jax.tree_util.tree_map(
                lambda ax, y: () if ax is broadcast else y, out_axes, ys)

        # One abstract trace over stand-ins for the carry and one step's inputs: what it
        # returns must not depend on them (that is what makes it loop-invariant).
        carry_in = jax.tree_util.tree_map(_stand_in, init)
        step_in = jax.tree_util.tree_map(functools.partial(_stand_in, batch_dim=True), xs)
        try:
            b_out, constants = lazy_call(
                functools.partial(body, invariants=True), (carry_in, step_in), {})
        except errors.LazyInitError:
            raise ValueError(
                "broadcasted variable has a data dependency on the scan body: a broadcast "
                "output (or a broadcast variable created in the body) is computed from the "
                "carry or a scanned input; compute it from broadcast inputs only, or scan it."
            ) from None
        c, ys = run(body, init, xs)
        ys = jax.tree_util.tree_map(_from_front, out_axes, ys)
        ys = jax.tree_util.tree_map(
            lambda ax, const, y: const if ax is broadcast else y, out_axes, constants, ys)
        return b_out, c, ys

    def unchecked(broadcast_in: Any, init: Any, *args: Any) -> tuple[Any, Any, Any]:
        if broadcast in jax.tree_util.tree_leaves(out_axes):
            raise ValueError(
                f"nn.scan run with check_constancy_invariants=False does not support "
                f"broadcast non-carry function outputs. out_axes was given as {out_axes}; "
                "set check_constancy_invariants=True or scan that output."
            )
        xs = jax.tree_util.tree_map(_to_front, in_axes, args)

        def body(c: Any, xs_t: Any) -> tuple[Any, Any]:
            _, c, ys = fn(broadcast_in, c, *inject(args, xs_t))
            return c, ys

        c, ys = run(body, init, xs)
        return broadcast_in, c, jax.tree_util.tree_map(_from_front, out_axes, ys)

    return checked if check_constancy_invariants else unchecked
