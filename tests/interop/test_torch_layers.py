"""Each torch layer converted onto its Linen counterpart gives the same outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from tests.interop._helpers import assert_close, fxt, nchw_to_nhwc, rand, run_torch, seed, torch

KEY = jax.random.PRNGKey(0)


def _convert_apply(tmod, fmod, *finputs, **apply_kw):
    variables = jax.eval_shape(fmod.init, KEY, *finputs)  # shapes are all convert needs
    converted = fxt.convert(tmod.state_dict(), variables)
    return fmod.apply(converted, *finputs, **apply_kw), converted


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    seed()
    t = torch.nn.Linear(5, 3, bias=bias)
    x = rand(2, 5)
    y, v = _convert_apply(t, nn.Dense(3, use_bias=bias), x)
    assert v["params"]["kernel"].shape == (5, 3)
    assert_close(y, run_torch(t, x))


@pytest.mark.parametrize("dims,stride,dilation,groups", [
    (1, 2, 2, 1), (2, 2, 1, 2), (2, 1, 2, 4), (3, 1, 1, 1)])
def test_conv_stride_dilation_groups(dims, stride, dilation, groups):
    seed(dims)
    cls = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[dims]
    t = cls(4, 4, 3, stride=stride, dilation=dilation, groups=groups, padding=1)
    x = rand(1, 4, *([5] * dims))
    f = nn.Conv(4, (3,) * dims, strides=stride, kernel_dilation=dilation,
                feature_group_count=groups, padding=[(1, 1)] * dims)
    y, _ = _convert_apply(t, f, nchw_to_nhwc(x))
    assert_close(y, nchw_to_nhwc(run_torch(t, x).numpy()))


def test_conv_padding_modes():
    seed(1)
    x = rand(1, 3, 7, 7)
    circ = torch.nn.Conv2d(3, 2, 3, padding=1, padding_mode="circular")
    y, _ = _convert_apply(circ, nn.Conv(2, (3, 3), padding="CIRCULAR"), nchw_to_nhwc(x))
    assert_close(y, nchw_to_nhwc(run_torch(circ, x).numpy()))
    same = torch.nn.Conv2d(3, 2, 3, padding="same")
    y, _ = _convert_apply(same, nn.Conv(2, (3, 3), padding="SAME"), nchw_to_nhwc(x))
    assert_close(y, nchw_to_nhwc(run_torch(same, x).numpy()))
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge")):
        t = torch.nn.Conv2d(3, 2, 3, padding=1, padding_mode=mode)
        f = nn.Conv(2, (3, 3), padding="VALID")
        xp = np.pad(nchw_to_nhwc(x), ((0, 0), (1, 1), (1, 1), (0, 0)), mode=np_mode)
        y, _ = _convert_apply(t, f, xp)
        assert_close(y, nchw_to_nhwc(run_torch(t, x).numpy()))


@pytest.mark.parametrize("dims,stride,padding,out_pad", [(1, 2, 0, 0), (2, 3, 2, 2)])
def test_conv_transpose(dims, stride, padding, out_pad):
    seed(2)
    cls = {1: torch.nn.ConvTranspose1d, 2: torch.nn.ConvTranspose2d}[dims]
    k = 3
    t = cls(3, 5, k, stride=stride, padding=padding, output_padding=out_pad)
    x = rand(2, 3, *([4] * dims))
    lo = k - 1 - padding
    f = nn.ConvTranspose(5, (k,) * dims, strides=(stride,) * dims,
                         padding=[(lo, lo + out_pad)] * dims, transpose_kernel=True)
    y, v = _convert_apply(t, f, nchw_to_nhwc(x))
    assert v["params"]["kernel"].shape == (k,) * dims + (5, 3)
    assert_close(y, nchw_to_nhwc(run_torch(t, x).numpy()))


def test_conv_transpose_without_transposed_kernel_needs_the_module():
    seed(3)
    t = torch.nn.ConvTranspose2d(3, 5, 3, stride=2)
    x = rand(1, 3, 4, 4)
    f = nn.ConvTranspose(5, (3, 3), strides=(2, 2), padding=[(2, 2), (2, 2)])
    variables = jax.eval_shape(f.init, KEY, nchw_to_nhwc(x))
    converted = fxt.convert(t, variables)  # the module says it is a ConvTranspose
    assert_close(f.apply(converted, nchw_to_nhwc(x)), nchw_to_nhwc(run_torch(t, x).numpy()))


@pytest.mark.parametrize("dims", [1, 2])
def test_batchnorm_eval(dims):
    seed(4)
    t = torch.nn.BatchNorm1d(4) if dims == 1 else torch.nn.BatchNorm2d(4)
    with torch.no_grad():
        t.running_mean.uniform_(-1, 1)
        t.running_var.uniform_(0.5, 2.0)
        t.weight.uniform_(0.5, 1.5)
        t.bias.uniform_(-1, 1)
    t.num_batches_tracked += 3
    x = rand(3, 4) if dims == 1 else rand(2, 4, 3, 3)
    fx = x if dims == 1 else nchw_to_nhwc(x)
    f = nn.BatchNorm(use_running_average=True, epsilon=1e-5)
    y, v = _convert_apply(t, f, fx)
    assert set(v) == {"params", "batch_stats"}
    np.testing.assert_allclose(v["batch_stats"]["mean"], t.running_mean.numpy())
    out = run_torch(t, x).numpy()
    assert_close(y, out if dims == 1 else nchw_to_nhwc(out))


def test_layernorm_epsilon_and_groupnorm():
    seed(5)
    t = torch.nn.LayerNorm(6, eps=1e-3)
    with torch.no_grad():
        t.weight.uniform_(0.5, 1.5)
    x = rand(2, 6)
    y, _ = _convert_apply(t, nn.LayerNorm(epsilon=1e-3), x)
    assert_close(y, run_torch(t, x))
    g = torch.nn.GroupNorm(2, 6)
    with torch.no_grad():
        g.bias.uniform_(-1, 1)
    x = rand(2, 6, 3, 3)
    y, _ = _convert_apply(g, nn.GroupNorm(num_groups=2, epsilon=1e-5), nchw_to_nhwc(x))
    assert_close(y, nchw_to_nhwc(run_torch(g, x).numpy()))


def test_embedding_and_prelu():
    seed(6)
    t = torch.nn.Embedding(10, 4)
    ids = np.array([[1, 2, 9]])
    y, v = _convert_apply(t, nn.Embed(10, 4), ids)
    assert_close(y, run_torch(t, torch.from_numpy(ids)))
    p = torch.nn.PReLU(init=0.2)
    x = rand(2, 3)
    y, v = _convert_apply(p, nn.PReLU(), x)
    assert v["params"]["negative_slope"].shape == ()
    assert_close(y, run_torch(p, x))


@pytest.mark.parametrize("separate", [False, True])
def test_multihead_attention(separate):
    seed(7)
    kw = dict(kdim=3, vdim=6) if separate else {}
    t = torch.nn.MultiheadAttention(8, 2, batch_first=True, **kw)
    q = rand(2, 4, 8, rs=1)
    k = rand(2, 5, 3 if separate else 8, rs=2)
    val = rand(2, 5, 6 if separate else 8, rs=3)
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    f = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8, out_features=8)
    variables = jax.eval_shape(f.init, KEY, q, k, val)
    v = fxt.convert(t.state_dict(), variables)
    assert v["params"]["query"]["kernel"].shape == (8, 2, 4)
    y = f.apply(v, q, k, val, mask=~pad[:, None, None, :])
    expected = run_torch(t, q, torch.from_numpy(k), torch.from_numpy(val),
                         key_padding_mask=torch.from_numpy(pad), need_weights=False)
    assert_close(y, expected)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers(kind):
    seed(8)
    t = getattr(torch.nn, kind)(3, 4, batch_first=True)
    cell = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN": nn.SimpleCell}[kind](4)
    f = nn.RNN(cell)
    x = rand(2, 5, 3)
    y, _ = _convert_apply(t, f, x)
    assert_close(y, run_torch(t, x))


def test_stacked_bidirectional_lstm_and_carry_order():
    seed(9)
    t = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(2):
                x = nn.Bidirectional(nn.RNN(nn.LSTMCell(4)), nn.RNN(nn.LSTMCell(4)))(x)
            return x

    x = rand(2, 5, 3)
    y, _ = _convert_apply(t, Stack(), x)
    assert_close(y, run_torch(t, x))

    one = torch.nn.LSTM(3, 4, batch_first=True)
    h0, c0 = torch.randn(1, 2, 4), torch.randn(1, 2, 4)
    rnn = nn.RNN(nn.LSTMCell(4), return_carry=True)
    v = fxt.convert(one, jax.eval_shape(rnn.init, KEY, x))
    (c, h), out = rnn.apply(v, x, initial_carry=fxt.lstm_carry((h0, c0)))
    t_out, (t_h, t_c) = run_torch(one, x, (h0, c0))
    assert_close(out, t_out)
    assert_close(h, t_h[0])
    assert_close(c, t_c[0])


def test_dtypes_are_cast_to_the_target_bfloat16_included():
    seed(10)
    t = torch.nn.Linear(4, 2)
    f = nn.Dense(2, param_dtype=jnp.bfloat16)
    v = fxt.convert(t.state_dict(), jax.eval_shape(f.init, KEY, jnp.ones((1, 4))))
    assert v["params"]["kernel"].dtype == jnp.bfloat16
    t16 = torch.nn.Linear(4, 2).to(torch.bfloat16)
    v32 = fxt.convert(t16.state_dict(), jax.eval_shape(nn.Dense(2).init, KEY, jnp.ones((1, 4))))
    assert v32["params"]["kernel"].dtype == jnp.float32
    np.testing.assert_array_equal(v32["params"]["kernel"],
                                  t16.weight.detach().float().numpy().T)
