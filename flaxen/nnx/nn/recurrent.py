"""NNX recurrent layers (today's Flax 0.12.8 API): the cells ``LSTMCell``,
``OptimizedLSTMCell``, ``GRUCell``, ``SimpleCell`` (``cell(carry, x) -> (carry, y)``), the
``RNN`` that scans a cell over a time axis, and ``Bidirectional``.

Cells hold their weights in ``Linear`` submodules (``LSTMCell``: ``ii, if_, ig, io`` on the
input without bias and ``hi, hf, hg, ho`` on the hidden state with bias; the others fuse
the gates in ``dense_i``/``dense_h``), drawing ``rngs.params()`` keys in that order.
``initialize_carry(input_shape, rngs)`` draws its keys from the ``carry`` stream.

``RNN`` runs ``jax.lax.scan`` over the cell's state (split from the object graph, carried
through the steps, written back afterwards). RNG streams named by ``broadcast_rngs`` are
broadcast instead: the stream advances once per call and every step sees the same key (the
same recurrent-dropout mask at every time step).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> rnn = nnx.RNN(nnx.LSTMCell(3, 4, rngs=nnx.Rngs(0)))
>>> rnn(jnp.ones((2, 5, 3))).shape
(2, 5, 4)
"""

from __future__ import annotations

import typing as tp
import warnings
from types import MappingProxyType

import jax
import jax.numpy as jnp

from flaxen.layer_math import initializers
from flaxen.nnx.module import Module
from flaxen.nnx.nn import dtypes
from flaxen.nnx.nn._common import data
from flaxen.nnx.nn.linear import Linear
from flaxen.nnx.rnglib import Rngs, RngStream
from flaxen.typing import Dtype, Initializer, Shape

A = tp.TypeVar("A")
Array = jax.Array
Carry = tp.Any
Output = tp.Any
_NO_META: tp.Mapping[str, tp.Any] = MappingProxyType({})

__all__ = [
    "Bidirectional", "GRUCell", "LSTMCell", "OptimizedLSTMCell", "RNN", "RNNBase", "RNNCellBase",
    "SimpleCell", "flip_sequences",
]

default_kernel_init = initializers.lecun_normal()
default_bias_init = initializers.zeros_init()


def modified_orthogonal(key: Array, shape: Shape, dtype: Dtype = jnp.float32) -> Array:
    """An orthogonal matrix drawn in float32, then cast to ``dtype`` (low-precision safe)."""
    return initializers.orthogonal()(key, shape).astype(dtype)


def _carry_stream(cell: tp.Any, rngs: tp.Any) -> RngStream:
    rngs = cell.rngs if rngs is None else rngs
    if isinstance(rngs, Rngs):
        rngs = rngs.carry
    if rngs is None:
        raise ValueError(
            f"{type(cell).__name__}: RNGs must be provided to initialize the cell carry: pass "
            "initialize_carry(input_shape, nnx.Rngs(carry=0)) (or an RngStream)."
        )
    return rngs


def _keep_stream(cell_name: str, keep_rngs: bool, rngs: Rngs) -> tp.Any:
    if not keep_rngs:
        return data(None)
    warnings.warn(
        f"{cell_name}: keep_rngs is deprecated; pass rngs to initialize_carry instead.",
        DeprecationWarning, stacklevel=3,
    )
    return RngStream.fork(rngs.carry)


def _warn_carry_init(cell_name: str, carry_init: tp.Any) -> None:
    if carry_init is not None:
        warnings.warn(
            f"{cell_name}: carry_init given to the constructor; pass it to initialize_carry "
            "instead (two cells differing only in carry_init get different graphdefs).",
            UserWarning, stacklevel=3,
        )


class RNNCellBase(Module):
    """Base of recurrent cells: ``__call__(carry, inputs) -> (carry, outputs)``,
    ``initialize_carry(input_shape, rngs, carry_init)`` and ``num_feature_axes``."""

    def initialize_carry(
        self, input_shape: tuple[int, ...], rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> Carry:
        raise NotImplementedError

    def __call__(self, carry: Carry, inputs: Array) -> tuple[Carry, Array]:
        raise NotImplementedError

    @property
    def num_feature_axes(self) -> int:
        raise NotImplementedError

    def _carry(self, input_shape: tuple, rngs: tp.Any, carry_init: tp.Any, n: int) -> list:
        stream = _carry_stream(self, rngs)
        init = carry_init or self.carry_init or initializers.zeros_init()
        shape = tuple(input_shape[:-1]) + (self.hidden_features,)
        return [init(stream(), shape, self.param_dtype) for _ in range(n)]


def _linear(
    cell: tp.Any, n_in: int, n_out: int, rngs: Rngs, kernel_init: Initializer,
    kernel_metadata: tp.Mapping[str, tp.Any], bias_init: Initializer | None = None,
    bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
) -> Linear:
    """A ``Linear`` of ``cell``'s dtypes; it has a bias exactly when ``bias_init`` is given."""
    bias: dict[str, tp.Any] = (
        {} if bias_init is None else {"bias_init": bias_init, "bias_metadata": bias_metadata}
    )
    return Linear(
        n_in, n_out, use_bias=bias_init is not None, kernel_init=kernel_init, dtype=cell.dtype,
        param_dtype=cell.param_dtype, promote_dtype=cell.promote_dtype, rngs=rngs,
        kernel_metadata=kernel_metadata, **bias,
    )


class _HiddenCarry(RNNCellBase):
    """A cell whose carry is the hidden state ``h`` alone."""

    def initialize_carry(
        self, input_shape: tuple[int, ...], rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> Array:
        """``h`` of shape ``input_shape[:-1] + (hidden_features,)`` (zeros by default)."""
        return self._carry(input_shape, rngs, carry_init, 1)[0]


class _GatedCellBase(RNNCellBase):
    """The constructor the gated cells share; each builds its projections in ``_build``."""

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: tp.Callable[..., tp.Any] = jax.nn.sigmoid,
        activation_fn: tp.Callable[..., tp.Any] = jnp.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = initializers.orthogonal(),
        bias_init: Initializer = initializers.zeros_init(),
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: tp.Callable[..., tp.Any] = dtypes.promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        recurrent_kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        self._common(in_features, hidden_features, gate_fn, activation_fn, dtype, param_dtype,
                     carry_init, promote_dtype, keep_rngs, rngs)
        self._build(rngs, (kernel_init, kernel_metadata),
                    (recurrent_kernel_init, recurrent_kernel_metadata), (bias_init, bias_metadata))
        # after the projections, as Flax orders the attributes (repr / treescope)
        self.carry_init = carry_init

    def _common(self, in_features, hidden_features, gate_fn, activation_fn, dtype,
                param_dtype, carry_init, promote_dtype, keep_rngs, rngs) -> None:
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype
        self.rngs = _keep_stream(type(self).__name__, keep_rngs, rngs)
        _warn_carry_init(type(self).__name__, carry_init)

    def _build(self, rngs: Rngs, kernel: tuple, recurrent: tuple, bias: tuple) -> None:
        """Creates the ``Linear`` submodules from ``(init, metadata)`` pairs, in key order."""
        raise NotImplementedError

    @property
    def num_feature_axes(self) -> int:
        return 1


class _LSTMBase(_GatedCellBase):
    """An LSTM: carry ``(c, h)``, output ``h``."""

    def initialize_carry(
        self, input_shape: tuple[int, ...], rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> tuple[Array, Array]:
        """``(c, h)`` of shape ``input_shape[:-1] + (hidden_features,)`` (zeros by default)."""
        c, h = self._carry(input_shape, rngs, carry_init, 2)
        return c, h


class LSTMCell(_LSTMBase):
    """Long short-term memory cell; carry ``(c, h)``, output ``h``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> cell = nnx.LSTMCell(3, 4, rngs=nnx.Rngs(0))
    >>> carry = cell.initialize_carry((2, 3), nnx.Rngs(0))
    >>> cell(carry, jnp.ones((2, 3)))[1].shape
    (2, 4)
    """

    # the gated cells' constructor with Flax's LSTMCell default for recurrent_kernel_init
    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: tp.Callable[..., tp.Any] = jax.nn.sigmoid,
        activation_fn: tp.Callable[..., tp.Any] = jnp.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = modified_orthogonal,
        bias_init: Initializer = initializers.zeros_init(),
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: tp.Callable[..., tp.Any] = dtypes.promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        recurrent_kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        super().__init__(
            in_features, hidden_features, gate_fn=gate_fn, activation_fn=activation_fn,
            kernel_init=kernel_init, recurrent_kernel_init=recurrent_kernel_init,
            bias_init=bias_init, dtype=dtype, param_dtype=param_dtype, carry_init=carry_init,
            promote_dtype=promote_dtype, keep_rngs=keep_rngs, rngs=rngs,
            kernel_metadata=kernel_metadata, recurrent_kernel_metadata=recurrent_kernel_metadata,
            bias_metadata=bias_metadata,
        )

    def _build(self, rngs: Rngs, kernel: tuple, recurrent: tuple, bias: tuple) -> None:
        n_in, n_h = self.in_features, self.hidden_features
        self.ii, self.if_, self.ig, self.io = (
            _linear(self, n_in, n_h, rngs, *kernel) for _ in range(4)
        )
        self.hi, self.hf, self.hg, self.ho = (
            _linear(self, n_h, n_h, rngs, *recurrent, *bias) for _ in range(4)
        )

    def __call__(self, carry: tuple[Array, Array], inputs: Array
                 ) -> tuple[tuple[Array, Array], Array]:
        c, h = carry
        i = self.gate_fn(self.ii(inputs) + self.hi(h))
        f = self.gate_fn(self.if_(inputs) + self.hf(h))
        g = self.activation_fn(self.ig(inputs) + self.hg(h))
        o = self.gate_fn(self.io(inputs) + self.ho(h))
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h


class OptimizedLSTMCell(_LSTMBase):
    """An LSTM cell computing the four gates with two fused ``Linear``s (``dense_i`` without
    bias, ``dense_h`` with bias), each of ``4 * hidden_features`` outputs."""

    def _build(self, rngs: Rngs, kernel: tuple, recurrent: tuple, bias: tuple) -> None:
        n_in, n_h = self.in_features, self.hidden_features
        self.dense_i = _linear(self, n_in, 4 * n_h, rngs, *kernel)
        self.dense_h = _linear(self, n_h, 4 * n_h, rngs, *recurrent, *bias)

    def __call__(self, carry: tuple[Array, Array], inputs: Array
                 ) -> tuple[tuple[Array, Array], Array]:
        c, h = carry
        i, f, g, o = jnp.split(self.dense_i(inputs) + self.dense_h(h), 4, axis=-1)
        new_c = self.gate_fn(f) * c + self.gate_fn(i) * self.activation_fn(g)
        new_h = self.gate_fn(o) * self.activation_fn(new_c)
        return (new_c, new_h), new_h


class SimpleCell(_HiddenCarry):
    """``h' = activation(dense_i(x) + dense_h(h) [+ h if residual])``; carry and output ``h'``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Dtype = jnp.float32,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        residual: bool = False,
        activation_fn: tp.Callable[..., tp.Any] = jnp.tanh,
        kernel_init: Initializer = initializers.lecun_normal(),
        recurrent_kernel_init: Initializer = initializers.orthogonal(),
        bias_init: Initializer = initializers.zeros_init(),
        promote_dtype: tp.Callable[..., tp.Any] = dtypes.promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        recurrent_kernel_metadata: tp.Mapping[str, tp.Any] = _NO_META,
        bias_metadata: tp.Mapping[str, tp.Any] = _NO_META,
    ) -> None:
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.residual = residual
        self.activation_fn = activation_fn
        self.promote_dtype = promote_dtype
        self.rngs = _keep_stream("SimpleCell", keep_rngs, rngs)
        # dense_h first: Flax draws the recurrent kernel's key before the input kernel's
        self.dense_h = _linear(
            self, hidden_features, hidden_features, rngs, recurrent_kernel_init,
            recurrent_kernel_metadata,
        )
        self.dense_i = _linear(
            self, in_features, hidden_features, rngs, kernel_init, kernel_metadata, bias_init,
            bias_metadata,
        )
        _warn_carry_init("SimpleCell", carry_init)
        self.carry_init = carry_init

    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        new_carry = self.dense_i(inputs) + self.dense_h(carry)
        if self.residual:
            new_carry += carry
        new_carry = self.activation_fn(new_carry)
        return new_carry, new_carry

    @property
    def num_feature_axes(self) -> int:
        return 1


class GRUCell(_GatedCellBase, _HiddenCarry):
    """Gated recurrent unit; ``dense_i`` (with bias) and ``dense_h`` (without) each give the
    ``r, z, n`` gates (``3 * hidden_features`` outputs); carry and output ``h``."""

    def _build(self, rngs: Rngs, kernel: tuple, recurrent: tuple, bias: tuple) -> None:
        n_in, n_h = self.in_features, self.hidden_features
        self.dense_i = _linear(self, n_in, 3 * n_h, rngs, *kernel, *bias)
        self.dense_h = _linear(self, n_h, 3 * n_h, rngs, *recurrent)

    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        h = carry
        xi_r, xi_z, xi_n = jnp.split(self.dense_i(inputs), 3, axis=-1)
        hh_r, hh_z, hh_n = jnp.split(self.dense_h(h), 3, axis=-1)
        r = self.gate_fn(xi_r + hh_r)
        z = self.gate_fn(xi_z + hh_z)
        n = self.activation_fn(xi_n + r * hh_n)
        new_h = (1.0 - z) * n + z * h
        return new_h, new_h


from flaxen.nnx.nn._rnn import RNN, Bidirectional, RNNBase, flip_sequences  # noqa: E402

# Flax's private helpers of the same module (Bidirectional's default merge_fn, the carry pick
# of RNN with seq_lengths): some user code imports them from here
from flaxen.nnx.nn._rnn import _concatenate as _concatenate  # noqa: E402
from flaxen.nnx.nn._rnn import _select_last_carry as _select_last_carry  # noqa: E402
