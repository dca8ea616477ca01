"""Recurrent cells: one step of an RNN, ``(carry, inputs) -> (new_carry, outputs)``.

Re-exported from ``flaxen.linen.recurrent``. Parameter names, shapes and initializer
calls are Flax's, so the same key gives the same parameters.

Two forms of ``initialize_carry`` are accepted, per the version policy: today's
``cell.initialize_carry(rng, input_shape)`` on a cell built with ``features``, and the
documented ``Cell.initialize_carry(rng, batch_dims, size, init_fn=zeros)`` called on the
class (or on an instance with those arguments).

>>> import jax, jax.numpy as jnp
>>> from flaxen.linen.recurrent import LSTMCell
>>> cell = LSTMCell(features=4)
>>> x = jnp.ones((2, 3))
>>> carry = cell.initialize_carry(jax.random.PRNGKey(0), x.shape)
>>> (c, h), y = cell.apply(cell.init(jax.random.PRNGKey(1), carry, x), carry, x)
>>> y.shape
(2, 4)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import random

from flaxen.linen import _conv_math as cm
from flaxen.linen import initializers
from flaxen.linen._layer_errors import LayerRankError, LayerShapeError
from flaxen.linen.activation import sigmoid, tanh
from flaxen.linen.dtypes import promote_dtype
from flaxen.linen.linear import Conv, Dense, default_kernel_init
from flaxen.linen.module import Module, compact, nowrap

Array = jax.Array
Dtype = Any
PRNGKey = Any
Initializer = initializers.Initializer
PrecisionLike = Any
Carry = Any

__all__ = [
    "ConvLSTMCell",
    "DenseParams",
    "GRUCell",
    "LSTMCell",
    "MGUCell",
    "OptimizedLSTMCell",
    "RNNCellBase",
    "SimpleCell",
]


def _documented_pair(cls, rng, batch_dims, size, init_fn=initializers.zeros_init()):
    key1, key2 = random.split(rng)
    shape = tuple(batch_dims) + _as_tuple(size)
    return init_fn(key1, shape), init_fn(key2, shape)


def _documented_single(cls, rng, batch_dims, size, init_fn=initializers.zeros_init()):
    return init_fn(rng, tuple(batch_dims) + _as_tuple(size))


def _as_tuple(size: int | Sequence[int]) -> tuple[int, ...]:
    return tuple(size) if isinstance(size, Sequence) else (size,)


class _CarryInit:
    """``initialize_carry`` that serves both the current and the documented form.

    On the class it is the documented static ``(rng, batch_dims, size, init_fn=zeros)``;
    on an instance, ``(rng, input_shape)`` unless ``size`` / ``batch_dims`` are given.
    """

    def __init__(self, current: Callable[..., Any], documented: Callable[..., Any]) -> None:
        self.current = current
        self.documented = documented
        self.__doc__ = current.__doc__
        self.__name__ = "initialize_carry"

    def __get__(self, obj: Any, cls: type) -> Callable[..., Any]:
        if obj is None:
            return functools.partial(self.documented, cls)

        def initialize_carry(rng: PRNGKey, *args: Any, **kwargs: Any) -> Any:
            if len(args) >= 2 or "size" in kwargs or "batch_dims" in kwargs:
                return self.documented(type(obj), rng, *args, **kwargs)
            return self.current(obj, rng, *args, **kwargs)

        initialize_carry.__doc__ = self.current.__doc__
        return initialize_carry


def _carry_init(documented: Callable[..., Any]):
    return lambda current: _CarryInit(current, documented)


class RNNCellBase(Module):
    """Base class of recurrent cells: ``__call__(carry, inputs) -> (carry, outputs)``.

    Subclasses define ``initialize_carry(rng, input_shape)`` and ``num_feature_axes``
    (how many trailing input axes are features: 1, or more for convolutional cells).

    >>> from flaxen.linen.recurrent import GRUCell, RNNCellBase
    >>> issubclass(GRUCell, RNNCellBase)
    True
    """

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Carry:
        raise NotImplementedError(
            f"{type(self).__name__} does not define initialize_carry(rng, input_shape); "
            "RNN cells must implement it to build their initial state.")

    @property
    def num_feature_axes(self) -> int:
        raise NotImplementedError(
            f"{type(self).__name__} does not define num_feature_axes (the number of "
            "trailing feature axes of its inputs).")


def _features_of(cell: Any) -> int:
    if cell.features is None:
        raise ValueError(
            f"{type(cell).__name__}.initialize_carry(rng, input_shape) needs the cell's "
            f"features, but it was built without them. Build it as "
            f"{type(cell).__name__}(features=...), or call the documented form "
            f"{type(cell).__name__}.initialize_carry(rng, batch_dims, size).")
    return cell.features


class _CarryShapeError(LayerShapeError, TypeError):
    """A carry whose feature size is not the cell's ``features``.

    Also a ``TypeError``: where Flax fails on such a carry, it fails with one.
    """


def _check_carry(cell: Any, **parts: Array) -> None:
    """With ``features`` set, each carry part must be ``[..., features]``."""
    if cell.features is None:
        return
    for name, part in parts.items():
        shape = jnp.shape(part)
        if not shape or shape[-1] != cell.features:
            expected = "[batch..., *spatial, features]" if isinstance(
                cell, ConvLSTMCell) else "[batch..., features]"
            raise _CarryShapeError(
                f"{type(cell).__name__}: carry {name} must have shape {expected} with "
                f"features={cell.features}, but got shape {shape}. Build the carry with "
                f"cell.initialize_carry(rng, inputs.shape), or give the cell "
                f"features={shape[-1] if shape else '...'}.")


def _require_feature_axis(cell: Any, inputs: Array) -> None:
    if jnp.ndim(inputs) < 1:
        raise LayerRankError(
            f"{type(cell).__name__}: inputs must be [batch..., features] (at least 1 "
            f"dimension), but got shape {jnp.shape(inputs)}.")


class LSTMCell(RNNCellBase):
    r"""Long short-term memory cell; carry ``(c, h)``, output ``h``.

    ``i = gate_fn(W_ii x + W_hi h + b_hi)``, ``f``, ``o`` alike, ``g = activation_fn(W_ig x
    + W_hg h + b_hg)``, ``c' = f * c + i * g``, ``h' = o * activation_fn(c')``. Input
    kernels ``ii``/``if``/``ig``/``io`` have no bias; hidden ones ``hi``/``hf``/``hg``/
    ``ho`` do.

    >>> import jax, jax.numpy as jnp
    >>> cell = LSTMCell(features=3)
    >>> carry = cell.initialize_carry(jax.random.PRNGKey(0), (2, 5))
    >>> [a.shape for a in carry]
    [(2, 3), (2, 3)]
    """

    features: int | None = None
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, carry: tuple[Array, Array], inputs: Array
                 ) -> tuple[tuple[Array, Array], Array]:
        _require_feature_axis(self, inputs)
        c, h = carry
        _check_carry(self, c=c, h=h)
        hidden = h.shape[-1]
        dense_h = functools.partial(
            Dense, features=hidden, use_bias=True, kernel_init=self.recurrent_kernel_init,
            bias_init=self.bias_init, dtype=self.dtype, param_dtype=self.param_dtype)
        dense_i = functools.partial(
            Dense, features=hidden, use_bias=False, kernel_init=self.kernel_init,
            dtype=self.dtype, param_dtype=self.param_dtype)
        i = self.gate_fn(dense_i(name="ii")(inputs) + dense_h(name="hi")(h))
        f = self.gate_fn(dense_i(name="if")(inputs) + dense_h(name="hf")(h))
        g = self.activation_fn(dense_i(name="ig")(inputs) + dense_h(name="hg")(h))
        o = self.gate_fn(dense_i(name="io")(inputs) + dense_h(name="ho")(h))
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h

    @_carry_init(_documented_pair)
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> tuple[Array, Array]:
        """The initial ``(c, h)`` for inputs of shape ``[batch..., features]``."""
        shape = tuple(input_shape[:-1]) + (_features_of(self),)
        key1, key2 = random.split(rng)
        return (self.carry_init(key1, shape, self.param_dtype),
                self.carry_init(key2, shape, self.param_dtype))

    @property
    def num_feature_axes(self) -> int:
        return 1


class DenseParams(Module):
    """Creates the parameters of a :class:`~flaxen.linen.Dense` layer without applying them
    (``OptimizedLSTMCell`` concatenates several such kernels into one matmul).

    >>> import jax, jax.numpy as jnp
    >>> k, b = DenseParams(4).init_with_output(jax.random.key(0), jnp.ones((2, 3)))[0]
    >>> k.shape, b.shape
    ((3, 4), (4,))
    """

    features: int
    use_bias: bool = True
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, inputs: Array) -> tuple[Array, Array | None]:
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features),
                            self.param_dtype)
        bias = (self.param("bias", self.bias_init, (self.features,), self.param_dtype)
                if self.use_bias else None)
        return kernel, bias


class OptimizedLSTMCell(RNNCellBase):
    """An ``LSTMCell`` that runs its four gates as one matmul per input.

    Same fields, parameters (names, shapes, values) and math as :class:`LSTMCell` (but, as
    in Flax, not a subclass of it); the gate kernels are concatenated so each step does two
    matmuls instead of eight.

    >>> import jax, jax.numpy as jnp
    >>> cell = OptimizedLSTMCell(features=3)
    >>> carry = cell.initialize_carry(jax.random.PRNGKey(0), (2, 5))
    >>> variables = cell.init(jax.random.PRNGKey(1), carry, jnp.ones((2, 5)))
    >>> sorted(variables['params'])
    ['hf', 'hg', 'hi', 'ho', 'if', 'ig', 'ii', 'io']
    """

    features: int | None = None
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    # the carry is LSTMCell's (c, h)
    initialize_carry = LSTMCell.__dict__["initialize_carry"]
    num_feature_axes = LSTMCell.__dict__["num_feature_axes"]

    @compact
    def __call__(self, carry: tuple[Array, Array], inputs: Array
                 ) -> tuple[tuple[Array, Array], Array]:
        _require_feature_axis(self, inputs)
        c, h = carry
        _check_carry(self, c=c, h=h)
        hidden = h.shape[-1]
        in_params, h_params = [], []
        # Gate by gate, input part then hidden part: Flax's creation order, which is the
        # key order of the params dict.
        for gate in ("i", "f", "g", "o"):
            in_params.append(DenseParams(hidden, use_bias=False, param_dtype=self.param_dtype,
                                         kernel_init=self.kernel_init, name=f"i{gate}")(inputs))
            h_params.append(DenseParams(hidden, use_bias=True, param_dtype=self.param_dtype,
                                        kernel_init=self.recurrent_kernel_init,
                                        bias_init=self.bias_init, name=f"h{gate}")(h))
        x_all = self._fused(inputs, in_params, use_bias=False)
        h_all = self._fused(h, h_params, use_bias=True)
        i, f, g, o = (x_all[n] + h_all[n] for n in range(4))
        i, f, g, o = self.gate_fn(i), self.gate_fn(f), self.activation_fn(g), self.gate_fn(o)
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h

    @nowrap
    def _fused(self, x: Array, params: list, use_bias: bool) -> list[Array]:
        kernel = jnp.concatenate([k for k, _ in params], axis=-1)
        bias = jnp.concatenate([b for _, b in params], axis=-1) if use_bias else None
        x, kernel, bias = promote_dtype(x, kernel, bias, dtype=self.dtype)
        y = jnp.dot(x, kernel)
        if bias is not None:
            y = y + bias.reshape((1,) * (y.ndim - 1) + (-1,))
        return jnp.split(y, len(params), axis=-1)


class GRUCell(RNNCellBase):
    r"""Gated recurrent unit; carry and output ``h``.

    ``r = gate_fn(W_ir x + b_ir + W_hr h)``, ``z`` alike, ``n = activation_fn(W_in x +
    b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.

    >>> import jax, jax.numpy as jnp
    >>> cell = GRUCell(features=3)
    >>> h = cell.initialize_carry(jax.random.PRNGKey(0), (2, 5))
    >>> h.shape
    (2, 3)
    """

    features: int | None = None
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        _require_feature_axis(self, inputs)
        h = carry
        _check_carry(self, h=h)
        hidden = h.shape[-1]
        dense_h = functools.partial(
            Dense, features=hidden, use_bias=False, kernel_init=self.recurrent_kernel_init,
            bias_init=self.bias_init, dtype=self.dtype, param_dtype=self.param_dtype)
        dense_i = functools.partial(
            Dense, features=hidden, use_bias=True, kernel_init=self.kernel_init,
            bias_init=self.bias_init, dtype=self.dtype, param_dtype=self.param_dtype)
        r = self.gate_fn(dense_i(name="ir")(inputs) + dense_h(name="hr")(h))
        z = self.gate_fn(dense_i(name="iz")(inputs) + dense_h(name="hz")(h))
        n = self.activation_fn(
            dense_i(name="in")(inputs) + r * dense_h(name="hn", use_bias=True)(h))
        new_h = (1.0 - z) * n + z * h
        return new_h, new_h

    @_carry_init(_documented_single)
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Array:
        """The initial ``h`` for inputs of shape ``[batch..., features]``."""
        shape = tuple(input_shape[:-1]) + (_features_of(self),)
        return self.carry_init(rng, shape, self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1


class MGUCell(RNNCellBase):
    r"""Minimal gated unit; carry and output ``h``.

    ``f = gate_fn(W_if x + b_if + W_hf h)``, ``n = activation_fn(W_in x + b_in + f * (W_hn
    h + b_hn))`` (without the ``f *`` and ``b_hn`` when ``reset_gate=False``),
    ``h' = (1 - f) * n + f * h``. The forget bias starts at ones.

    >>> import jax, jax.numpy as jnp
    >>> MGUCell(features=3).initialize_carry(jax.random.PRNGKey(0), (2, 5)).shape
    (2, 3)
    """

    features: int | None = None
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    forget_bias_init: Initializer = initializers.ones_init()
    activation_bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()
    reset_gate: bool = True

    @compact
    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        _require_feature_axis(self, inputs)
        h = carry
        _check_carry(self, h=h)
        hidden = h.shape[-1]
        dense_h = functools.partial(
            Dense, features=hidden, use_bias=False, kernel_init=self.recurrent_kernel_init,
            dtype=self.dtype, param_dtype=self.param_dtype)
        dense_i = functools.partial(
            Dense, features=hidden, use_bias=True, kernel_init=self.kernel_init,
            dtype=self.dtype, param_dtype=self.param_dtype)
        f = self.gate_fn(dense_i(name="if", bias_init=self.forget_bias_init)(inputs)
                         + dense_h(name="hf")(h))
        # ``hn`` before ``in``: Flax's creation order, hence its params key order.
        if self.reset_gate:
            h_n = f * dense_h(name="hn", use_bias=True, bias_init=self.activation_bias_init)(h)
        else:
            h_n = dense_h(name="hn")(h)
        x_n = dense_i(name="in", bias_init=self.activation_bias_init)(inputs)
        n = self.activation_fn(x_n + h_n)
        new_h = (1.0 - f) * n + f * h
        return new_h, new_h

    @_carry_init(_documented_single)
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Array:
        """The initial ``h`` for inputs of shape ``[batch..., features]``."""
        shape = tuple(input_shape[:-1]) + (_features_of(self),)
        return self.carry_init(rng, shape, self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1


class SimpleCell(RNNCellBase):
    r"""Elman cell: ``h' = activation_fn(W_i x + b_i + W_h h)``; ``residual`` adds ``h`` inside.

    >>> import jax, jax.numpy as jnp
    >>> SimpleCell(features=3).initialize_carry(jax.random.PRNGKey(0), (2, 5)).shape
    (2, 3)
    """

    features: int | None = None
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()
    residual: bool = False

    @compact
    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        _require_feature_axis(self, inputs)
        h = carry
        _check_carry(self, h=h)
        hidden = h.shape[-1]
        dense_h = functools.partial(
            Dense, features=hidden, use_bias=False, kernel_init=self.recurrent_kernel_init,
            dtype=self.dtype, param_dtype=self.param_dtype)
        dense_i = functools.partial(
            Dense, features=hidden, use_bias=True, kernel_init=self.kernel_init,
            bias_init=self.bias_init, dtype=self.dtype, param_dtype=self.param_dtype)
        pre = dense_i(name="i")(inputs) + dense_h(name="h")(h)
        if self.residual:
            pre = pre + h
        new_h = self.activation_fn(pre)
        return new_h, new_h

    @_carry_init(_documented_single)
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Array:
        """The initial ``h`` for inputs of shape ``[batch..., features]``."""
        shape = tuple(input_shape[:-1]) + (_features_of(self),)
        return self.carry_init(rng, shape, self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1


class ConvLSTMCell(RNNCellBase):
    r"""Convolutional LSTM cell; carry ``(c, h)`` of shape ``[batch..., *spatial, features]``.

    The input-to-hidden (``ih``) and hidden-to-hidden (``hh``) maps are ``Conv`` layers
    with ``4 * features`` outputs split into ``i, g, f, o`` gates; the forget gate gets a
    ``+1`` bias. ``num_feature_axes`` is ``len(kernel_size) + 1``. As for ``Conv``, an
    int ``kernel_size`` means a 1-D convolution, and is an error on inputs with more
    spatial axes.

    >>> import jax, jax.numpy as jnp
    >>> cell = ConvLSTMCell(features=4, kernel_size=(3, 3))
    >>> c, h = cell.initialize_carry(jax.random.PRNGKey(0), (2, 8, 8, 3))
    >>> h.shape
    (2, 8, 8, 4)
    """

    features: int
    kernel_size: Sequence[int]
    strides: Sequence[int] | None = None
    padding: str | Sequence[tuple[int, int]] = "SAME"
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, carry: tuple[Array, Array], inputs: Array
                 ) -> tuple[tuple[Array, Array], Array]:
        kernel_size = cm.kernel_size_tuple(self.kernel_size, jnp.ndim(inputs), "ConvLSTMCell")
        c, h = carry
        _check_carry(self, c=c, h=h)
        features = h.shape[-1]
        conv = functools.partial(
            Conv, features=4 * features, kernel_size=kernel_size, strides=self.strides,
            padding=self.padding, use_bias=self.use_bias, dtype=self.dtype,
            param_dtype=self.param_dtype)
        gates = conv(name="ih")(inputs) + conv(name="hh")(h)
        i, g, f, o = jnp.split(gates, 4, axis=-1)
        f = sigmoid(f + 1)
        new_c = f * c + sigmoid(i) * jnp.tanh(g)
        new_h = sigmoid(o) * jnp.tanh(new_c)
        return (new_c, new_h), new_h

    @_carry_init(_documented_pair)
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> tuple[Array, Array]:
        """The initial ``(c, h)`` for inputs ``[batch..., *spatial, in_features]``."""
        kernel_size = cm.kernel_size_tuple(self.kernel_size, len(input_shape), "ConvLSTMCell")
        n = len(kernel_size) + 1
        shape = tuple(input_shape[:-1]) + (_features_of(self),)
        if len(input_shape) < n:
            raise LayerRankError(
                f"ConvLSTMCell.initialize_carry: input_shape {tuple(input_shape)} must have "
                f"at least num_feature_axes={n} axes (spatial axes for kernel_size "
                f"{kernel_size} plus features).")
        key1, key2 = random.split(rng)
        return (self.carry_init(key1, shape, self.param_dtype),
                self.carry_init(key2, shape, self.param_dtype))

    @property
    def num_feature_axes(self) -> int:
        # An int kernel_size means one spatial axis, as for Conv.
        return len(cm.kernel_size_tuple(self.kernel_size, 3, "ConvLSTMCell")) + 1
