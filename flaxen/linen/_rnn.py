"""``RNN`` (a cell scanned over time) and ``Bidirectional``; re-exported by ``recurrent``.

``RNN`` runs its cell with ``flaxen.linen.transforms.scan`` (params broadcast to every
step, so the parameter tree is ``cell/...`` exactly as in Flax). Padded batches are
handled with ``seq_lengths``: reversed runs keep the padding at the end, and with
``return_carry`` the carry is the one after each sequence's last valid element.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> rnn = nn.RNN(nn.GRUCell(features=6))
>>> x = jnp.ones((2, 5, 3))                   # [batch, time, features]
>>> variables = rnn.init(jax.random.PRNGKey(0), x)
>>> rnn.apply(variables, x).shape
(2, 5, 6)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax import random

from flaxen.core import FrozenDict
from flaxen.errors import MissingAxisError
from flaxen.linen import transforms
from flaxen.linen._cells import RNNCellBase
from flaxen.linen._layer_errors import LayerShapeError
from flaxen.linen.module import Module, compact

Array = jax.Array
PRNGKey = Any
Carry = Any

__all__ = ["Bidirectional", "RNN", "flip_sequences"]


def flip_sequences(
    inputs: Array, seq_lengths: Array | None, num_batch_dims: int, time_major: bool
) -> Array:
    """Reverses each sequence along the time axis, leaving padding at the end.

    With ``seq_lengths`` (shape ``[batch...]``) only the first ``seq_lengths[b]`` steps of
    sequence ``b`` are reversed; the padding after them stays after them.

    >>> import jax.numpy as jnp
    >>> x = jnp.array([[1, 2, 3, 0], [1, 2, 0, 0]])
    >>> flip_sequences(x, jnp.array([3, 2]), num_batch_dims=1, time_major=False)
    Array([[3, 2, 1, 0],
           [2, 1, 0, 0]], dtype=int32)
    """
    time_axis = 0 if time_major else num_batch_dims
    steps = inputs.shape[time_axis]
    if seq_lengths is None:
        return jnp.flip(inputs, axis=time_axis)
    seq_lengths = jnp.expand_dims(jnp.asarray(seq_lengths), time_axis)
    # Output step t reads input step (len - 1 - t) mod steps: the valid part reversed, the
    # padding (negative before the mod) wrapped around to the end.
    backwards = jnp.arange(steps - 1, -1, -1)
    shape = [1] * (num_batch_dims + 1)
    shape[time_axis] = steps
    idxs = (backwards.reshape(shape) + seq_lengths) % steps
    idxs = idxs.reshape(idxs.shape + (1,) * (inputs.ndim - idxs.ndim))
    return jnp.take_along_axis(inputs, idxs, axis=time_axis)


def _select_last_carry(carries: Carry, seq_lengths: Array) -> Carry:
    """From carries stacked over time (axis 0), each batch element's at ``len - 1``."""
    last = jnp.asarray(seq_lengths) - 1

    def pick(x: Array) -> Array:
        idx = last.reshape((1,) + last.shape + (1,) * (x.ndim - 1 - last.ndim))
        return jnp.take_along_axis(x, idx, axis=0)[0]

    return jax.tree.map(pick, carries)


def _concatenate(a: Array, b: Array) -> Array:
    return jnp.concatenate([a, b], axis=-1)


class RNN(Module):
    """Runs a recurrent cell over the time axis of its inputs.

    Attributes:
      cell: an :class:`RNNCellBase` instance (its parameters live under ``cell``).
      time_major: inputs are ``[time, batch..., features...]`` instead of
        ``[batch..., time, features...]``.
      return_carry: return ``(final_carry, outputs)`` instead of ``outputs``.
      reverse: process right to left (outputs come out reversed unless ``keep_order``).
      keep_order: with ``reverse``, flip the outputs back to input order.
      unroll, variable_axes, variable_broadcast, variable_carry, split_rngs: passed to
        :func:`flaxen.linen.scan` (``params`` broadcast to every step by default).

    The older documented form ``RNN(cell, cell_size)`` / ``RNN(cell, cell_size=n)`` is
    accepted for a cell built without ``features``: the size becomes the cell's
    ``features``. It is not a field (Flax 0.12.8's RNN has none).

    ``__call__(inputs, *, initial_carry=None, init_key=None, seq_lengths=None,
    return_carry=None, time_major=None, reverse=None, keep_order=None)``: the keyword
    arguments override the attributes; ``initial_carry`` defaults to
    ``cell.initialize_carry(init_key or PRNGKey(0), input_shape)``. ``seq_lengths``
    (``[batch...]`` ints) marks the valid prefix of each sequence; outputs past it are not
    zeroed.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> rnn = nn.RNN(nn.LSTMCell(features=4), return_carry=True)
    >>> x = jnp.ones((3, 7, 2))
    >>> (c, h), ys = rnn.init_with_output(jax.random.PRNGKey(0), x)[0]
    >>> h.shape, ys.shape
    ((3, 4), (3, 7, 4))
    """

    cell: RNNCellBase
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1
    variable_axes: Mapping[Any, Any] = FrozenDict()
    variable_broadcast: Any = "params"
    variable_carry: Any = False
    split_rngs: Mapping[Any, bool] = FrozenDict({"params": False})

    @compact
    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        init_key: PRNGKey | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Any:
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        reverse = self.reverse if reverse is None else reverse
        keep_order = self.keep_order if keep_order is None else keep_order

        n_features = self.cell.num_feature_axes
        if jnp.ndim(inputs) < n_features + 1:
            layout = ("[time, batch..., features]" if time_major
                      else "[batch..., time, features]")
            # Flax fails here indexing the missing axis: an IndexError (and a ValueError).
            raise MissingAxisError(
                f"RNN: inputs of shape {jnp.shape(inputs)} have {jnp.ndim(inputs)} "
                f"dimension(s), but {type(self.cell).__name__} needs at least "
                f"{n_features + 1}: a time axis and {n_features} feature axis(es), laid out "
                f"as {layout}. Add the missing axis (e.g. x[:, None] for one step).")
        time_axis = 0 if time_major else inputs.ndim - (n_features + 1)
        if time_major:
            batch_dims = inputs.shape[1 : inputs.ndim - n_features]
        else:
            batch_dims = inputs.shape[:time_axis]
        if seq_lengths is not None and jnp.shape(seq_lengths) != batch_dims:
            raise LayerShapeError(
                f"RNN: seq_lengths of shape {jnp.shape(seq_lengths)} must have the inputs' "
                f"batch shape {batch_dims} (inputs {inputs.shape}, time axis {time_axis}): "
                "one length per sequence.")

        if reverse:
            inputs = jax.tree.map(
                lambda x: flip_sequences(x, seq_lengths, len(batch_dims), time_major), inputs)

        if initial_carry is None:
            if init_key is None:
                init_key = random.PRNGKey(0)
            input_shape = inputs.shape[:time_axis] + inputs.shape[time_axis + 1:]
            initial_carry = self.cell.initialize_carry(init_key, input_shape)

        # Per-step carries are only needed to pick each sequence's carry at its length.
        slice_carry = seq_lengths is not None and return_carry

        def step(cell: Any, carry: Carry, x: Array) -> tuple[Carry, Any]:
            carry, y = cell(carry, x)
            return carry, ((carry, y) if slice_carry else y)

        scan = transforms.scan(
            step,
            variable_axes=self.variable_axes,
            variable_broadcast=self.variable_broadcast,
            variable_carry=self.variable_carry,
            split_rngs=self.split_rngs,
            in_axes=time_axis,
            out_axes=(0, time_axis) if slice_carry else time_axis,
            unroll=self.unroll,
        )
        carry, outputs = scan(self.cell, initial_carry, inputs)
        if slice_carry and seq_lengths is not None:
            carries, outputs = outputs
            carry = _select_last_carry(carries, seq_lengths)
        if reverse and keep_order:
            outputs = jax.tree.map(
                lambda x: flip_sequences(x, seq_lengths, len(batch_dims), time_major), outputs)
        if return_carry:
            return carry, outputs
        return outputs



def _is_size(value: Any) -> bool:
    return isinstance(value, tuple | list) or (
        isinstance(value, int) and not isinstance(value, bool))


def _size_the_cell(cell: Any, size: Any) -> None:
    """Gives a cell built without ``features`` the documented form's ``cell_size``.

    Written into the cell itself (not kept on the RNN): a field survives every clone
    Linen makes of the cell, and the RNN keeps exactly Flax's fields.
    """
    if getattr(cell, "features", 0) is not None:
        return  # the cell's own size decides, as the current API does
    if isinstance(size, tuple | list):
        size = size[-1]
    cell.__dict__["features"] = size


_rnn_fields_init = RNN.__init__


@functools.wraps(_rnn_fields_init)
def _rnn_init(self: RNN, *args: Any, cell_size: Any = None, **kwargs: Any) -> None:
    cell = args[0] if args else kwargs.get("cell")
    if len(args) > 1 and _is_size(args[1]) and getattr(cell, "features", 0) is None:
        # RNN(cell, cell_size): the older positional form, where time_major now sits.
        # Only for a cell without features, which the current form cannot run.
        cell_size, args = args[1], (args[0], *args[2:])
    if cell_size is not None:
        _size_the_cell(cell, cell_size)
    _rnn_fields_init(self, *args, **kwargs)


RNN.__init__ = _rnn_init  # type: ignore[method-assign]


class Bidirectional(Module):
    """Runs one RNN forwards and one backwards over the inputs and merges their outputs.

    ``backward_rnn`` is called with ``reverse=True, keep_order=True`` so both outputs are
    in input order; ``merge_fn`` (default: concatenate on the last axis) combines them.
    With ``return_carry`` the result is ``((carry_forward, carry_backward), outputs)``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> bi = nn.Bidirectional(nn.RNN(nn.GRUCell(3)), nn.RNN(nn.GRUCell(3)))
    >>> x = jnp.ones((2, 5, 4))
    >>> bi.init_with_output(jax.random.PRNGKey(0), x)[0].shape
    (2, 5, 6)
    """

    forward_rnn: Any
    backward_rnn: Any
    merge_fn: Callable[[Array, Array], Array] = _concatenate
    time_major: bool = False
    return_carry: bool = False

    @compact
    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        init_key: PRNGKey | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Any:
        # reverse / keep_order are accepted for signature compatibility with RNN only.
        time_major = self.time_major if time_major is None else time_major
        return_carry = self.return_carry if return_carry is None else return_carry
        key_fwd = key_bwd = None
        if init_key is not None:
            key_fwd, key_bwd = random.split(init_key)
        carry_fwd = carry_bwd = None
        if initial_carry is not None:
            carry_fwd, carry_bwd = initial_carry
        carry_fwd, out_fwd = self.forward_rnn(
            inputs, initial_carry=carry_fwd, init_key=key_fwd, seq_lengths=seq_lengths,
            return_carry=True, time_major=time_major, reverse=False)
        carry_bwd, out_bwd = self.backward_rnn(
            inputs, initial_carry=carry_bwd, init_key=key_bwd, seq_lengths=seq_lengths,
            return_carry=True, time_major=time_major, reverse=True, keep_order=True)
        outputs = jax.tree.map(self.merge_fn, out_fwd, out_bwd)
        if return_carry:
            return (carry_fwd, carry_bwd), outputs
        return outputs
