"""flaxen.training.checkpoints against flax.training.checkpoints on shared directories."""

import os
import random

import flax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import checkpoints as ref
from flax.training import train_state as ref_ts

from flaxen import config
from flaxen.training import checkpoints as ours
from flaxen.training import train_state as our_ts

# flaxen's legacy saves warn that the format is deprecated (flax's notice comes from flax's
# own module, which pyproject.toml ignores): incidental to these comparisons.
legacy_notice = pytest.mark.filterwarnings(
    "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")


@pytest.fixture
def legacy():
    with config.temp_flip_flag("use_orbax_checkpointing", False), \
            flax.config.temp_flip_flag("use_orbax_checkpointing", False):
        yield


@pytest.fixture
def orbax_on():
    pytest.importorskip("orbax.checkpoint")
    with config.temp_flip_flag("use_orbax_checkpointing", True), \
            flax.config.temp_flip_flag("use_orbax_checkpointing", True):
        yield


def _tree():
    rng = np.random.RandomState(0)
    return {
        "params": {"Dense_0": {"kernel": rng.rand(3, 4).astype(np.float32),
                               "bias": jnp.zeros(4, jnp.bfloat16)}},
        "step": 7, "lr": 0.5, "name": "model", "data": [np.arange(5), (1, 2)],
        "scalar": np.float32(2.0), "none": None,
    }


def _states():
    tx = optax.adam(1e-2)
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    grads = {"w": jnp.ones((2, 3)), "b": jnp.full(3, 0.5)}
    theirs = ref_ts.TrainState.create(apply_fn=None, params=params, tx=tx)
    mine = our_ts.TrainState.create(apply_fn=None, params=params, tx=tx)
    return theirs.apply_gradients(grads=grads), mine.apply_gradients(grads=grads)


def _assert_tree_equal(a, b):
    assert type(a) is type(b) or (isinstance(a, np.ndarray) and isinstance(b, np.ndarray))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _assert_tree_equal(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


@legacy_notice
def test_same_file_bytes(tmp_path, legacy):
    a = ref.save_checkpoint(tmp_path / "flax", _tree(), 3)
    b = ours.save_checkpoint(tmp_path / "flaxen", _tree(), 3)
    assert os.path.basename(a) == os.path.basename(b)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()


@legacy_notice
def test_flax_writes_flaxen_restores_and_back(tmp_path, legacy):
    ref.save_checkpoint(tmp_path, _tree(), 1)
    _assert_tree_equal(ours.restore_checkpoint(tmp_path, None),
                       ref.restore_checkpoint(tmp_path, None))
    ours.save_checkpoint(tmp_path, _tree(), 2)
    assert ref.latest_checkpoint(tmp_path).endswith("checkpoint_2")
    assert not os.path.exists(tmp_path / "checkpoint_1")  # keep=1 applied across libraries
    _assert_tree_equal(ref.restore_checkpoint(tmp_path, None),
                       ours.restore_checkpoint(tmp_path, None))


@legacy_notice
def test_train_state_across_libraries(tmp_path, legacy):
    theirs, mine = _states()
    ref.save_checkpoint(tmp_path / "a", theirs, 1)
    ours.save_checkpoint(tmp_path / "b", mine, 1)
    empty_ours = our_ts.TrainState.create(apply_fn=None, params=mine.params, tx=mine.tx)
    empty_ref = ref_ts.TrainState.create(apply_fn=None, params=theirs.params, tx=theirs.tx)
    from_flax = ours.restore_checkpoint(tmp_path / "a", empty_ours)
    from_flaxen = ref.restore_checkpoint(tmp_path / "b", empty_ref)
    assert int(from_flax.step) == int(from_flaxen.step) == 1
    np.testing.assert_array_equal(from_flax.params["w"], from_flaxen.params["w"])
    np.testing.assert_array_equal(from_flax.opt_state[0].nu["b"], from_flaxen.opt_state[0].nu["b"])


@legacy_notice
def test_flax_tmp_file_ignored_and_replaced(tmp_path, legacy):
    ours.save_checkpoint(tmp_path, {"a": 1}, 1)
    (tmp_path / "checkpoint_tmp").write_bytes(b"\x81")  # as a killed flax save leaves it
    assert ref.latest_checkpoint(tmp_path) == ours.latest_checkpoint(tmp_path)
    ref.save_checkpoint(tmp_path, {"a": 2}, 2)
    assert ours.restore_checkpoint(tmp_path, None) == {"a": 2}


@legacy_notice
@pytest.mark.parametrize("seed", range(4))
def test_keep_rules_match(tmp_path, legacy, seed):
    rnd = random.Random(seed)
    keep = rnd.choice([0, 1, 2, 3])
    every = rnd.choice([None, 2, 3])
    steps = sorted(rnd.sample(range(0, 40), 12))
    for lib, sub in ((ref, "flax"), (ours, "flaxen")):
        for s in steps:
            lib.save_checkpoint(tmp_path / sub, {"s": s}, s, keep=keep, keep_every_n_steps=every)
        lib.save_checkpoint(tmp_path / sub, {"s": -1}, steps[4], overwrite=True, keep=keep)
    assert sorted(os.listdir(tmp_path / "flax")) == sorted(os.listdir(tmp_path / "flaxen"))
    assert ours.available_steps(tmp_path / "flax") == ref.available_steps(tmp_path / "flax")


def test_natural_sort_and_latest_match(tmp_path):
    rnd = random.Random(0)
    names = [f"ckpt_{v}" for v in (1, 2, 10, 0.5, -1.0, 1e5, 0.001, 3.25, 100)]
    names += ["ckpt_tmp", "ckpt_abc", "ckpt_7_gda", "ckpt_"]
    for _ in range(5):
        rnd.shuffle(names)
        assert ours.natural_sort(names) == ref.natural_sort(names)
        assert ours.natural_sort(names, signed=False) == ref.natural_sort(names, signed=False)
    for n in names:
        (tmp_path / n).write_bytes(b"")
    # Deliberate divergence: Flax lists any name starting with the prefix, so the stray
    # "ckpt_abc" wins its natural sort (and blocks later saves); flaxen only lists numeric steps.
    assert ref.latest_checkpoint(tmp_path, "ckpt_") == str(tmp_path / "ckpt_abc")
    assert ours.latest_checkpoint(tmp_path, "ckpt_") == str(tmp_path / "ckpt_100000.0")
    (tmp_path / "ckpt_abc").unlink()
    (tmp_path / "ckpt_").unlink()
    assert ours.latest_checkpoint(tmp_path, "ckpt_") == ref.latest_checkpoint(tmp_path, "ckpt_")


def test_convert_pre_linen_matches():
    params = {"Dense_10": {"kernel": 1}, "Conv_0": {"Dense_2": 3, "Dense_1": 4},
              "Dense_3": {"x": 1}, "bias": 2, "Dense_x": 5, "Block_2_1": 7, "layers_4": 1}
    assert ours.convert_pre_linen(params) == ref.convert_pre_linen(params)
    assert list(ours.convert_pre_linen(params)) == list(ref.convert_pre_linen(params))


def test_orbax_written_by_flax_restores_in_flaxen(tmp_path, orbax_on):
    tree = {"a": np.arange(4.0), "b": [1, 2], "c": jnp.ones((2, 3))}
    ref.save_checkpoint(tmp_path, tree, 5)
    template = {"a": np.zeros(4), "b": [0, 0], "c": jnp.zeros((2, 3))}
    got = ours.restore_checkpoint(tmp_path, template)
    want = ref.restore_checkpoint(tmp_path, template)
    np.testing.assert_array_equal(got["a"], want["a"])
    assert got["b"] == want["b"] == [1, 2]
    raw_ours = ours.restore_checkpoint(tmp_path, None)
    raw_ref = ref.restore_checkpoint(tmp_path, None)
    assert raw_ours.keys() == raw_ref.keys()


def test_orbax_written_by_flaxen_restores_in_flax(tmp_path, orbax_on):
    theirs, mine = _states()
    ours.save_checkpoint(tmp_path, {"model": mine, "config": {"dims": np.array([5, 3])}}, 2)
    target = {"model": ref_ts.TrainState.create(apply_fn=None, params=theirs.params,
                                                tx=theirs.tx),
              "config": {"dims": np.zeros(2, np.int64)}}
    restored = ref.restore_checkpoint(tmp_path, target)
    assert int(restored["model"].step) == 1
    np.testing.assert_array_equal(restored["model"].params["w"], mine.params["w"])
    np.testing.assert_array_equal(restored["config"]["dims"], [5, 3])
