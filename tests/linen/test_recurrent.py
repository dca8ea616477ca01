"""Tests for flaxen.linen.recurrent: cells, RNN, Bidirectional, documented forms, errors."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen.linen.recurrent import flip_sequences
from tests import _inputs


def _lstm_reference(params, carry, xs):
    """The LSTM equations of the spec, step by step in numpy."""
    p = {k: {n: np.asarray(a, np.float64) for n, a in v.items()} for k, v in params.items()}
    c, h = (np.asarray(a, np.float64) for a in carry)
    sig = lambda z: 1 / (1 + np.exp(-z))
    ys = []
    for t in range(xs.shape[1]):
        x = np.asarray(xs[:, t], np.float64)

        pre = {g: x @ p["i" + g]["kernel"] + h @ p["h" + g]["kernel"] + p["h" + g]["bias"]
               for g in "ifgo"}
        i, f, g, o = sig(pre["i"]), sig(pre["f"]), np.tanh(pre["g"]), sig(pre["o"])
        c = f * c + i * g
        h = o * np.tanh(c)
        ys.append(h)
    return (c, h), np.stack(ys, 1)


def test_rnn_lstm_follows_the_equations():
    x = _inputs.normal(1, (2, 5, 3))
    rnn = nn.RNN(nn.LSTMCell(4), return_carry=True)
    variables = rnn.init(jax.random.PRNGKey(0), x)
    (c, h), ys = rnn.apply(variables, x)
    zeros = np.zeros((2, 4))
    (c_ref, h_ref), ys_ref = _lstm_reference(variables["params"]["cell"], (zeros, zeros), x)
    np.testing.assert_allclose(ys, ys_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, c_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(h, ys[:, -1])


def test_optimized_lstm_equals_lstm_with_same_params():
    x = _inputs.normal(1, (2, 5, 3))
    variables = nn.RNN(nn.LSTMCell(4)).init(jax.random.PRNGKey(0), x)
    opt = nn.RNN(nn.OptimizedLSTMCell(4))
    assert jax.tree.structure(opt.init(jax.random.PRNGKey(0), x)) == jax.tree.structure(variables)
    np.testing.assert_allclose(opt.apply(variables, x), nn.RNN(nn.LSTMCell(4)).apply(variables, x),
                               rtol=1e-5, atol=1e-6)


def test_seq_lengths_carry_is_the_last_valid_step():
    x = _inputs.normal(1, (3, 6, 2))
    lengths = jnp.array([6, 2, 4])
    rnn = nn.RNN(nn.GRUCell(3), return_carry=True)
    variables = rnn.init(jax.random.PRNGKey(0), x)
    carry, ys = rnn.apply(variables, x, seq_lengths=lengths)
    for b, n in enumerate([6, 2, 4]):
        np.testing.assert_allclose(carry[b], ys[b, n - 1], rtol=1e-6)
        short_carry, short_ys = rnn.apply(variables, x[b:b + 1, :n])
        np.testing.assert_allclose(carry[b], short_carry[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ys[b, :n], short_ys[0], rtol=1e-5, atol=1e-6)


def test_reverse_with_seq_lengths_keeps_padding_at_the_end():
    x = _inputs.normal(1, (2, 5, 2))
    lengths = jnp.array([3, 5])
    rnn = nn.RNN(nn.SimpleCell(3), reverse=True, keep_order=True, return_carry=True)
    variables = rnn.init(jax.random.PRNGKey(0), x)
    carry, ys = rnn.apply(variables, x, seq_lengths=lengths)
    forward = nn.RNN(nn.SimpleCell(3), return_carry=True)
    for b, n in enumerate([3, 5]):
        rev_carry, rev_ys = forward.apply(variables, x[b:b + 1, :n][:, ::-1])
        np.testing.assert_allclose(ys[b, :n], rev_ys[0, ::-1], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(carry[b], rev_carry[0], rtol=1e-5, atol=1e-6)


def test_flip_sequences():
    x = jnp.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    np.testing.assert_array_equal(
        flip_sequences(x, jnp.array([3, 5]), num_batch_dims=1, time_major=False),
        [[3, 2, 1, 0, 0], [8, 7, 6, 5, 4]])
    np.testing.assert_array_equal(
        flip_sequences(x.T, None, num_batch_dims=1, time_major=True), x.T[::-1])


def test_time_major_and_batchless_inputs():
    x = _inputs.normal(1, (2, 5, 3))
    rnn = nn.RNN(nn.GRUCell(4))
    variables = rnn.init(jax.random.PRNGKey(0), x)
    ys = rnn.apply(variables, x)
    ys_tm = nn.RNN(nn.GRUCell(4), time_major=True).apply(variables, jnp.swapaxes(x, 0, 1))
    np.testing.assert_allclose(jnp.swapaxes(ys_tm, 0, 1), ys, rtol=1e-6)
    np.testing.assert_allclose(rnn.apply(variables, x[0]), ys[0], rtol=1e-5, atol=1e-6)


def test_bidirectional_merges_forward_and_backward():
    x = _inputs.normal(1, (2, 5, 3))
    bi = nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.GRUCell(2)), return_carry=True)
    variables = bi.init(jax.random.PRNGKey(0), x)
    (c_fwd, c_bwd), ys = bi.apply(variables, x)
    assert ys.shape == (2, 5, 6) and c_fwd.shape == (2, 4) and c_bwd.shape == (2, 2)
    fwd = nn.RNN(nn.GRUCell(4)).apply({"params": variables["params"]["forward_rnn"]}, x)
    bwd = nn.RNN(nn.GRUCell(2), reverse=True, keep_order=True).apply(
        {"params": variables["params"]["backward_rnn"]}, x)
    np.testing.assert_allclose(ys, jnp.concatenate([fwd, bwd], -1), rtol=1e-6)


def test_conv_lstm_in_rnn():
    x = jnp.ones((2, 4, 6, 6, 3))
    rnn = nn.RNN(nn.ConvLSTMCell(5, kernel_size=(3, 3)))
    ys, variables = rnn.init_with_output(jax.random.PRNGKey(0), x)
    assert ys.shape == (2, 4, 6, 6, 5)
    assert variables["params"]["cell"]["ih"]["kernel"].shape == (3, 3, 3, 20)


def test_rnn_under_jit_vmap_and_grad():
    x = _inputs.normal(1, (3, 2, 4, 2))
    rnn = nn.RNN(nn.LSTMCell(3))
    variables = rnn.init(jax.random.PRNGKey(0), x[0])
    batched = jax.jit(jax.vmap(lambda xb: rnn.apply(variables, xb)))(x)
    np.testing.assert_allclose(batched, rnn.apply(variables, x), rtol=1e-5, atol=1e-6)
    grads = jax.grad(lambda v: jnp.sum(rnn.apply(v, x[0]) ** 2))(variables)
    assert jax.tree.structure(grads) == jax.tree.structure(variables)
    assert all(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(grads))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_cell_dtypes(dtype):
    x = jnp.ones((2, 3, 4), dtype)
    rnn = nn.RNN(nn.LSTMCell(3, dtype=dtype))
    ys, variables = rnn.init_with_output(jax.random.PRNGKey(0), x)
    assert ys.dtype == jnp.float32  # the default carry is in param_dtype
    assert variables["params"]["cell"]["ii"]["kernel"].dtype == jnp.float32
    carry = (jnp.zeros((2, 3), dtype), jnp.zeros((2, 3), dtype))
    assert rnn.apply(variables, x, initial_carry=carry).dtype == dtype


# --- the documented (Flax 0.6) forms --------------------------------------------------


def test_documented_static_initialize_carry_and_cell_size():
    c, h = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (4,), 8)
    assert c.shape == h.shape == (4, 8)
    assert nn.GRUCell.initialize_carry(jax.random.PRNGKey(0), (2, 3), 5).shape == (2, 3, 5)
    ones = nn.SimpleCell.initialize_carry(jax.random.PRNGKey(0), (2,), 3,
                                          init_fn=nn.initializers.ones)
    np.testing.assert_array_equal(ones, np.ones((2, 3)))
    # The same on an instance, with the documented arguments.
    assert nn.LSTMCell(8).initialize_carry(jax.random.PRNGKey(0), (4,), 8)[0].shape == (4, 8)

    x = jnp.ones((10, 5, 3))
    for rnn in (nn.RNN(nn.LSTMCell(), cell_size=6), nn.RNN(nn.LSTMCell(), 6),
                nn.RNN(nn.LSTMCell(), cell_size=6, time_major=True)):
        ys, _ = rnn.init_with_output(jax.random.PRNGKey(0), x)
        assert ys.shape == (10, 5, 6)


def test_documented_scan_over_cell_class():
    class LSTM(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            scan_cell = nn.scan(nn.LSTMCell, variable_broadcast="params",
                                split_rngs={"params": False}, in_axes=1, out_axes=1)
            carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (x.shape[0],),
                                                 self.features)
            return scan_cell()(carry, x)[1]

    x = _inputs.normal(1, (4, 6, 7))
    ys, variables = LSTM(5).init_with_output(jax.random.PRNGKey(0), x)
    assert list(variables["params"]) == ["ScanLSTMCell_0"]
    cell_params = variables["params"]["ScanLSTMCell_0"]
    expected = nn.RNN(nn.LSTMCell(5)).apply({"params": {"cell": cell_params}}, x)
    np.testing.assert_allclose(ys, expected, rtol=1e-5, atol=1e-6)


# --- bad input ------------------------------------------------------------------------


def test_rnn_wrong_input_rank():
    rnn = nn.RNN(nn.LSTMCell(4))
    with pytest.raises(ValueError, match=r"RNN: inputs of shape \(3,\).*at least 2.*time") as e:
        rnn.init(jax.random.PRNGKey(0), jnp.ones((3,)))
    assert isinstance(e.value, AssertionError)
    conv = nn.RNN(nn.ConvLSTMCell(4, kernel_size=(3, 3)))
    with pytest.raises(ValueError, match=r"inputs of shape \(2, 5, 3\).*needs at least 4"):
        conv.init(jax.random.PRNGKey(0), jnp.ones((2, 5, 3)))


def test_rnn_seq_lengths_of_wrong_shape():
    rnn = nn.RNN(nn.GRUCell(4))
    with pytest.raises(ValueError, match=r"seq_lengths of shape \(3,\).*batch shape \(2,\)"):
        rnn.init(jax.random.PRNGKey(0), jnp.ones((2, 5, 3)), seq_lengths=jnp.array([1, 2, 3]))


def test_initialize_carry_without_features_says_how_to_fix():
    with pytest.raises(ValueError, match=r"GRUCell\(features=...\).*batch_dims, size"):
        nn.GRUCell().initialize_carry(jax.random.PRNGKey(0), (2, 3))
    with pytest.raises(NotImplementedError, match="initialize_carry"):
        nn.RNNCellBase().initialize_carry(jax.random.PRNGKey(0), (2, 3))


def test_cell_rejects_scalar_inputs():
    cell = nn.GRUCell(3)
    with pytest.raises(ValueError, match=r"GRUCell: inputs must be \[batch..., features\]"):
        cell.init(jax.random.PRNGKey(0), jnp.zeros((3,)), jnp.float32(1.0))


def test_conv_lstm_int_kernel_size_is_one_d_or_a_clear_error():
    cell = nn.ConvLSTMCell(4, 3)
    assert cell.num_feature_axes == 2  # an int is a 1-D kernel, as for Conv
    x = jnp.ones((2, 5, 2))
    carry = cell.initialize_carry(jax.random.PRNGKey(0), x.shape)
    v = cell.init(jax.random.PRNGKey(1), carry, x)
    assert v["params"]["ih"]["kernel"].shape == (3, 2, 16)
    msg = r"ConvLSTMCell: kernel_size=3 is an int.*4 dimensions.*kernel_size=\(3, 3\)"
    x2 = jnp.ones((2, 5, 5, 2))
    with pytest.raises(TypeError, match=msg):
        cell.initialize_carry(jax.random.PRNGKey(0), x2.shape)
    carry2 = nn.ConvLSTMCell(4, (3, 3)).initialize_carry(jax.random.PRNGKey(0), x2.shape)
    with pytest.raises(TypeError, match=msg):
        cell.init(jax.random.PRNGKey(1), carry2, x2)
    with pytest.raises(TypeError, match=msg):
        nn.RNN(cell).init(jax.random.PRNGKey(1), jnp.ones((2, 4, 5, 5, 2)))


@pytest.mark.parametrize(
    "cell,carry,x",
    [
        (nn.LSTMCell(4), (jnp.zeros((2, 3)), jnp.zeros((2, 3))), jnp.ones((2, 2))),
        (nn.OptimizedLSTMCell(4), (jnp.zeros((2, 4)), jnp.zeros((2, 3))), jnp.ones((2, 2))),
        (nn.GRUCell(4), jnp.zeros((2, 3)), jnp.ones((2, 2))),
        (nn.MGUCell(4), jnp.zeros((2, 5)), jnp.ones((2, 2))),
        (nn.SimpleCell(4), jnp.zeros((2, 3)), jnp.ones((2, 2))),
        (nn.ConvLSTMCell(4, (3,)), (jnp.zeros((2, 5, 3)),) * 2, jnp.ones((2, 5, 2))),
    ],
)
def test_carry_of_wrong_feature_size_names_expected_shape(cell, carry, x):
    name = type(cell).__name__
    bad = jnp.shape(carry[0] if isinstance(carry, tuple) else carry)
    part = "c" if isinstance(carry, tuple) and bad[-1] != 4 else "h"
    bad = bad if part == "c" or not isinstance(carry, tuple) else jnp.shape(carry[1])
    with pytest.raises(ValueError, match=rf"{name}: carry {part} must have shape "
                       rf"\[batch\.\.\., .*features\] with features=4, but got shape "
                       rf"{re.escape(str(bad))}") as info:
        cell.init(jax.random.PRNGKey(0), carry, x)
    assert isinstance(info.value, TypeError)
    with pytest.raises(ValueError, match="carry"):  # through RNN's initial_carry too
        nn.RNN(cell).init(jax.random.PRNGKey(0), x[:, None], initial_carry=carry)


def test_cell_without_features_takes_the_carry_size():
    cell = nn.GRUCell()  # the documented older API: the size comes from the carry
    v = cell.init(jax.random.PRNGKey(0), jnp.zeros((2, 3)), jnp.ones((2, 2)))
    assert v["params"]["hr"]["kernel"].shape == (3, 3)


@pytest.mark.parametrize("cell, keys", [
    (nn.LSTMCell(2), ["ii", "hi", "if", "hf", "ig", "hg", "io", "ho"]),
    (nn.OptimizedLSTMCell(2), ["ii", "hi", "if", "hf", "ig", "hg", "io", "ho"]),
    (nn.GRUCell(2), ["ir", "hr", "iz", "hz", "in", "hn"]),
    (nn.MGUCell(2), ["if", "hf", "hn", "in"]),
    (nn.MGUCell(2, reset_gate=False), ["if", "hf", "hn", "in"]),
    (nn.SimpleCell(2), ["i", "h"]),
])
def test_cell_params_are_created_in_the_documented_order(cell, keys):
    """The params dict's key order is part of the contract (msgpack bytes, tabulate)."""
    x = jnp.ones((1, 2))
    key = jax.random.PRNGKey(0)
    carry = cell.initialize_carry(key, x.shape)
    assert list(cell.init(key, carry, x)["params"]) == keys


def test_documented_cell_size_sizes_a_featureless_cell_and_survives_clones():
    rnn = nn.RNN(nn.GRUCell(), cell_size=5)
    assert rnn.cell.features == 5 and rnn.clone().cell.features == 5
    # A truthy int in time_major's slot means time_major when the cell has its size.
    sized = nn.RNN(nn.GRUCell(2), 1)
    assert sized.time_major == 1
    x = jnp.ones((4, 3, 2))
    assert sized.apply(sized.init(jax.random.PRNGKey(0), x), x).shape == (4, 3, 2)


def test_documented_cell_size_inside_a_compact_parent():
    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.RNN(nn.LSTMCell(), cell_size=4)(x)

    x = jnp.ones((2, 3, 5))
    y, variables = Outer().init_with_output(jax.random.PRNGKey(0), x)
    assert y.shape == (2, 3, 4)
    assert variables["params"]["LSTMCell_0"]["hi"]["kernel"].shape == (4, 4)
