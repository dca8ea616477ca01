"""Differential tests: flaxen's recurrent cells, RNN and Bidirectional against flax's."""

from __future__ import annotations

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen.recurrent as rec
from tests import _inputs


def _same_tree(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _close_tree(a, b, rtol=1e-6):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype and x.shape == y.shape
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * max(np.max(np.abs(y)), 1e-30))


_CELLS = [
    ("LSTMCell", dict(features=4)),
    ("OptimizedLSTMCell", dict(features=4)),
    ("GRUCell", dict(features=4)),
    ("MGUCell", dict(features=4)),
    ("MGUCell", dict(features=4, reset_gate=False)),
    ("SimpleCell", dict(features=4, residual=True)),
    ("LSTMCell", dict(features=3, dtype=jnp.bfloat16)),
    ("GRUCell", dict(features=3, dtype=jnp.float16)),
]


@pytest.mark.parametrize("name,kw", _CELLS)
def test_cells_match_flax(name, kw):
    x = _inputs.normal(1, (2, 3))
    kw = dict(kw, carry_init=fnn.initializers.normal(0.5))
    ours_cell, theirs_cell = getattr(rec, name)(**kw), getattr(fnn, name)(**kw)
    carry = theirs_cell.initialize_carry(jax.random.PRNGKey(2), x.shape)
    _same_tree(ours_cell.initialize_carry(jax.random.PRNGKey(2), x.shape), carry)
    ours = ours_cell.init(jax.random.PRNGKey(0), carry, x)
    theirs = theirs_cell.init(jax.random.PRNGKey(0), carry, x)
    _same_tree(ours, theirs)
    # tree structures compare sorted keys; the creation order is compared here
    assert list(ours["params"]) == list(theirs["params"])
    assert ours_cell.num_feature_axes == theirs_cell.num_feature_axes == 1
    out_ours = jax.jit(ours_cell.apply)(theirs, carry, x)
    out_theirs = jax.jit(theirs_cell.apply)(theirs, carry, x)
    low = kw.get("dtype") in (jnp.bfloat16, jnp.float16)
    _close_tree(out_ours, out_theirs, rtol=1e-2 if low else 1e-6)


def test_conv_lstm_cell_matches_flax():
    x = _inputs.normal(1, (2, 5, 5, 3))
    kw = dict(features=4, kernel_size=(3, 3))
    ours_cell, theirs_cell = rec.ConvLSTMCell(**kw), fnn.ConvLSTMCell(**kw)
    carry = theirs_cell.initialize_carry(jax.random.PRNGKey(2), x.shape)
    _same_tree(ours_cell.initialize_carry(jax.random.PRNGKey(2), x.shape), carry)
    assert ours_cell.num_feature_axes == theirs_cell.num_feature_axes == 3
    ours = ours_cell.init(jax.random.PRNGKey(0), carry, x)
    theirs = theirs_cell.init(jax.random.PRNGKey(0), carry, x)
    _same_tree(ours, theirs)
    _close_tree(ours_cell.apply(theirs, carry, x), theirs_cell.apply(theirs, carry, x))


_RNN_CASES = [
    dict(),
    dict(reverse=True, seq_lengths=True, return_carry=True),
    dict(reverse=True, keep_order=True, seq_lengths=True),
    dict(time_major=True, return_carry=True, seq_lengths=True, reverse=True),
]


@pytest.mark.parametrize("case", _RNN_CASES)
def test_rnn_matches_flax(case):
    case = dict(case)
    use_lengths = case.pop("seq_lengths", False)
    time_major = case.get("time_major", False)
    x = _inputs.normal(1, (3, 6, 2))
    if time_major:
        x = jnp.swapaxes(x, 0, 1)
    lengths = jnp.array([6, 2, 4]) if use_lengths else None
    ours_rnn = rec.RNN(rec.LSTMCell(5), **case)
    theirs_rnn = fnn.RNN(fnn.LSTMCell(5), **case)
    ours = ours_rnn.init(jax.random.PRNGKey(0), x, seq_lengths=lengths)
    theirs = theirs_rnn.init(jax.random.PRNGKey(0), x, seq_lengths=lengths)
    _same_tree(ours, theirs)
    out_ours = jax.jit(lambda v: ours_rnn.apply(v, x, seq_lengths=lengths))(theirs)
    out_theirs = jax.jit(lambda v: theirs_rnn.apply(v, x, seq_lengths=lengths))(theirs)
    _close_tree(out_ours, out_theirs)


def test_rnn_call_overrides_init_key_and_initial_carry_match_flax():
    x = _inputs.normal(1, (2, 4, 3))
    cell_kw = dict(features=3, carry_init=fnn.initializers.normal(1.0))
    ours_rnn, theirs_rnn = rec.RNN(rec.GRUCell(**cell_kw)), fnn.RNN(fnn.GRUCell(**cell_kw))
    variables = theirs_rnn.init(jax.random.PRNGKey(0), x)
    _same_tree(ours_rnn.init(jax.random.PRNGKey(0), x), variables)
    for kwargs in (
        {},  # default init_key
        dict(init_key=jax.random.PRNGKey(7), return_carry=True, reverse=True),
        dict(initial_carry=jnp.ones((4, 3)), time_major=True),
    ):
        _close_tree(ours_rnn.apply(variables, x, **kwargs),
                    theirs_rnn.apply(variables, x, **kwargs))


def test_rnn_split_rngs_and_variable_axes_match_flax():
    x = _inputs.normal(1, (2, 4, 3))
    kw = dict(variable_axes={"params": 0}, variable_broadcast=False,
              split_rngs={"params": True})
    ours = rec.RNN(rec.SimpleCell(3), **kw).init(jax.random.PRNGKey(0), x)
    theirs = fnn.RNN(fnn.SimpleCell(3), **kw).init(jax.random.PRNGKey(0), x)
    _same_tree(ours, theirs)


@pytest.mark.parametrize("with_lengths", [False, True])
def test_bidirectional_matches_flax(with_lengths):
    x = _inputs.normal(1, (3, 5, 2))
    lengths = jnp.array([5, 1, 3]) if with_lengths else None

    def build(lib):
        return lib.Bidirectional(lib.RNN(lib.LSTMCell(4)), lib.RNN(lib.GRUCell(3)),
                                 return_carry=True)

    ours_bi, theirs_bi = build(rec), build(fnn)
    ours = ours_bi.init(jax.random.PRNGKey(0), x, seq_lengths=lengths)
    theirs = theirs_bi.init(jax.random.PRNGKey(0), x, seq_lengths=lengths)
    _same_tree(ours, theirs)
    _close_tree(ours_bi.apply(theirs, x, seq_lengths=lengths),
                theirs_bi.apply(theirs, x, seq_lengths=lengths))


def test_flip_sequences_matches_flax():
    from flax.linen.recurrent import flip_sequences

    x = jnp.arange(2 * 3 * 5).reshape(2, 3, 5, 1)
    lengths = jnp.array([[5, 2, 0], [1, 3, 4]])
    for time_major in (False, True):
        xt = jnp.moveaxis(x, 2, 0) if time_major else x
        np.testing.assert_array_equal(
            rec.flip_sequences(xt, lengths, num_batch_dims=2, time_major=time_major),
            flip_sequences(xt, lengths, num_batch_dims=2, time_major=time_major))


def _compare_rnn(build, x, *, lengths=None, rtol=1e-6, **call):
    ours_rnn, theirs_rnn = build(rec), build(fnn)
    ours = ours_rnn.init(jax.random.PRNGKey(0), x, seq_lengths=lengths, **call)
    theirs = theirs_rnn.init(jax.random.PRNGKey(0), x, seq_lengths=lengths, **call)
    _same_tree(ours, theirs)
    out_ours = jax.jit(lambda v: ours_rnn.apply(v, x, seq_lengths=lengths, **call))(theirs)
    out_theirs = jax.jit(lambda v: theirs_rnn.apply(v, x, seq_lengths=lengths, **call))(theirs)
    _close_tree(out_ours, out_theirs, rtol=rtol)


@pytest.mark.parametrize(
    "cell,kw",
    [
        ("GRUCell", dict(features=4)),
        ("MGUCell", dict(features=3)),
        ("MGUCell", dict(features=3, reset_gate=False)),
    ],
)
@pytest.mark.parametrize("case", [dict(), dict(reverse=True, return_carry=True, lengths=True)])
def test_rnn_with_gru_and_mgu_cells_matches_flax(cell, kw, case):
    case = dict(case)
    lengths = jnp.array([5, 2, 3]) if case.pop("lengths", False) else None
    x = _inputs.normal(1, (3, 5, 2))
    _compare_rnn(lambda lib: lib.RNN(getattr(lib, cell)(**kw), **case), x, lengths=lengths)


@pytest.mark.parametrize(
    "kw",
    [
        dict(features=3, kernel_size=(3, 3), strides=(1, 1), padding=((1, 1), (1, 1))),
        dict(features=2, kernel_size=(3,), strides=(1,), padding=((2, 0),), use_bias=False),
        dict(features=2, kernel_size=(2, 3), padding="CIRCULAR"),
    ],
)
def test_rnn_with_conv_lstm_cell_matches_flax(kw):
    n = len(kw["kernel_size"])
    x = _inputs.normal(1, (2, 3) + (4,) * n + (2,))
    lengths = jnp.array([3, 1])
    _compare_rnn(lambda lib: lib.RNN(lib.ConvLSTMCell(**kw), return_carry=True), x,
                 lengths=lengths)


@pytest.mark.parametrize("unroll", [2, 3, 6])
@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell"])
def test_rnn_unroll_matches_flax(unroll, cell):
    x = _inputs.normal(1, (2, 6, 3))
    lengths = jnp.array([6, 4])
    _compare_rnn(lambda lib: lib.RNN(getattr(lib, cell)(4), unroll=unroll, reverse=True,
                                     keep_order=True), x, lengths=lengths)
