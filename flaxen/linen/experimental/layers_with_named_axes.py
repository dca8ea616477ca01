"""Linen layers that name the logical axes of their parameters (the legacy partitioning API).

``Dense``, ``Embed`` and ``LayerNorm`` here create every parameter through
:func:`flaxen.linen.partitioning.param_with_axes`: the array goes to ``params`` and its
logical axis names to ``params_axes/<name>_axes``, ready for
:func:`flaxen.linen.partitioning.get_axis_names` and the logical-to-mesh rules. Outside a
mesh with rules in force the layers compute exactly what their plain counterparts do. The
API is experimental, as in Flax; prefer :mod:`flaxen.linen` for everyday use.

>>> import jax, jax.numpy as jnp
>>> from flaxen.linen.experimental import layers_with_named_axes as nla
>>> layer = nla.Dense(features=4, kernel_axes=('embed', 'mlp'))
>>> y, variables = layer.init_with_output(jax.random.key(0), jnp.ones((2, 3)))
>>> y.shape, variables['params']['kernel'].shape
((2, 4), (3, 4))
>>> variables['params_axes']['kernel_axes'].names, variables['params_axes']['bias_axes'].names
(('embed', 'mlp'), ('mlp',))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from flaxen import linen as nn
from flaxen.linen import initializers
from flaxen.linen.partitioning import param_with_axes, with_sharding_constraint
from flaxen.typing import Array, Axes, DotGeneralT, Dtype, Initializer, PrecisionLike

Activation = Callable[..., Array]

# Dense kernels: LeCun normal (fan-in scaled). Embedding tables: unit variance per row, the
# table's first axis being its "output" axis.
default_kernel_init = initializers.lecun_normal()
default_embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)


class Dense(nn.Module):
    """``y = x @ kernel + bias`` over the last axis, with named parameter axes.

    The kernel has shape ``(x.shape[-1], features)`` and the logical axis names
    ``kernel_axes``; the bias (when ``use_bias``) has shape ``(features,)`` and is named after
    the last entry of ``kernel_axes``, so ``use_bias=True`` needs a non-empty ``kernel_axes``
    (``IndexError`` otherwise, as in Flax). Inputs and parameters are cast to ``dtype`` before
    the product; parameters are stored in ``param_dtype``. The product is
    ``dot_general_cls()`` when that is set, else ``dot_general`` when set, else
    ``jax.lax.dot_general``, called with ``precision``.

    Attributes:
      features: size of the output's last axis.
      use_bias: whether a bias is added.
      dtype: dtype the computation runs in (and of the result).
      param_dtype: dtype the parameters are created in.
      precision: ``jax.lax.Precision`` (or a pair of them) for the product.
      kernel_init: initializer of the kernel.
      bias_init: initializer of the bias.
      kernel_axes: logical names of the kernel's two axes (input, output).
      dot_general: a replacement for ``jax.lax.dot_general`` (deprecated in Flax).
      dot_general_cls: a zero-argument factory returning such a replacement.
    """

    features: int
    use_bias: bool = True
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    precision: PrecisionLike = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()
    kernel_axes: tuple[str, ...] = ()
    dot_general: DotGeneralT | None = None
    dot_general_cls: Any = None

    @nn.compact
    def __call__(self, inputs: Array) -> Array:
        """Returns ``inputs`` transformed along its last axis: shape ``(..., features)``."""
        inputs = jnp.asarray(inputs, self.dtype)
        kernel = param_with_axes(
            "kernel",
            self.kernel_init,
            (inputs.shape[-1], self.features),
            self.param_dtype,
            axes=self.kernel_axes,
        )
        kernel = jnp.asarray(kernel, self.dtype)
        if self.dot_general_cls is not None:
            contract = self.dot_general_cls()
        else:
            contract = self.dot_general if self.dot_general is not None else lax.dot_general
        y = contract(
            inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())), precision=self.precision
        )
        if not self.use_bias:
            return y
        if not self.kernel_axes:
            raise IndexError(
                f"Dense(use_bias=True) names its bias after the last of kernel_axes, but "
                f"kernel_axes is {self.kernel_axes!r}; give kernel_axes=(in_name, out_name) "
                "or use_bias=False."
            )
        bias = param_with_axes(
            "bias",
            self.bias_init,
            (self.features,),
            self.param_dtype,
            axes=(self.kernel_axes[-1],),
        )
        bias = jnp.asarray(bias, self.dtype)
        return y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))


class Embed(nn.Module):
    """A lookup table ``(num_embeddings, features)`` whose axes are named ``('vocab', 'embed')``.

    Calling it maps an integer array of any shape to ``inputs.shape + (features,)`` rows of
    the table (cast to ``dtype``); non-integer inputs raise ``ValueError`` unless
    ``cast_input_dtype`` casts them first. With ``one_hot`` the rows are gathered by a
    product with one-hot vectors instead of indexing (friendlier to SPMD partitioning);
    otherwise the result is constrained to the logical axes ``('batch', 'length', 'embed')``
    (a no-op unless axis rules and a mesh are in force). :meth:`attend` scores queries
    against every row.

    Attributes:
      num_embeddings: number of rows of the table.
      features: size of each row.
      cast_input_dtype: dtype the inputs are cast to before the lookup (if set).
      dtype: dtype of the rows returned.
      param_dtype: dtype the table is created in.
      attend_dtype: dtype the table is cast to in :meth:`attend` (``dtype`` when None).
      embedding_init: initializer of the table.
      one_hot: gather by one-hot product rather than by indexing.
    """

    num_embeddings: int
    features: int
    cast_input_dtype: Dtype | None = None
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    attend_dtype: Dtype | None = None
    embedding_init: Initializer = default_embed_init
    one_hot: bool = False
    embedding: Array = dataclasses.field(init=False)

    def setup(self) -> None:
        self.embedding = param_with_axes(
            "embedding",
            self.embedding_init,
            (self.num_embeddings, self.features),
            self.param_dtype,
            axes=("vocab", "embed"),
        )

    def __call__(self, inputs: Array) -> Array:
        """Returns the table rows at ``inputs`` (integers): shape ``inputs.shape + (features,)``.

        Raises:
          ValueError: if ``inputs`` (after ``cast_input_dtype``) is not of an integer dtype.
        """
        # Flax tests the truthiness of the dtype; the same test keeps the same behaviour.
        if self.cast_input_dtype:
            inputs = inputs.astype(self.cast_input_dtype)
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError(
                "Input type must be an integer or unsigned integer. This Embed got inputs of "
                f"dtype {jnp.dtype(inputs.dtype).name}; cast them (or set cast_input_dtype)."
            )
        table = jnp.asarray(self.embedding, self.dtype)
        if self.one_hot:
            ids = lax.iota(jnp.int32, self.num_embeddings)
            hot = jnp.array(inputs[..., jnp.newaxis] == ids, dtype=self.dtype)
            return jnp.dot(hot, table)
        return with_sharding_constraint(table[inputs], ("batch", "length", "embed"))

    def attend(self, query: Array) -> Array:
        """Returns ``query @ embedding.T``: shape ``query.shape[:-1] + (num_embeddings,)``.

        ``query``'s last axis must have size ``features``. The table is cast to
        ``attend_dtype`` (or ``dtype``); the query is used as given. Typically gives output
        logits from a table shared with the input embedding.
        """
        dtype = self.dtype if self.attend_dtype is None else self.attend_dtype
        return jnp.dot(query, jnp.asarray(self.embedding, dtype).T)


def _canonicalize_axes(rank: int, axes: Axes) -> Sequence[int]:
    """``axes`` (an int or ints, negatives counting from the end) as sorted distinct ints."""
    many = axes if isinstance(axes, Iterable) else (axes,)
    return tuple(sorted({a + rank if a < 0 else a for a in many}))


def _abs_sq(x: Array) -> Array:
    """``|x| ** 2`` element by element (real part squared plus imaginary part squared)."""
    if jnp.iscomplexobj(x):
        return lax.square(lax.real(x)) + lax.square(lax.imag(x))
    return lax.square(x)


def _compute_stats(x: Array, axes: Axes) -> tuple[Array, Array]:
    """Mean and variance of ``x`` over ``axes``, in at least float32.

    The variance is ``E[|x|^2] - |E[x]|^2``, clipped at zero against round-off.
    """
    x = jnp.asarray(x, jnp.promote_types(jnp.float32, jnp.result_type(x)))
    mean = jnp.mean(x, axes)
    second_moment = jnp.mean(_abs_sq(x), axes)
    return mean, jnp.maximum(0.0, second_moment - _abs_sq(mean))


def _normalize(
    mdl: nn.Module,
    x: Array,
    mean: Array,
    var: Array,
    reduction_axes: Axes,
    feature_axes: Axes,
    dtype: Dtype,
    param_dtype: Dtype,
    epsilon: float,
    use_bias: bool,
    use_scale: bool,
    bias_init: Initializer,
    scale_init: Initializer,
) -> Array:
    """``(x - mean) / sqrt(var + epsilon)``, then times ``scale`` and plus ``bias``, as ``dtype``.

    ``mean``/``var`` are the statistics over ``reduction_axes``. ``scale`` and ``bias`` are
    parameters of ``mdl`` with one value per position of ``feature_axes``, named
    ``('embed',)``, created in ``param_dtype`` when ``use_scale``/``use_bias``.
    """
    reduction_axes = _canonicalize_axes(x.ndim, reduction_axes)
    feature_axes = _canonicalize_axes(x.ndim, feature_axes)
    stats_shape = [1 if i in reduction_axes else n for i, n in enumerate(x.shape)]
    broadcast_shape = [n if i in feature_axes else 1 for i, n in enumerate(x.shape)]
    param_shape = tuple(x.shape[i] for i in feature_axes)
    centred = x - mean.reshape(stats_shape)
    factor = lax.rsqrt(var.reshape(stats_shape) + epsilon)
    if use_scale:
        scale = param_with_axes(
            "scale", scale_init, param_shape, param_dtype, axes=("embed",), module=mdl
        )
        factor = factor * scale.reshape(broadcast_shape)
    y = centred * factor
    if use_bias:
        bias = param_with_axes(
            "bias", bias_init, param_shape, param_dtype, axes=("embed",), module=mdl
        )
        y = y + bias.reshape(broadcast_shape)
    return jnp.asarray(y, dtype)


class LayerNorm(nn.Module):
    """Layer normalization (https://arxiv.org/abs/1607.06450) over the last axis.

    Each example is centred and scaled by the mean and variance of its last axis
    (computed in at least float32), then multiplied by a learned ``scale`` and shifted by a
    learned ``bias``, both of shape ``(x.shape[-1],)`` with the logical axis name
    ``'embed'``. The result has ``x``'s shape and dtype ``dtype``.

    Unlike Flax 0.12.8, whose version of this layer fails with ``AttributeError`` unless both
    ``use_scale`` and ``use_bias`` are False, the parameters are created and applied.

    Attributes:
      epsilon: added to the variance before the reciprocal square root.
      dtype: dtype of the result.
      param_dtype: dtype the parameters are created in.
      use_bias: whether ``bias`` is added.
      use_scale: whether the result is multiplied by ``scale``.
      bias_init: initializer of ``bias`` (zeros).
      scale_init: initializer of ``scale`` (ones).
    """

    epsilon: float = 1e-6
    dtype: Any = jnp.float32
    param_dtype: Dtype = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Initializer = initializers.zeros_init()
    scale_init: Initializer = initializers.ones_init()

    @nn.compact
    def __call__(self, x: Array) -> Array:
        """Returns ``x`` normalized over its last axis (same shape, dtype ``dtype``)."""
        mean, var = _compute_stats(x, (-1,))
        return _normalize(
            self, x, mean, var, (-1,), (-1,), self.dtype, self.param_dtype, self.epsilon,
            self.use_bias, self.use_scale, self.bias_init, self.scale_init,
        )
