"""verify: a layer-by-layer report that names the first divergence and its likely cause."""

import jax
import jax.numpy as jnp
import numpy as np

import flaxen.linen as nn
from flaxen import nnx
from tests.interop import _models as m
from tests.interop._helpers import fxt, rand, seed, torch

KEY = jax.random.PRNGKey(0)


class LinenCNN(nn.Module):
    eps: float = 1e-5

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(4, (3, 3), padding=[(1, 1), (1, 1)])(x)
        x = nn.relu(nn.BatchNorm(use_running_average=True, epsilon=1e-5)(x))
        x = nn.Dense(6)(x.reshape(x.shape[0], -1))
        return nn.LayerNorm(epsilon=self.eps)(x)


def _cnn_case(eps=1e-5, flatten_rule=True):
    seed(0)
    t = m.TorchCNN()
    m.randomize_bn_stats(t)
    rules = {"fc.weight": fxt.channels_first_flatten(4)} if flatten_rule else None
    f = LinenCNN(eps)
    v = fxt.convert(t, jax.eval_shape(f.init, KEY, jnp.ones((1, 4, 4, 3))), rules=rules)
    return t, f, v, rules


def test_matching_models_report_ok_with_a_row_per_layer():
    t, f, v, rules = _cnn_case()
    report = fxt.verify(t, f, v, rand(2, 3, 4, 4), rules=rules)
    assert report.ok and report.first_divergence is None
    assert [r.torch_name for r in report.rows] == ["conv", "bn", "fc", "ln"]
    assert [r.flaxen_path for r in report.rows] == ["Conv_0", "BatchNorm_0", "Dense_0",
                                                    "LayerNorm_0"]
    text = str(report)
    assert "All compared outputs match" in text and "BatchNorm_0" in text


def test_flatten_order_is_named():
    t, f, v, rules = _cnn_case(flatten_rule=False)
    report = fxt.verify(t, f, v, rand(2, 3, 4, 4))
    assert not report.ok
    assert report.first_divergence.torch_name == "fc"
    assert any("flatten order" in c for c in report.causes)
    assert "First divergence: fc -> Dense_0" in str(report)


def test_epsilon_is_named():
    t, f, v, rules = _cnn_case(eps=1e-1)
    report = fxt.verify(t, f, v, rand(2, 3, 4, 4), rules=rules)
    assert report.first_divergence.torch_name == "ln"
    assert any("epsilon" in c and "eps=1e-05" in c for c in report.causes)


def test_gelu_approximation_is_named():
    seed(1)
    t = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))

    class F(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.gelu(nn.Dense(8)(x)))  # approximate=True by default

    v = fxt.convert(t, jax.eval_shape(F().init, KEY, jnp.ones((1, 4))))
    report = fxt.verify(t, F(), v, 3 * rand(5, 4), atol=1e-6, rtol=1e-6)
    assert report.first_divergence.torch_name == "2"
    assert any("GELU approximation" in c for c in report.causes)


def test_padding_is_named():
    seed(2)
    t = torch.nn.Conv2d(3, 2, 3)  # padding=0
    f = nn.Conv(2, (3, 3))  # flaxen default: SAME
    v = fxt.convert(t, jax.eval_shape(f.init, KEY, jnp.ones((1, 5, 5, 3))))
    report = fxt.verify(torch.nn.Sequential(t), nn.Sequential([f]), {"params": {
        "layers_0": v["params"]}}, rand(1, 3, 5, 5))
    assert not report.ok
    assert any(c.startswith("padding") and "padding=(0, 0)" in c for c in report.causes)


def test_mask_polarity_is_named():
    seed(3)
    t = torch.nn.MultiheadAttention(4, 2, batch_first=True)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = t

        def forward(self, x, pad):
            return self.attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]

    class F(nn.Module):
        @nn.compact
        def __call__(self, x, mask):
            return nn.MultiHeadDotProductAttention(num_heads=2, name="attn")(x, mask=mask)

    x = rand(1, 3, 4)
    pad = np.array([[False, False, True]])
    mask = pad[:, None, None, :]  # wrong: torch's True means "padded"
    v = fxt.convert(Wrap(), jax.eval_shape(F().init, KEY, x, mask))
    report = fxt.verify(Wrap(), F(), v, (x, torch.from_numpy(pad)), flaxen_inputs=(x, mask))
    assert report.first_divergence.flaxen_path == "attn"
    assert any("mask polarity" in c for c in report.causes)
    good = fxt.verify(Wrap(), F(), v, (x, torch.from_numpy(pad)), flaxen_inputs=(x, ~mask))
    assert good.ok


def test_nnx_models_are_compared_layer_by_layer(capsys):
    seed(4)
    t = m.TorchCNN()
    rules = {"fc.weight": fxt.channels_first_flatten(4)}
    model = fxt.convert(t, m.NnxCNN(nnx.Rngs(0)), rules=rules)
    report = fxt.verify(t, model, None, rand(1, 3, 4, 4), rules=rules)
    assert report.ok, str(report)
    assert [r.flaxen_path for r in report.rows] == ["conv", "bn", "fc", "ln"]
    assert type(model.conv) is nnx.Conv  # the recording hooks are gone again
    report.show()
    assert "All compared outputs match" in capsys.readouterr().out


def test_recurrent_models_compare_the_last_layer():
    seed(5)
    t = m.TorchLM()
    ids = np.random.RandomState(0).randint(0, 11, size=(2, 4))
    v = fxt.convert(t, jax.eval_shape(m.LM().init, KEY, ids))
    report = fxt.verify(t, m.LM(), v, torch.from_numpy(ids), flaxen_inputs=ids)
    assert report.ok, str(report)
    assert [r.flaxen_path for r in report.rows] == ["Embed_0", "RNN_1", "Dense_0"]

    bi = torch.nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True)

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(2):
                x = nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.GRUCell(4)))(x)
            return x

    x = rand(2, 5, 3)
    v = fxt.convert(bi, jax.eval_shape(Stack().init, KEY, x))
    report = fxt.verify(bi, Stack(), v, x)
    assert report.ok, str(report)
