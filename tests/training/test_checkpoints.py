"""Tests for flaxen.training.checkpoints: naming, keep rules, errors, crash safety, Orbax."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import config, errors, serialization
from flaxen.core.frozen_dict import FrozenDict
from flaxen.training import checkpoints
from flaxen.training.train_state import TrainState

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def legacy():
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        yield


def names(d):
    return checkpoints.natural_sort(os.listdir(d))


def test_natural_sort_documented_examples():
    ns = checkpoints.natural_sort
    assert ns(["ckpt_1", "ckpt_3", "ckpt_2"])[-1] == "ckpt_3"
    assert ns(["ckpt_0.01", "ckpt_0.1", "ckpt_0.001"])[-1] == "ckpt_0.1"
    assert ns(["ckpt_-1.0", "ckpt_1.0", "ckpt_1e5"])[-1] == "ckpt_1e5"
    assert ns(["c_1", "c_-2"]) == ["c_-2", "c_1"]
    assert ns(["c_1", "c_-2"], signed=False) == ["c_1", "c_-2"]


def test_save_restore_roundtrip_raw_and_target(tmp_path, legacy):
    target = {"w": np.arange(6.0).reshape(2, 3), "b": [np.int32(1), 2.5], "name": "x"}
    path = checkpoints.save_checkpoint(tmp_path, target, step=7)
    assert path == str(tmp_path / "checkpoint_7")
    with open(path, "rb") as f:
        assert f.read() == serialization.to_bytes(target)
    raw = checkpoints.restore_checkpoint(tmp_path, None)
    assert raw["b"] == {"0": 1, "1": 2.5} and raw["name"] == "x"
    np.testing.assert_array_equal(raw["w"], target["w"])
    template = {"w": np.zeros((2, 3)), "b": [np.int32(0), 0.0], "name": ""}
    restored = checkpoints.restore_checkpoint(str(tmp_path), template)
    assert isinstance(restored["b"], list) and restored["b"][1] == 2.5
    np.testing.assert_array_equal(restored["w"], target["w"])


def test_train_state_roundtrip(tmp_path, legacy):
    tx = optax.adam(1e-2)
    params = FrozenDict({"dense": {"kernel": jnp.ones((2, 3)), "bias": jnp.zeros(3)}})
    state = TrainState.create(apply_fn=None, params=params, tx=tx)
    state = state.apply_gradients(grads=FrozenDict({"dense": {"kernel": jnp.ones((2, 3)),
                                                              "bias": jnp.ones(3)}}))
    checkpoints.save_checkpoint(tmp_path, state, step=int(state.step))
    empty = TrainState.create(apply_fn=None, params=params, tx=tx)
    restored = checkpoints.restore_checkpoint(tmp_path, empty)
    assert int(restored.step) == 1
    assert isinstance(restored.params, FrozenDict)
    np.testing.assert_allclose(restored.params["dense"]["kernel"], state.params["dense"]["kernel"])
    np.testing.assert_allclose(restored.opt_state[0].mu["dense"]["bias"],
                               state.opt_state[0].mu["dense"]["bias"])


def test_bfloat16_and_big_arrays_stream_exact_bytes(tmp_path, legacy):
    target = {"a": jnp.ones((4, 5), jnp.bfloat16), "b": np.arange(300_000, dtype=np.int64).T,
              "c": np.asfortranarray(np.arange(12.0).reshape(3, 4)), "s": np.float32(3),
              "z": 1 + 2j, "n": None, "e": np.zeros((0, 2))}
    path = checkpoints.save_checkpoint(tmp_path, target, step=1)
    with open(path, "rb") as f:
        assert f.read() == serialization.to_bytes(target)
    raw = checkpoints.restore_checkpoint(tmp_path, None, parallel=False)
    assert raw["a"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(raw["c"], target["c"])


def test_parallel_read_of_multichunk_file(tmp_path, legacy, monkeypatch):
    from flaxen.training import _ckpt_io

    monkeypatch.setattr(_ckpt_io, "_READ_CHUNK", 1000)  # force many parallel reads
    target = {"x": np.random.RandomState(0).rand(5000)}
    checkpoints.save_checkpoint(tmp_path, target, step=1)
    np.testing.assert_array_equal(checkpoints.restore_checkpoint(tmp_path, None)["x"], target["x"])


def test_keep_and_keep_every_n_steps(tmp_path, legacy):
    for s in range(1, 12):
        checkpoints.save_checkpoint(tmp_path, {"s": s}, s, keep=2, keep_every_n_steps=3)
    assert names(tmp_path) == ["checkpoint_1", "checkpoint_4", "checkpoint_7",
                               "checkpoint_10", "checkpoint_11"]
    assert checkpoints.available_steps(tmp_path) == [1, 4, 7, 10, 11]


def test_keep_zero_keeps_everything_and_keep_one_keeps_latest(tmp_path, legacy):
    for s in range(3):
        checkpoints.save_checkpoint(tmp_path / "all", {"s": s}, s, keep=0)
    assert names(tmp_path / "all") == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    for s in range(3):
        checkpoints.save_checkpoint(tmp_path / "one", {"s": s}, s)
    assert names(tmp_path / "one") == ["checkpoint_2"]
    assert checkpoints.restore_checkpoint(tmp_path / "one", None) == {"s": 2}


def test_overwrite_rules(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 5)
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 7, keep=3)
    for step in (7, 6, 3):
        with pytest.raises(errors.InvalidCheckpointError, match=f"checkpoint_{step}"):
            checkpoints.save_checkpoint(tmp_path, {"a": 1}, step)
    checkpoints.save_checkpoint(tmp_path, {"a": 2}, 3, overwrite=True, keep=3)
    assert names(tmp_path) == ["checkpoint_3"]  # newer ones are dropped
    checkpoints.save_checkpoint(tmp_path, {"a": 3}, 3, overwrite=True)
    assert checkpoints.restore_checkpoint(tmp_path, None) == {"a": 3}


def test_prefix_and_float_steps(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 0.5, prefix="test_", keep=5)
    checkpoints.save_checkpoint(tmp_path, {"a": 2}, 1e5, prefix="test_", keep=5)
    checkpoints.save_checkpoint(tmp_path, {"a": 3}, 1)
    assert checkpoints.latest_checkpoint(tmp_path, prefix="test_").endswith("test_100000.0")
    assert checkpoints.available_steps(tmp_path, "test_", step_type=float) == [0.5, 1e5]
    assert checkpoints.restore_checkpoint(tmp_path, None, step=0.5, prefix="test_") == {"a": 1}
    with pytest.raises(ValueError, match="test_0.5.*float"):
        checkpoints.available_steps(tmp_path, "test_")


def test_latest_ignores_tmp_gda_and_orbax_tmp(tmp_path, legacy):
    assert checkpoints.latest_checkpoint(tmp_path) is None
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 1)
    (tmp_path / "checkpoint_tmp").write_bytes(b"half-written")
    (tmp_path / "checkpoint_9_gda").mkdir()
    (tmp_path / "checkpoint_8.orbax-checkpoint-tmp-123").mkdir()
    assert checkpoints.latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_1")
    assert checkpoints.restore_checkpoint(tmp_path, None) == {"a": 1}
    # The next save reuses (overwrites) the stale temporary file.
    checkpoints.save_checkpoint(tmp_path, {"a": 2}, 2)
    assert not (tmp_path / "checkpoint_tmp").exists()


def test_restore_missing_returns_target(tmp_path, legacy):
    sentinel = {"t": 1}
    assert checkpoints.restore_checkpoint(tmp_path / "nope", sentinel) is sentinel
    assert checkpoints.restore_checkpoint(tmp_path, sentinel) is sentinel
    assert checkpoints.restore_checkpoint(tmp_path / "checkpoint_4", sentinel) is sentinel


def test_restore_missing_step_names_file_and_available_steps(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 2)
    with pytest.raises(ValueError, match=r"checkpoint_7.*available steps.*2"):
        checkpoints.restore_checkpoint(tmp_path, None, step=7)
    checkpoint_file = tmp_path / "checkpoint_2"
    with pytest.raises(ValueError, match="is a file; pass its directory"):
        checkpoints.restore_checkpoint(checkpoint_file, None, step=2)
    # A file path restores that file.
    assert checkpoints.restore_checkpoint(checkpoint_file, None) == {"a": 1}


def test_restore_corrupt_file_names_it(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": np.ones(3)}, 1)
    checkpoints.save_checkpoint(tmp_path, {"a": np.ones(3)}, 2, keep=2)
    data = (tmp_path / "checkpoint_2").read_bytes()
    (tmp_path / "checkpoint_2").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r'checkpoint_2" is corrupt.*available steps.*1, 2'):
        checkpoints.restore_checkpoint(tmp_path, None)
    assert checkpoints.restore_checkpoint(tmp_path, None, step=1)["a"].tolist() == [1, 1, 1]


def test_restore_into_other_structure_names_path_and_file(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"params": {"Dense_0": {"kernel": np.ones(2)}}}, 1)
    with pytest.raises(ValueError, match=r"checkpoint_1.*Dense_1"):
        checkpoints.restore_checkpoint(tmp_path, {"params": {"Dense_1": {"kernel": np.ones(2)}}})


def test_restore_directory_that_is_not_orbax(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 1)
    (tmp_path / "checkpoint_5").mkdir()
    with pytest.raises(ValueError, match="checkpoint_5.*not an Orbax checkpoint"):
        checkpoints.restore_checkpoint(tmp_path, None)


def test_checkpoint_dir_that_is_a_file(tmp_path, legacy):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="afile.*existing file"):
        checkpoints.save_checkpoint(f, {"a": 1}, 1)
    with pytest.raises(NotADirectoryError, match="afile/sub.*part of the path is a file"):
        checkpoints.save_checkpoint(f / "sub", {"a": 1}, 1)


def test_non_writable_dir(tmp_path, legacy, monkeypatch):
    from flaxen.training import _ckpt_io

    real_open = os.open

    def deny(path, flags, *args):
        if str(path).endswith("checkpoint_tmp"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(_ckpt_io.os, "open", deny)
    with pytest.raises(PermissionError, match="checkpoint_tmp.*permission denied.*writable"):
        checkpoints.save_checkpoint(tmp_path, {"a": 1}, 1)
    assert checkpoints.latest_checkpoint(tmp_path) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_non_writable_dir_for_real(tmp_path, legacy):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            checkpoints.save_checkpoint(ro, {"a": 1}, 1)
    finally:
        ro.chmod(0o700)


def test_async_manager_saves_in_background_and_reports_errors(tmp_path, legacy):
    manager = checkpoints.AsyncManager()
    arr = np.zeros(3)
    checkpoints.save_checkpoint(tmp_path, {"a": arr}, 1, async_manager=manager)
    arr[:] = 5  # mutating after the call must not change what is saved
    manager.wait_previous_save()
    assert checkpoints.restore_checkpoint(tmp_path, None)["a"].tolist() == [0, 0, 0]

    def boom():
        raise RuntimeError("disk full")

    manager.save_async(boom)
    with pytest.raises(RuntimeError, match="disk full"):
        manager.wait_previous_save()
    manager.wait_previous_save()  # the error is reported once


def test_save_checkpoint_multiprocess_single_process(tmp_path, legacy):
    path = checkpoints.save_checkpoint_multiprocess(tmp_path, {"a": 1}, 3, keep=4)
    assert path == str(tmp_path / "checkpoint_3")
    assert checkpoints.restore_checkpoint(tmp_path, None) == {"a": 1}


def test_convert_pre_linen():
    params = {"Conv_0": {"Dense_2": 3, "Dense_1": 4}, "Dense_10": {"kernel": 1},
              "Dense_3": {"x": 1}, "bias": 2, "Dense_x": 5}
    out = checkpoints.convert_pre_linen(params)
    assert out == {"Conv_0": {"Dense_0": 4, "Dense_1": 3}, "Dense_0": {"x": 1},
                   "Dense_1": {"kernel": 1}, "bias": 2, "Dense_x": 5}
    assert checkpoints.convert_pre_linen(out) == out  # idempotent on Linen trees
    assert isinstance(checkpoints.convert_pre_linen(FrozenDict(params)), FrozenDict)


_WRITER = textwrap.dedent("""
    import sys, numpy as np
    from flaxen import config
    from flaxen.training import checkpoints
    config.update('flax_use_orbax_checkpointing', False)
    d = sys.argv[1]
    checkpoints.save_checkpoint(d, {'x': np.zeros(4)}, 1)
    print('first', flush=True)
    big = {f'p{i}': np.ones(8 << 20) for i in range(8)}  # 512 MiB: takes a while to write
    checkpoints.save_checkpoint(d, big, 2)
    print('second', flush=True)
""")


def test_killed_writer_leaves_previous_checkpoint(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        assert proc.stdout.readline().strip() == "first"
        tmp_file = tmp_path / "checkpoint_tmp"
        deadline = time.monotonic() + 60
        while not (tmp_file.exists() and tmp_file.stat().st_size > 0):
            assert time.monotonic() < deadline and proc.poll() is None, "writer never started"
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "checkpoint_2").exists()
    assert checkpoints.latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_1")
    assert checkpoints.restore_checkpoint(tmp_path, None)["x"].tolist() == [0, 0, 0, 0]
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        checkpoints.save_checkpoint(tmp_path, {"x": np.ones(1)}, 2)
    assert names(tmp_path) == ["checkpoint_2"]


def test_write_failure_midway_keeps_previous(tmp_path, legacy, monkeypatch):
    from flaxen.training import _ckpt_io

    checkpoints.save_checkpoint(tmp_path, {"x": np.zeros(2)}, 1)

    def failing_write(fd, view):
        os.write(fd, view[:1])  # part of the data reaches the file, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_ckpt_io, "_write_all", failing_write)
    with pytest.raises(OSError, match="No space"):
        checkpoints.save_checkpoint(tmp_path, {"x": np.ones(100)}, 2)
    assert (tmp_path / "checkpoint_tmp").stat().st_size == 1
    monkeypatch.undo()
    assert checkpoints.latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_1")
    assert checkpoints.restore_checkpoint(tmp_path, None)["x"].tolist() == [0, 0]


def _need_orbax():
    return pytest.importorskip("orbax.checkpoint")


def test_orbax_roundtrip_and_autodetect(tmp_path):
    _need_orbax()
    target = {"a": np.arange(4.0), "b": [1, 2], "c": jnp.ones((2, 3))}
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        for s in (1, 2, 3):
            checkpoints.save_checkpoint(tmp_path, target, s, keep=2)
    assert names(tmp_path) == ["checkpoint_2", "checkpoint_3"]
    assert os.path.isdir(tmp_path / "checkpoint_3")
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        restored = checkpoints.restore_checkpoint(tmp_path, target)
        raw = checkpoints.restore_checkpoint(tmp_path / "checkpoint_2", None)
    assert isinstance(restored["b"], list)
    np.testing.assert_array_equal(restored["c"], target["c"])
    np.testing.assert_array_equal(raw["a"], target["a"])


def test_orbax_checkpointer_argument(tmp_path):
    ocp = _need_orbax()
    ckptr = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    target = {"w": np.ones(3)}
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        path = checkpoints.save_checkpoint(tmp_path, target, 4, orbax_checkpointer=ckptr)
        assert checkpoints.restore_checkpoint(tmp_path, None)["w"].tolist() == [1, 1, 1]
        with pytest.raises(errors.InvalidCheckpointError):
            checkpoints.save_checkpoint(tmp_path, target, 4, orbax_checkpointer=ckptr)
        checkpoints.save_checkpoint(tmp_path, {"w": np.zeros(3)}, 4, overwrite=True,
                                    orbax_checkpointer=ckptr)
    assert path.endswith("checkpoint_4")
    out = checkpoints.restore_checkpoint(tmp_path, {"w": np.ones(3)}, step=4,
                                         orbax_checkpointer=ckptr)
    assert out["w"].tolist() == [0, 0, 0]


def test_falls_back_to_legacy_without_orbax(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "_orbax_module", lambda: None)
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        path = checkpoints.save_checkpoint(tmp_path, {"a": 1}, 1)
    assert os.path.isfile(path)
    assert checkpoints.restore_checkpoint(tmp_path, None) == {"a": 1}
