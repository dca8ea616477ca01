"""Bad inputs to convert: one TorchConversionError naming every problem, and rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen.errors import TorchConversionError
from tests.interop._helpers import fxt, rand, run_torch, seed, torch

KEY = jax.random.PRNGKey(0)


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(4)(x))
        return nn.Dense(2)(h)


def _mlp_target():
    return jax.eval_shape(MLP().init, KEY, jnp.ones((1, 3)))


def _torch_mlp(hidden=4):
    return torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 2))


def test_wrong_shapes_name_both_sides():
    with pytest.raises(TorchConversionError) as info:
        fxt.convert(_torch_mlp(hidden=5).state_dict(), _mlp_target())
    msg = str(info.value)
    assert "params/Dense_0/kernel (3, 4)" in msg and "(3, 5)" in msg
    assert "params/Dense_1/kernel (4, 2)" in msg and "(5, 2)" in msg
    assert len(info.value.problems) >= 3  # every mismatch, not just the first


def test_leftover_and_missing_keys_are_all_listed():
    sd = _torch_mlp().state_dict()
    sd["extra.weight"] = torch.zeros(7, 7)
    del sd["2.bias"]
    with pytest.raises(TorchConversionError) as info:
        fxt.convert(sd, _mlp_target())
    msg = str(info.value)
    assert "'extra.weight' (7, 7) maps nowhere" in msg
    assert "target leaf params/Dense_1/bias (2,) is not filled" in msg
    assert "rules=" in msg  # the fix


def test_non_tensor_in_state_dict():
    sd = dict(_torch_mlp().state_dict())
    sd["version"] = 3
    with pytest.raises(TorchConversionError, match=r"'version' holds a int, not a tensor"):
        fxt.convert(sd, _mlp_target())
    # ...and the suggested rule drops it.
    fxt.convert(sd, _mlp_target(), rules={"version": None})


def test_bad_target_and_source_types():
    with pytest.raises(TypeError, match="nnx.Module"):
        fxt.convert(_torch_mlp().state_dict(), [1, 2])
    with pytest.raises(TypeError, match="state_dict"):
        fxt.convert(42, _mlp_target())


def test_rules_pin_drop_transform_and_leaf_override():
    seed(1)
    t = _torch_mlp()
    x = rand(2, 3)
    # The torch layers registered in the opposite order of their use.
    sd = dict(t.state_dict())
    swapped = {k.replace("0.", "first.").replace("2.", "second."): v for k, v in sd.items()}
    swapped = dict(reversed(list(swapped.items())))
    v = fxt.convert(swapped, _mlp_target(), rules={"first": "params/Dense_0",
                                                   "second": "params/Dense_1"})
    np.testing.assert_allclose(MLP().apply(v, x), run_torch(t, x).numpy(), atol=1e-6)
    # Leaf override with a function, a pre-transform, and a drop.
    sd["aux.weight"] = torch.ones(1)
    v = fxt.convert(sd, _mlp_target(), rules={
        "aux": None,
        "2.bias": ("params/Dense_1/bias", lambda b: b * 0 + 7),
        "0.weight": lambda w: w * 2,
    })
    np.testing.assert_array_equal(v["params"]["Dense_1"]["bias"], [7, 7])
    np.testing.assert_allclose(v["params"]["Dense_0"]["kernel"],
                               2 * t[0].weight.detach().numpy().T)


def test_bad_rules_are_reported():
    with pytest.raises(TorchConversionError) as info:
        fxt.convert(_torch_mlp().state_dict(), _mlp_target(),
                    rules={"nope.weight": lambda w: w, "0": "params/Nowhere", "2": 5})
    msg = str(info.value)
    assert "'nope.weight' names no torch key" in msg
    assert "'2': int is not a rule" in msg
    assert "params/Nowhere" in msg


def test_unsupported_torch_features_are_reported():
    lstm = torch.nn.LSTM(3, 4, proj_size=2, batch_first=True)
    target = jax.eval_shape(nn.RNN(nn.LSTMCell(4)).init, KEY, jnp.ones((1, 2, 3)))
    with pytest.raises(TorchConversionError, match="proj_size"):
        fxt.convert(lstm, target)
    mha = torch.nn.MultiheadAttention(4, 2, add_bias_kv=True)
    f = nn.MultiHeadDotProductAttention(num_heads=2)
    with pytest.raises(TorchConversionError, match="add_bias_kv"):
        fxt.convert(mha, jax.eval_shape(f.init, KEY, jnp.ones((1, 2, 4))))


def test_error_pickles_with_its_problems():
    import pickle

    err = TorchConversionError(["a", "b"])
    again = pickle.loads(pickle.dumps(err))
    assert again.problems == ["a", "b"] and str(again) == str(err)


def test_import_without_torch_says_which_extra(tmp_path):
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "import flaxen.interop\n"
            "try:\n    import flaxen.interop.torch\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"JAX_PLATFORMS": "cpu", "PATH": ""}, cwd=str(tmp_path),
                         check=True).stdout
    assert "pip install 'flaxen[interop]'" in out
