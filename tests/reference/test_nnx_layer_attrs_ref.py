"""Every NNX layer holds the attributes Flax 0.12.8's does, in the same order, with equal values.

A Module's repr and treescope rendering list its attributes in ``__dict__`` order, and user
code reads them (``conv.kernel_size``, ``gn.feature_axis``, ``rnn.state_axes``). Each case
builds one layer with ``flax.nnx`` and with ``flaxen.nnx`` (same seeds) and walks both:

- the public attribute names (no leading ``_``), in order, at every level of submodules;
- Variables: the same type, shape, dtype and bit-identical values (the RNG draw order of the
  constructors is unchanged by the attribute order);
- RNG streams: the same tag, key data and count;
- anything else: the same type name (a numpy dtype is not a scalar type, a list is not a
  tuple) and the same repr once ``flax`` reads ``flaxen``, addresses are dropped and classes
  are named by their own name (``Carry`` lives in another private file in flaxen).
"""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _rngs(m, seed=0):
    return m.Rngs(seed)


CASES = {
    "Linear": lambda m: m.Linear(2, 3, rngs=_rngs(m)),
    "Linear_options": lambda m: m.Linear(
        2, 3, use_bias=False, dtype=jnp.bfloat16, param_dtype=jnp.float16, rngs=_rngs(m)),
    "LinearGeneral": lambda m: m.LinearGeneral(2, 3, rngs=_rngs(m)),
    "LinearGeneral_axes": lambda m: m.LinearGeneral(
        (2, 3), (4, 5), axis=(-2, -1), rngs=_rngs(m)),
    "LinearGeneral_batch": lambda m: m.LinearGeneral(
        (2,), 3, axis=-1, batch_axis={0: 4}, use_bias=False, rngs=_rngs(m)),
    "Einsum": lambda m: m.Einsum("ab,bc->ac", (2, 3), rngs=_rngs(m)),
    "Einsum_lists": lambda m: m.Einsum("...ab, bc->...ac", [2, 3], [3], rngs=_rngs(m)),
    "Conv": lambda m: m.Conv(2, 3, (3,), rngs=_rngs(m)),
    "Conv_int_kernel": lambda m: m.Conv(
        2, 3, 3, strides=2, padding=[(1, 1)], use_bias=False, rngs=_rngs(m)),
    "Conv_dilated": lambda m: m.Conv(
        2, 4, (3, 3), kernel_dilation=(1, 2), input_dilation=2, feature_group_count=2,
        rngs=_rngs(m)),
    "ConvTranspose": lambda m: m.ConvTranspose(2, 3, (3,), rngs=_rngs(m)),
    "ConvTranspose_transposed": lambda m: m.ConvTranspose(
        2, 3, 3, strides=2, transpose_kernel=True, rngs=_rngs(m)),
    "Embed": lambda m: m.Embed(4, 3, rngs=_rngs(m)),
    "Embed_dtypes": lambda m: m.Embed(
        4, 3, dtype=jnp.bfloat16, param_dtype=jnp.float16, rngs=_rngs(m)),
    "BatchNorm": lambda m: m.BatchNorm(3, rngs=_rngs(m)),
    "BatchNorm_options": lambda m: m.BatchNorm(
        3, use_running_average=True, axis=1, momentum=0.9, use_bias=False, rngs=_rngs(m)),
    "LayerNorm": lambda m: m.LayerNorm(3, rngs=_rngs(m)),
    "LayerNorm_axes": lambda m: m.LayerNorm(
        3, reduction_axes=(-2, -1), feature_axes=[-1], use_scale=False, rngs=_rngs(m)),
    "RMSNorm": lambda m: m.RMSNorm(3, rngs=_rngs(m)),
    "GroupNorm": lambda m: m.GroupNorm(4, num_groups=2, rngs=_rngs(m)),
    "GroupNorm_group_size": lambda m: m.GroupNorm(
        4, num_groups=None, group_size=2, use_bias=False, rngs=_rngs(m)),
    "InstanceNorm": lambda m: m.InstanceNorm(3, rngs=_rngs(m)),
    "InstanceNorm_axes": lambda m: m.InstanceNorm(
        3, feature_axes=[1, 2], use_bias=False, rngs=_rngs(m)),
    "Dropout": lambda m: m.Dropout(0.1, rngs=_rngs(m)),
    "Dropout_no_rngs": lambda m: m.Dropout(0.1),
    "Dropout_list_dims": lambda m: m.Dropout(0.1, broadcast_dims=[0], rngs=_rngs(m)),
    "Dropout_collection": lambda m: m.Dropout(
        0.1, deterministic=True, rng_collection="x", rngs=m.Rngs(x=0)),
    "MultiHeadAttention": lambda m: m.MultiHeadAttention(2, 4, rngs=_rngs(m), decode=False),
    "MultiHeadAttention_qk": lambda m: m.MultiHeadAttention(
        2, 4, 8, 6, normalize_qk=True, rngs=_rngs(m), decode=True),
    "MultiHeadAttention_dropout": lambda m: m.MultiHeadAttention(
        2, 4, dropout_rate=0.1, rngs=_rngs(m)),
    "MultiHeadAttention_no_rngs": lambda m: m.MultiHeadAttention(
        2, 4, dropout_rate=0.1, keep_rngs=False, use_bias=False, rngs=_rngs(m)),
    "LSTMCell": lambda m: m.LSTMCell(2, 3, rngs=_rngs(m)),
    "LSTMCell_keep_rngs": lambda m: m.LSTMCell(
        2, 3, keep_rngs=True, dtype=jnp.float16, rngs=_rngs(m)),
    "OptimizedLSTMCell": lambda m: m.OptimizedLSTMCell(2, 3, rngs=_rngs(m)),
    "GRUCell": lambda m: m.GRUCell(2, 3, rngs=_rngs(m)),
    "SimpleCell": lambda m: m.SimpleCell(2, 3, rngs=_rngs(m)),
    "SimpleCell_residual": lambda m: m.SimpleCell(
        2, 3, residual=True, keep_rngs=True, rngs=_rngs(m)),
    "RNN": lambda m: m.RNN(m.LSTMCell(2, 3, rngs=_rngs(m))),
    "RNN_options": lambda m: m.RNN(
        m.GRUCell(2, 3, rngs=_rngs(m)), time_major=True, reverse=True, keep_order=True,
        rngs=_rngs(m, 1)),
    "RNN_no_rngs": lambda m: m.RNN(
        m.SimpleCell(2, 3, rngs=_rngs(m)), rngs=False, unroll=2, return_carry=True,
        broadcast_rngs="dropout"),
    "Bidirectional": lambda m: m.Bidirectional(
        m.RNN(m.LSTMCell(2, 3, rngs=_rngs(m))), m.RNN(m.LSTMCell(2, 3, rngs=_rngs(m, 1)))),
    "Bidirectional_options": lambda m: m.Bidirectional(
        m.RNN(m.GRUCell(2, 3, rngs=_rngs(m))), m.RNN(m.GRUCell(2, 3, rngs=_rngs(m, 1))),
        merge_fn=jnp.add, time_major=True, return_carry=True),
    "LoRA": lambda m: m.LoRA(2, 2, 3, rngs=_rngs(m)),
    "LoRA_base": lambda m: m.LoRA(
        2, 2, 3, base_module=m.Linear(2, 3, rngs=_rngs(m, 1)), dtype=jnp.float16,
        rngs=_rngs(m)),
    "LoRALinear": lambda m: m.LoRALinear(2, 3, lora_rank=2, rngs=_rngs(m)),
    "LoRALinear_options": lambda m: m.LoRALinear(
        2, 3, lora_rank=2, lora_dtype=jnp.float16, use_bias=False, rngs=_rngs(m)),
    "PReLU": lambda m: m.PReLU(),
    "PReLU_options": lambda m: m.PReLU(0.1, param_dtype=jnp.float16),
    "WeightNorm": lambda m: m.WeightNorm(m.Linear(2, 3, rngs=_rngs(m)), rngs=_rngs(m, 1)),
    "WeightNorm_no_scale": lambda m: m.WeightNorm(
        m.Conv(2, 3, (2, 2), rngs=_rngs(m)), feature_axes=None, use_scale=False,
        rngs=_rngs(m, 1)),
    "SpectralNorm": lambda m: m.SpectralNorm(m.Linear(2, 3, rngs=_rngs(m)), rngs=_rngs(m, 1)),
    "SpectralNorm_options": lambda m: m.SpectralNorm(
        m.Linear(2, 3, rngs=_rngs(m)), n_steps=2, update_stats=False,
        error_on_non_matrix=True, rngs=_rngs(m, 1)),
    "Sequential": lambda m: m.Sequential(m.Linear(2, 3, rngs=_rngs(m)), m.relu),
    "Sequential_empty": lambda m: m.Sequential(),
}


def _public(obj) -> list[str]:
    return [k for k in vars(obj) if not k.startswith("_")]


def _text(value) -> str:
    """A value's repr with the library's name, addresses and class paths made comparable."""
    text = repr(value).replace("flaxen", "flax")
    text = re.sub(r" at 0x[0-9a-f]+", "", text)
    return re.sub(r"<class '[\w.]+\.(\w+)'>", r"<class \1>", text)


def _differences(path: str, ref, ours) -> list[str]:
    """What differs between Flax's object ``ref`` and flaxen's ``ours`` (empty: nothing)."""
    if isinstance(ref, fnnx.Variable):
        if type(ref).__name__ != type(ours).__name__:
            return [f"{path}: {type(ref).__name__} vs {type(ours).__name__}"]
        a, b = np.asarray(ref.get_value()), np.asarray(ours.get_value())
        if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b):
            return [f"{path}: Variable value {a.dtype}{a.shape} vs {b.dtype}{b.shape}"]
        return []
    if isinstance(ref, fnnx.RngStream):
        same = (
            isinstance(ours, nnx.RngStream) and ref.tag == ours.tag
            and np.array_equal(jax.random.key_data(ref.key[...]),
                               jax.random.key_data(ours.key[...]))
            and int(ref.count[...]) == int(ours.count[...])
        )
        return [] if same else [f"{path}: RngStream {ref!r} vs {ours!r}"]
    if isinstance(ref, fnnx.Module):
        if not isinstance(ours, nnx.Module):
            return [f"{path}: a Module vs {type(ours).__name__}"]
        names, our_names = _public(ref), _public(ours)
        if names != our_names:
            return [f"{path}: attributes\n  flax   {names}\n  flaxen {our_names}"]
        out: list[str] = []
        for name in names:
            out += _differences(f"{path}.{name}", getattr(ref, name), getattr(ours, name))
        return out
    if isinstance(ref, dict) and isinstance(ours, dict):
        if list(map(_text, ref)) != list(map(_text, ours)):
            return [f"{path}: dict keys {list(ref)} vs {list(ours)}"]
        out = []
        for (key, a), b in zip(ref.items(), ours.values()):
            out += _differences(f"{path}[{key!r}]", a, b)
        return out
    if isinstance(ref, jax.Array):
        same = isinstance(ours, jax.Array) and ref.dtype == ours.dtype and np.array_equal(
            np.asarray(ref), np.asarray(ours))
        return [] if same else [f"{path}: array {ref!r} vs {ours!r}"]
    if type(ref).__name__ != type(ours).__name__:
        return [f"{path}: {type(ref).__name__} {ref!r} vs {type(ours).__name__} {ours!r}"]
    if _text(ref) != _text(ours):
        return [f"{path}: {_text(ref)} vs {_text(ours)}"]
    return []


@pytest.mark.parametrize("name", list(CASES))
def test_layer_attributes_match_flax(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref, ours = CASES[name](fnnx), CASES[name](nnx)
    assert _differences(name, ref, ours) == []


def test_the_comparison_sees_order_type_and_value_differences():
    ref = fnnx.Dropout(0.1, broadcast_dims=[0], rngs=fnnx.Rngs(0))
    ours = nnx.Dropout(0.1, broadcast_dims=[0], rngs=nnx.Rngs(0))
    assert _differences("d", ref, ours) == []
    ours.broadcast_dims = (0,)  # a tuple where Flax keeps the list
    assert _differences("d", ref, ours) == ["d.broadcast_dims: list [0] vs tuple (0,)"]
    ours.broadcast_dims = [1]
    assert _differences("d", ref, ours) == ["d.broadcast_dims: [0] vs [1]"]
    moved = nnx.Dropout(0.1, rngs=nnx.Rngs(0))
    rate = moved.rate
    del moved.rate
    moved.rate = rate  # now last in __dict__
    assert "attributes" in _differences("d", fnnx.Dropout(0.1, rngs=fnnx.Rngs(0)), moved)[0]
    other_seed = nnx.Linear(2, 3, rngs=nnx.Rngs(1))
    assert _differences("l", fnnx.Linear(2, 3, rngs=fnnx.Rngs(0)), other_seed) == [
        "l.kernel: Variable value float32(2, 3) vs float32(2, 3)"
    ]
