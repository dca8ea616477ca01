"""Whole torch models converted onto Linen and NNX models compute the same outputs."""

import jax
import numpy as np

from flaxen import nnx
from tests.interop import _models as m
from tests.interop._helpers import assert_close, fxt, nchw_to_nhwc, rand, run_torch, seed, torch

KEY = jax.random.PRNGKey(0)


def test_resnet_with_batchnorm_in_eval_mode():
    seed(0)
    t = m.TorchResNet()
    m.randomize_bn_stats(t)
    x = rand(2, 3, 8, 8)
    f = m.ResNet()
    variables = fxt.convert(t, jax.eval_shape(f.init, KEY, nchw_to_nhwc(x)))
    assert set(variables) == {"params", "batch_stats"}
    assert_close(f.apply(variables, nchw_to_nhwc(x)), run_torch(t, x), atol=1e-4)
    # The same from a bare state dict (no module types to lean on).
    again = fxt.convert(t.state_dict(), jax.eval_shape(f.init, KEY, nchw_to_nhwc(x)))
    assert_close(f.apply(again, nchw_to_nhwc(x)), run_torch(t, x), atol=1e-4)


def test_transformer_encoder_layer_with_key_padding_mask():
    seed(1)
    t = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                         batch_first=True)
    x = rand(2, 5, 8)
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    f = m.Encoder()
    mask = ~pad[:, None, None, :]  # torch: True = padded; flaxen: True = attend
    variables = fxt.convert(t, jax.eval_shape(f.init, KEY, x, mask))
    expected = run_torch(t, x, src_key_padding_mask=torch.from_numpy(pad))
    got = np.asarray(f.apply(variables, x, mask))
    # torch's inference path zeroes padded positions; compare the real tokens.
    valid = ~pad
    np.testing.assert_allclose(got[valid], expected.numpy()[valid], rtol=1e-5, atol=1e-5)
    report = fxt.verify(t, f, variables, x, flaxen_inputs=(x, mask),
                        torch_kwargs={"src_key_padding_mask": torch.from_numpy(pad)})
    assert report.ok, str(report)


def test_lstm_language_model():
    seed(2)
    t = m.TorchLM()
    ids = np.random.RandomState(0).randint(0, 11, size=(2, 7))
    f = m.LM()
    variables = fxt.convert(t.state_dict(), jax.eval_shape(f.init, KEY, ids))
    assert_close(f.apply(variables, ids), run_torch(t, torch.from_numpy(ids)))


def test_nnx_module_target_is_updated_in_place():
    seed(3)
    t = m.TorchCNN()
    m.randomize_bn_stats(t)
    model = m.NnxCNN(nnx.Rngs(0))
    out = fxt.convert(t, model, rules={"fc.weight": fxt.channels_first_flatten(4)})
    assert out is model
    x = rand(2, 3, 4, 4)
    np.testing.assert_allclose(model.bn.mean.value, t.bn.running_mean.numpy())
    assert_close(model(nchw_to_nhwc(x)), run_torch(t, x))


def test_nnx_state_target_returns_a_new_state():
    seed(4)
    t = m.TorchCNN()
    model = m.NnxCNN(nnx.Rngs(0))
    state = nnx.state(model)
    new = fxt.convert(t.state_dict(), state,
                      rules={"fc.weight": fxt.channels_first_flatten(4)})
    assert isinstance(new, nnx.State)
    np.testing.assert_allclose(new["conv"]["bias"].value, t.conv.bias.detach().numpy())
    nnx.update(model, new)
    x = rand(1, 3, 4, 4)
    assert_close(model(nchw_to_nhwc(x)), run_torch(t, x))


def test_nnx_attention_and_embedding():
    seed(5)

    class Tiny(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(9, 8, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(2, 8, decode=False, rngs=rngs)

        def __call__(self, ids):
            x = self.embed(ids)
            return self.attn(x)

    class TorchTiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(9, 8)
            self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, ids):
            x = self.embed(ids)
            return self.attn(x, x, x, need_weights=False)[0]

    t = TorchTiny()
    model = fxt.convert(t, Tiny(nnx.Rngs(0)))
    ids = np.array([[1, 4, 8, 0]])
    assert_close(model(ids), run_torch(t, torch.from_numpy(ids)))


def test_layout_on_the_device_gives_the_same_arrays(monkeypatch):
    from flaxen.interop import _conversion

    seed(6)
    t = m.TorchResNet()
    x = np.ones((1, 8, 8, 3), np.float32)
    target = jax.eval_shape(m.ResNet().init, KEY, x)
    host = fxt.convert(t, target)
    monkeypatch.setattr(_conversion, "DEVICE_LAYOUT", True)  # what a GPU backend does
    device = fxt.convert(t, target)
    jax.tree_util.tree_map(np.testing.assert_array_equal, host, device)
    bias = np.array(host["params"]["Dense_0"]["bias"])
    with torch.no_grad():
        t.fc.weight.add_(1.0)  # converted arrays never alias torch memory
        t.fc.bias.add_(1.0)
    np.testing.assert_array_equal(host["params"]["Dense_0"]["bias"], bias)
    np.testing.assert_array_equal(device["params"]["Dense_0"]["kernel"],
                                  host["params"]["Dense_0"]["kernel"])
