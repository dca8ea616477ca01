"""``nnx.RNN`` (a cell scanned over a time axis) and ``nnx.Bidirectional``.

The scan splits the cell into a graph definition and its state, runs ``jax.lax.scan`` with
that state in the carry (so counters and statistics the cell updates flow from step to
step), merges a fresh cell inside each step, and writes the final state back into the
cell. Streams picked by ``broadcast_rngs`` (a stream name, a list of names, or an NNX
filter on the stream's key) advance once per call and are reset every step, so every step
draws the same key.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> cell = nnx.GRUCell(3, 4, rngs=nnx.Rngs(0))
>>> carry, y = nnx.RNN(cell, return_carry=True)(jnp.ones((2, 5, 3)))
>>> carry.shape, y.shape
((2, 4), (2, 5, 4))
"""

from __future__ import annotations

import logging
import typing as tp

import jax
import jax.numpy as jnp
import typing_extensions as tpe

from flaxen.nnx import _graph_ops as graphlib
from flaxen.nnx import filterlib
from flaxen.nnx.module import Module
from flaxen.nnx.nn._common import data
from flaxen.nnx.rnglib import Rngs, RngStream
from flaxen.nnx.transforms._axes import StateAxes
from flaxen.nnx.transforms._axis_loop import Carry as _CarryAxis

A = tp.TypeVar("A")
Array = jax.Array
Carry = tp.Any
Output = tp.Any

__all__ = ["RNN", "Bidirectional", "RNNBase", "flip_sequences"]


def flip_sequences(
    inputs: Array, seq_lengths: Array | None, num_batch_dims: int, time_major: bool
) -> Array:
    """Reverses each sequence along the time axis; with ``seq_lengths`` only its first
    ``length`` steps are reversed (the padding stays at the end)."""
    time_axis = 0 if time_major else num_batch_dims
    steps = inputs.shape[time_axis]
    if seq_lengths is None:
        return jnp.flip(inputs, axis=time_axis)
    lengths = jnp.expand_dims(seq_lengths, axis=time_axis)
    idx = jnp.arange(steps - 1, -1, -1)
    idx_shape = [steps] + [1] * num_batch_dims if time_major else [1] * num_batch_dims + [steps]
    idx = (jnp.reshape(idx, idx_shape) + lengths) % steps
    idx = jnp.reshape(idx, idx.shape + (1,) * (inputs.ndim - idx.ndim))
    return jnp.take_along_axis(inputs, idx, axis=time_axis)


def _matches(broadcast_rngs: filterlib.Filter, path: tuple, stream: RngStream) -> bool:
    if broadcast_rngs is None:
        return False
    if isinstance(broadcast_rngs, str):
        return stream.tag == broadcast_rngs
    if isinstance(broadcast_rngs, (list, tuple)) and all(
        isinstance(f, str) for f in broadcast_rngs
    ):
        return stream.tag in broadcast_rngs
    pred = filterlib.to_predicate(broadcast_rngs)
    return bool(pred((*path, "key"), stream.key))


def _streams(node: tp.Any) -> dict[tuple, RngStream]:
    return {p: v for p, v in graphlib.iter_graph(node) if isinstance(v, RngStream)}


def _select_last_carry(sequence: A, seq_lengths: jnp.ndarray) -> A:
    """Each batch entry's carry at its last valid step: ``sequence`` holds time-major stacked
    carries (``(time, batch, ...)`` leaves), ``seq_lengths`` one length per batch entry.
    Flax's name and parameters: importable from ``nnx.nn.recurrent``."""
    last = seq_lengths - 1
    return jax.tree_util.tree_map(lambda x: x[last, jnp.arange(x.shape[1])], sequence)


def _scan_cell(cell: tp.Any, carry: Carry, xs: Array, *, unroll: int,
               broadcast_rngs: filterlib.Filter, keep_carries: bool) -> tuple[Carry, tp.Any]:
    """Scans ``cell`` over axis 0 of ``xs``; returns ``(final carry, stacked outputs)``."""
    bcast = [p for p, s in _streams(cell).items() if _matches(broadcast_rngs, p, s)]
    saved = []
    for p in bcast:
        s = _streams(cell)[p]
        key = s()  # the stream advances once per call
        saved.append((s, s.key.value, s.count.value))
        s.key.value = key
        s.count.value = jnp.zeros_like(s.count.value)
    zero_counts = [s.count.value for s, _, _ in saved]
    graphdef, state = graphlib.split(cell)

    def step(c: tuple, x: Array) -> tuple:
        st, h = c
        m = graphlib.merge(graphdef, st)
        h, y = m(h, x)
        if bcast:
            streams = _streams(m)
            for p, zero in zip(bcast, zero_counts):
                streams[p].count.value = zero
        _, st = graphlib.split(m)
        return (st, h), ((h, y) if keep_carries else y)

    out: tp.Any
    try:
        (state, carry), out = jax.lax.scan(step, (state, carry), xs, unroll=unroll)
        graphlib.update(cell, state)
    finally:
        for s, key, count in saved:
            s.key.value = key
            s.count.value = count
    return carry, out


def _carry_rngs(layer: str, rngs: tp.Any) -> tp.Any:
    """The carry stream a layer keeps for its ``rngs`` argument: a fresh stream for
    ``True``, ``None`` data for ``False``, a fork of an ``Rngs``' ``carry``, a stream as is."""
    if rngs is True:
        return RngStream(0, tag="carry")
    if rngs is False:
        return data(None)
    if isinstance(rngs, Rngs):
        return RngStream.fork(rngs.carry)
    if isinstance(rngs, RngStream):
        return rngs
    raise TypeError(
        f"{layer}: rngs must be an nnx.Rngs, an nnx.RngStream or a bool, got "
        f"{type(rngs).__name__}."
    )


def _carries_all(state_axes: tp.Mapping) -> bool:
    """Whether ``state_axes`` sends every Variable of the cell to the scan's carry."""
    return [(f, a) for f, a in state_axes.items()] == [(..., _CarryAxis)]


class RNN(Module):
    """Runs ``cell`` over the time axis of ``inputs`` (axis ``-(num_feature_axes + 1)``, or
    0 when ``time_major``); returns the outputs (``(carry, outputs)`` with
    ``return_carry``). ``reverse`` runs backwards (``keep_order`` flips the outputs back);
    ``seq_lengths`` marks padded sequences. Without ``initial_carry`` the cell's
    ``initialize_carry`` draws from ``rngs`` (default: an own ``carry`` stream).
    """

    def __init__(
        self,
        cell: Module,
        *,
        time_major: bool = False,
        return_carry: bool = False,
        reverse: bool = False,
        keep_order: bool = False,
        unroll: int = 1,
        state_axes: tp.Mapping[str, tp.Any] | None = None,
        broadcast_rngs: filterlib.Filter = None,
        rngs: Rngs | RngStream | bool = True,
    ) -> None:
        self.cell = cell
        self.time_major = time_major
        self.return_carry = return_carry
        self.reverse = reverse
        self.keep_order = keep_order
        self.unroll = unroll
        self.rngs = _carry_rngs("RNN", rngs)
        # Flax stores the default as the StateAxes its scan uses: the whole cell is carried
        if state_axes and not _carries_all(state_axes):
            raise NotImplementedError(
                f"nnx.RNN(state_axes={state_axes!r}) is not supported by flaxen: the whole "
                "cell state is carried through the scan (state_axes={...: nnx.Carry}); use "
                "broadcast_rngs for streams that must not advance per step."
            )
        self.state_axes = state_axes or StateAxes({...: _CarryAxis})
        self.broadcast_rngs = broadcast_rngs

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        rngs: Rngs | RngStream | None = None,
    ) -> tp.Any:
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        reverse = self.reverse if reverse is None else reverse
        keep_order = self.keep_order if keep_order is None else keep_order
        n_feat = self.cell.num_feature_axes
        time_axis = 0 if time_major else inputs.ndim - (n_feat + 1)
        if time_axis < 0:
            raise ValueError(
                f"RNN: inputs of shape {inputs.shape} have no time axis: expected "
                f"[batch..., time, features] with {n_feat} feature axes."
            )
        batch_dims = inputs.shape[1:-n_feat] if time_major else inputs.shape[:time_axis]
        if reverse:
            inputs = flip_sequences(inputs, seq_lengths, len(batch_dims), time_major)
        if initial_carry is None:
            rngs = self.rngs if rngs is None else rngs
            if isinstance(rngs, Rngs):
                rngs = RngStream.fork(rngs.carry)
            carry_shape = inputs.shape[:time_axis] + inputs.shape[time_axis + 1:]
            initial_carry = self.cell.initialize_carry(carry_shape, rngs)
        keep_carries = seq_lengths is not None and return_carry
        xs = jnp.moveaxis(inputs, time_axis, 0)
        carry, out = _scan_cell(
            self.cell, initial_carry, xs, unroll=self.unroll,
            broadcast_rngs=self.broadcast_rngs, keep_carries=keep_carries,
        )
        if keep_carries and seq_lengths is not None:
            carries, out = out
            carry = _select_last_carry(carries, seq_lengths)
        outputs = jax.tree_util.tree_map(lambda y: jnp.moveaxis(y, 0, time_axis), out)
        if reverse and keep_order:
            outputs = jax.tree_util.tree_map(
                lambda y: flip_sequences(y, seq_lengths, len(batch_dims), time_major), outputs
            )
        return (carry, outputs) if return_carry else outputs


def _concatenate(a: Array, b: Array) -> Array:
    """``Bidirectional``'s default ``merge_fn``: joins the two directions' outputs on the
    last axis."""
    return jnp.concatenate([a, b], axis=-1)


class RNNBase(tpe.Protocol):
    """What :class:`Bidirectional` needs of each direction: a layer called on a sequence with
    ``RNN``'s keywords (``RNN`` is one; any object with this ``__call__`` fits the type).

    >>> from flaxen import nnx
    >>> def directions(fwd: RNNBase, bwd: RNNBase) -> nnx.Bidirectional:
    ...     return nnx.Bidirectional(fwd, bwd)
    """

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        rngs: Rngs | RngStream | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Output | tuple[Carry, Output]: ...


class Bidirectional(Module):
    """Runs ``forward_rnn`` and ``backward_rnn`` (reversed, outputs kept in order) and merges
    their outputs with ``merge_fn`` (default: concatenate features)."""

    # class-level defaults, as Flax declares them (each instance sets its own in __init__)
    forward_rnn: RNNBase
    backward_rnn: RNNBase
    merge_fn: tp.Callable[[Array, Array], Array] = _concatenate
    time_major: bool = False
    return_carry: bool = False

    def __init__(
        self,
        forward_rnn: tp.Any,
        backward_rnn: tp.Any,
        *,
        merge_fn: tp.Callable[[Array, Array], Array] = _concatenate,
        time_major: bool = False,
        return_carry: bool = False,
        rngs: Rngs | RngStream | bool = True,
    ) -> None:
        self.forward_rnn = forward_rnn
        self.backward_rnn = backward_rnn
        self.merge_fn = merge_fn
        self.time_major = time_major
        self.return_carry = return_carry
        self.rngs = _carry_rngs("Bidirectional", rngs)

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: tuple[Carry, Carry] | None = None,
        rngs: Rngs | RngStream | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> tp.Any:
        del reverse, keep_order  # the directions are fixed
        time_major = self.time_major if time_major is None else time_major
        return_carry = self.return_carry if return_carry is None else return_carry
        rngs = self.rngs if rngs is None else rngs
        if isinstance(rngs, Rngs):
            rngs = rngs.carry
        fwd0, bwd0 = initial_carry if initial_carry is not None else (None, None)
        if self.forward_rnn is self.backward_rnn:
            logging.getLogger(__name__).warning(
                "Bidirectional: forward_rnn and backward_rnn are the same object, so they "
                "share parameters."
            )
        carry_f, out_f = self.forward_rnn(
            inputs, initial_carry=fwd0, rngs=rngs, seq_lengths=seq_lengths,
            return_carry=True, time_major=time_major, reverse=False,
        )
        carry_b, out_b = self.backward_rnn(
            inputs, initial_carry=bwd0, rngs=rngs, seq_lengths=seq_lengths,
            return_carry=True, time_major=time_major, reverse=True, keep_order=True,
        )
        outputs = jax.tree_util.tree_map(self.merge_fn, out_f, out_b)
        return ((carry_f, carry_b), outputs) if return_carry else outputs
