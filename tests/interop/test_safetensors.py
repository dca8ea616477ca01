"""flaxen.interop.safetensors: flax-format round trips and torch-written files."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen import nnx
from flaxen.errors import TorchConversionError
from tests.interop._helpers import fxt, rand, run_torch, seed, torch  # noqa: F401

fst = pytest.importorskip("flaxen.interop.safetensors")
st_torch = pytest.importorskip("safetensors.torch")

KEY = jax.random.PRNGKey(0)


def _variables():
    f = nn.Sequential([nn.Dense(3), nn.BatchNorm(use_running_average=True)])
    return f.init(KEY, jnp.ones((1, 2)))


def test_linen_round_trip_keys_and_metadata(tmp_path):
    path = str(tmp_path / "w.safetensors")
    v = _variables()
    fst.save_file(v, path, metadata={"note": "hello"})
    meta = fst.read_metadata(path)
    assert meta == {"format": "flax", "note": "hello"}
    from safetensors import safe_open

    with safe_open(path, framework="np") as f:
        assert sorted(f.keys()) == ["batch_stats.layers_1.mean", "batch_stats.layers_1.var",
                                    "params.layers_0.bias", "params.layers_0.kernel",
                                    "params.layers_1.bias", "params.layers_1.scale"]
    nested = fst.load_file(path)
    jax.tree_util.tree_map(np.testing.assert_array_equal, nested, jax.tree_util.tree_map(
        np.asarray, v))
    restored = fst.load_file(path, v)
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(v)


def test_bfloat16_and_casting_to_the_target(tmp_path):
    path = str(tmp_path / "bf.safetensors")
    tree = {"params": {"w": jnp.arange(4, dtype=jnp.bfloat16)}}
    fst.save_file(tree, path)
    assert fst.load_file(path)["params"]["w"].dtype == jnp.bfloat16
    out = fst.load_file(path, {"params": {"w": jnp.zeros(4, jnp.float32)}})
    assert out["params"]["w"].dtype == jnp.float32
    np.testing.assert_array_equal(out["params"]["w"], [0, 1, 2, 3])


def test_nnx_state_round_trip(tmp_path):
    path = str(tmp_path / "nnx.safetensors")
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    fst.save_file(nnx.state(model), path)
    other = nnx.Linear(2, 3, rngs=nnx.Rngs(1))
    fst.load_file(path, other)
    np.testing.assert_array_equal(other.kernel.value, model.kernel.value)


def test_torch_written_file_goes_through_convert(tmp_path):
    seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    path = str(tmp_path / "torch.safetensors")
    st_torch.save_file(t.state_dict(), path, metadata={"format": "pt"})
    f = nn.Sequential([nn.Dense(3), nn.LayerNorm(epsilon=1e-5)])
    v = fst.load_file(path, jax.eval_shape(f.init, KEY, jnp.ones((1, 4))))
    x = rand(2, 4)
    np.testing.assert_allclose(f.apply(v, x), run_torch(t, x).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(TorchConversionError, match="'pt'"):
        fst.load_file(path)  # a torch file needs a target to be converted into


def test_shape_mismatch_is_listed(tmp_path):
    path = str(tmp_path / "w.safetensors")
    fst.save_file({"params": {"a": np.zeros(2), "b": np.zeros(3)}}, path)
    with pytest.raises(TorchConversionError) as info:
        fst.load_file(path, {"params": {"a": np.zeros(5), "b": np.zeros(6)}})
    assert "params.a: file has shape (2,), target wants (5,)" in str(info.value)
    assert len(info.value.problems) == 2


def test_errors_name_the_file(tmp_path):
    from safetensors import SafetensorError

    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(b"garbage")
    for read in (fst.load_file, fst.read_metadata):
        with pytest.raises(SafetensorError) as info:
            read(str(bad))
        assert f'"{bad}"' in str(info.value) and "header" in str(info.value)
        assert info.value.__cause__ is None and info.value.__suppress_context__
    missing_dir = tmp_path / "no_such_dir" / "w.safetensors"
    with pytest.raises(SafetensorError, match="no_such_dir"):
        fst.save_file({"params": {"a": np.zeros(2)}}, str(missing_dir))

    path = str(tmp_path / "w.safetensors")
    fst.save_file({"params": {"a": np.zeros(2)}}, path)
    with pytest.raises(TorchConversionError) as info:
        fst.load_file(path, {"params": {"a": np.zeros(5)}})
    assert info.value.problems == [f'"{path}": params.a: file has shape (2,), target wants (5,)']
    with pytest.raises(TorchConversionError) as info:  # keys differ: the torch matching path
        fst.load_file(path, {"params": {"b": np.zeros(2)}})
    assert all(p.startswith(f'"{path}": ') for p in info.value.problems)
    assert info.value.__cause__ is None and info.value.__suppress_context__
