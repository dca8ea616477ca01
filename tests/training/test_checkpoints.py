"""Tests for flaxen.training.checkpoints: naming, keep rules, errors, crash safety, Orbax."""

import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import config, errors, serialization
from flaxen.core.frozen_dict import FrozenDict
from flaxen.training import checkpoints
from flaxen.training.train_state import TrainState

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A legacy save warns that the format is deprecated, as Flax's does: incidental here, asserted
# in tests/test_deprecation_warnings.py.
legacy_notice = pytest.mark.filterwarnings(
    "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")


@pytest.fixture
def legacy():
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        yield


@pytest.fixture(params=[pytest.param("legacy", marks=legacy_notice), "orbax"])
def fmt(request):
    """Runs a test once per on-disk format (Orbax is the default one)."""
    if request.param == "orbax":
        pytest.importorskip("orbax.checkpoint")
    with config.temp_flip_flag("use_orbax_checkpointing", request.param == "orbax"):
        yield request.param


def names(d):
    return checkpoints.natural_sort(os.listdir(d))


def test_natural_sort_documented_examples():
    ns = checkpoints.natural_sort
    assert ns(["ckpt_1", "ckpt_3", "ckpt_2"])[-1] == "ckpt_3"
    assert ns(["ckpt_0.01", "ckpt_0.1", "ckpt_0.001"])[-1] == "ckpt_0.1"
    assert ns(["ckpt_-1.0", "ckpt_1.0", "ckpt_1e5"])[-1] == "ckpt_1e5"
    assert ns(["c_1", "c_-2"]) == ["c_-2", "c_1"]
    assert ns(["c_1", "c_-2"], signed=False) == ["c_1", "c_-2"]


@legacy_notice
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


@legacy_notice
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


@legacy_notice
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


@legacy_notice
def test_parallel_read_of_multichunk_file(tmp_path, legacy, monkeypatch):
    from flaxen.training import _ckpt_io

    monkeypatch.setattr(_ckpt_io, "_READ_CHUNK", 1000)  # force many parallel reads
    target = {"x": np.random.RandomState(0).rand(5000)}
    checkpoints.save_checkpoint(tmp_path, target, step=1)
    np.testing.assert_array_equal(checkpoints.restore_checkpoint(tmp_path, None)["x"], target["x"])


@legacy_notice
def test_keep_and_keep_every_n_steps(tmp_path, legacy):
    for s in range(1, 12):
        checkpoints.save_checkpoint(tmp_path, {"s": s}, s, keep=2, keep_every_n_steps=3)
    assert names(tmp_path) == ["checkpoint_1", "checkpoint_4", "checkpoint_7",
                               "checkpoint_10", "checkpoint_11"]
    assert checkpoints.available_steps(tmp_path) == [1, 4, 7, 10, 11]


@legacy_notice
def test_keep_zero_keeps_everything_and_keep_one_keeps_latest(tmp_path, legacy):
    for s in range(3):
        checkpoints.save_checkpoint(tmp_path / "all", {"s": s}, s, keep=0)
    assert names(tmp_path / "all") == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    for s in range(3):
        checkpoints.save_checkpoint(tmp_path / "one", {"s": s}, s)
    assert names(tmp_path / "one") == ["checkpoint_2"]
    assert checkpoints.restore_checkpoint(tmp_path / "one", None) == {"s": 2}


@legacy_notice
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


@legacy_notice
def test_prefix_and_float_steps(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 0.5, prefix="test_", keep=5)
    checkpoints.save_checkpoint(tmp_path, {"a": 2}, 1e5, prefix="test_", keep=5)
    checkpoints.save_checkpoint(tmp_path, {"a": 3}, 1)
    assert checkpoints.latest_checkpoint(tmp_path, prefix="test_").endswith("test_100000.0")
    assert checkpoints.available_steps(tmp_path, "test_", step_type=float) == [0.5, 1e5]
    assert checkpoints.restore_checkpoint(tmp_path, None, step=0.5, prefix="test_") == {"a": 1}
    with pytest.raises(ValueError, match="test_0.5.*float"):
        checkpoints.available_steps(tmp_path, "test_")


@legacy_notice
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


def test_restore_missing_step_names_file_and_available_steps(tmp_path, fmt):
    checkpoints.save_checkpoint(tmp_path, {"a": np.ones(2)}, 2)
    with pytest.raises(ValueError, match=r"checkpoint_7.*available steps.*2"):
        checkpoints.restore_checkpoint(tmp_path, None, step=7)
    with pytest.raises(ValueError, match=r"checkpoint_7.*available steps.*2"):
        checkpoints.restore_checkpoint(tmp_path, {"a": np.zeros(2)}, step=7)
    # A checkpoint's own path restores that checkpoint.
    restored = checkpoints.restore_checkpoint(tmp_path / "checkpoint_2", None)
    assert restored["a"].tolist() == [1, 1]


@legacy_notice
def test_restore_step_from_a_file_path(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 2)
    with pytest.raises(ValueError, match="is a file; pass its directory"):
        checkpoints.restore_checkpoint(tmp_path / "checkpoint_2", None, step=2)


def _corrupt_checkpoint(path, how):
    if os.path.isfile(path):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        return
    if how == "metadata":  # Orbax's tree description
        target = path / "_METADATA"
        target.write_bytes(bytes(b ^ 0x5A for b in target.read_bytes()))
    else:  # the largest data file of the tensorstore
        files = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs
                 if os.sep + "d" + os.sep in os.path.join(r, f)
                 and "ocdbt.process" not in r]
        biggest = max(files, key=os.path.getsize)
        with open(biggest, "r+b") as f:
            f.truncate(os.path.getsize(biggest) // 2)


@pytest.mark.parametrize("how", ["metadata", "data"])
def test_restore_corrupt_checkpoint_names_it(tmp_path, fmt, how):
    if fmt == "legacy" and how == "metadata":
        pytest.skip("a legacy checkpoint is one file")
    checkpoints.save_checkpoint(tmp_path, {"a": np.ones(300)}, 1)
    checkpoints.save_checkpoint(tmp_path, {"a": np.ones(300)}, 2, keep=2)
    _corrupt_checkpoint(tmp_path / "checkpoint_2", how)
    for target in (None, {"a": np.zeros(300)}):
        with pytest.raises(ValueError, match=r'checkpoint_2" .*corrupt.*available steps.*1, 2'):
            checkpoints.restore_checkpoint(tmp_path, target)
    assert checkpoints.restore_checkpoint(tmp_path, None, step=1)["a"].tolist() == [1] * 300


def test_restore_into_other_structure_names_path_and_file(tmp_path, fmt):
    checkpoints.save_checkpoint(tmp_path, {"params": {"Dense_0": {"kernel": np.ones(2)}}}, 1)
    with pytest.raises(ValueError, match=r'checkpoint_1" does not match.*Dense_1.*Dense_0'):
        checkpoints.restore_checkpoint(tmp_path, {"params": {"Dense_1": {"kernel": np.zeros(2)}}})
    with pytest.raises(ValueError, match=r"checkpoint_1.*(Dense_0.*bias|bias.*Dense_0)"):
        checkpoints.restore_checkpoint(
            tmp_path, {"params": {"Dense_0": {"kernel": np.zeros(2), "bias": np.zeros(2)}}})


def test_restore_target_gives_structure_checkpoint_gives_values(tmp_path, fmt):
    # The Orbax migration guide restores into placeholders: a 0-d array where a (2,) array was
    # saved, an empty string where a string was saved. The saved values come back.
    checkpoints.save_checkpoint(tmp_path, [12, {"foo": "str", "bar": np.array((2, 3))},
                                           [1, 4, 10]], 4)
    restored = checkpoints.restore_checkpoint(tmp_path, [0, {"foo": "", "bar": np.array(0)},
                                                         [0, 0, 0]])
    assert isinstance(restored, list) and restored[0] == 12
    assert restored[1]["foo"] == "str" and restored[1]["bar"].tolist() == [2, 3]
    assert [int(x) for x in restored[2]] == [1, 4, 10]
    # A target leaf of another shape gets the saved array too.
    checkpoints.save_checkpoint(tmp_path, {"params": {"Dense_0": {"kernel": np.ones(2)}}}, 5)
    out = checkpoints.restore_checkpoint(tmp_path, {"params": {"Dense_0": {"kernel": np.zeros(3)}}})
    assert out["params"]["Dense_0"]["kernel"].tolist() == [1, 1]


def test_restore_train_state_into_changed_model(tmp_path, fmt):
    tx = optax.adam(1e-2)
    state = TrainState.create(apply_fn=None, params={"w": jnp.ones((2, 3))}, tx=tx)
    checkpoints.save_checkpoint(tmp_path, state, 1)
    same = TrainState.create(apply_fn=None, params={"w": jnp.zeros((2, 3))}, tx=tx)
    assert checkpoints.restore_checkpoint(tmp_path, same).params["w"].tolist() == [[1] * 3] * 2
    wider = TrainState.create(apply_fn=None, params={"w": jnp.zeros((2, 4))}, tx=tx)
    assert checkpoints.restore_checkpoint(tmp_path, wider).params["w"].shape == (2, 3)
    renamed = TrainState.create(apply_fn=None, params={"v": jnp.zeros((2, 3))}, tx=tx)
    with pytest.raises(ValueError, match=r"checkpoint_1.*params.*v"):
        checkpoints.restore_checkpoint(tmp_path, renamed)


@legacy_notice
def test_restore_directory_that_is_not_orbax(tmp_path, legacy):
    checkpoints.save_checkpoint(tmp_path, {"a": 1}, 1)
    (tmp_path / "checkpoint_5").mkdir()
    with pytest.raises(ValueError, match="checkpoint_5.*not an Orbax checkpoint"):
        checkpoints.restore_checkpoint(tmp_path, None)


def test_checkpoint_dir_that_is_a_file(tmp_path, fmt):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="afile.*existing file"):
        checkpoints.save_checkpoint(f, {"a": np.ones(1)}, 1)
    with pytest.raises(NotADirectoryError, match="afile/sub.*part of the path is a file"):
        checkpoints.save_checkpoint(f / "sub", {"a": np.ones(1)}, 1)
    assert f.read_text() == "x"


def test_non_writable_dir_is_refused_before_writing(tmp_path, fmt, monkeypatch):
    checkpoints.save_checkpoint(tmp_path, {"a": np.ones(1)}, 1)
    real_access = os.access
    monkeypatch.setattr(checkpoints.os, "access",
                        lambda p, mode, **k: False if str(p) == str(tmp_path)
                        else real_access(p, mode, **k))
    with pytest.raises(PermissionError, match=f"{tmp_path}.*not writable"):
        checkpoints.save_checkpoint(tmp_path, {"a": np.zeros(1)}, 2)
    monkeypatch.undo()
    assert checkpoints.available_steps(tmp_path) == [1]


@legacy_notice
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
def test_non_writable_dir_for_real(tmp_path, fmt):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            checkpoints.save_checkpoint(ro, {"a": np.ones(1)}, 1)
    finally:
        ro.chmod(0o700)


def _steps(d):
    return checkpoints.available_steps(d)


def _value(d, step=None):
    return checkpoints.restore_checkpoint(d, None, step=step)["s"].tolist()


def test_keep_one_overwrite_at_older_step_keeps_the_new_one(tmp_path, fmt):
    for s in (5, 7):
        checkpoints.save_checkpoint(tmp_path, {"s": np.array([s])}, s, keep=1)
    assert _steps(tmp_path) == [7]
    checkpoints.save_checkpoint(tmp_path, {"s": np.array([3])}, 3, keep=1, overwrite=True)
    assert _steps(tmp_path) == [3] and _value(tmp_path) == [3]
    # Overwriting the only checkpoint at its own step replaces it in place.
    checkpoints.save_checkpoint(tmp_path, {"s": np.array([33])}, 3, keep=1, overwrite=True)
    assert _steps(tmp_path) == [3] and _value(tmp_path) == [33]
    assert names(tmp_path) == ["checkpoint_3"]


def test_keep_one_with_stray_non_numeric_files(tmp_path, fmt):
    (tmp_path / "checkpoint_notes.txt").write_text("mine")
    (tmp_path / "checkpoint_").write_text("")
    (tmp_path / "checkpoint_best").mkdir()
    for s in (1, 2):
        checkpoints.save_checkpoint(tmp_path, {"s": np.array([s])}, s, keep=1)
    assert checkpoints.latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_2")
    assert _steps(tmp_path) == [2] and _value(tmp_path) == [2]
    checkpoints.save_checkpoint(tmp_path, {"s": np.array([1])}, 1, keep=1, overwrite=True)
    assert _steps(tmp_path) == [1] and _value(tmp_path) == [1]
    # Stray files are neither checkpoints nor deleted.
    assert (tmp_path / "checkpoint_notes.txt").read_text() == "mine"
    assert (tmp_path / "checkpoint_best").is_dir() and (tmp_path / "checkpoint_").exists()


def test_keep_every_n_steps_interplay(tmp_path, fmt):
    for s in range(0, 13):
        checkpoints.save_checkpoint(tmp_path, {"s": np.array([s])}, s, keep=1,
                                    keep_every_n_steps=5)
    # Flax's rule: among the old ones, keep the first non-zero step and then one every 5 steps
    # after the last kept (step 0 is never kept by it); the latest is always kept.
    assert _steps(tmp_path) == [1, 6, 11, 12]
    checkpoints.save_checkpoint(tmp_path, {"s": np.array([13])}, 13, keep=2,
                                keep_every_n_steps=5)
    assert _steps(tmp_path) == [1, 6, 11, 12, 13]
    # Overwriting an older step drops everything newer, the every-n ones included, but never
    # the checkpoint just written.
    checkpoints.save_checkpoint(tmp_path, {"s": np.array([7])}, 7, keep=1, overwrite=True,
                                keep_every_n_steps=5)
    assert _steps(tmp_path) == [1, 6, 7] and _value(tmp_path) == [7]
    checkpoints.save_checkpoint(tmp_path, {"s": np.array([4])}, 4, keep=1, overwrite=True)
    assert _steps(tmp_path) == [4] and _value(tmp_path) == [4]
    assert _value(tmp_path, step=4) == [4]


def test_orbax_transforms_add_param_with_default_and_rename(tmp_path):
    ocp = _need_orbax()
    tx = optax.sgd(0.1)
    params = {"Dense_0": {"kernel": jnp.arange(6.0).reshape(2, 3), "bias": jnp.ones(3)}}
    old = TrainState.create(apply_fn=None, params=params, tx=tx)
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        checkpoints.save_checkpoint(tmp_path, {"model": old, "config": {"lr": 0.1}}, 4)

    class CustomTrainState(TrainState):
        batch_stats: dict

    custom = {"model": CustomTrainState.create(
        apply_fn=None, params=jax.tree.map(jnp.zeros_like, params), tx=tx,
        batch_stats={"mean": jnp.arange(3.0)}), "config": {"lr": 0.0}}
    # The new field is not in the checkpoint: an error by default...
    with pytest.raises(ValueError, match=r"checkpoint_4.*/model/batch_stats/mean"):
        checkpoints.restore_checkpoint(tmp_path, custom, step=4)
    # ...and filled from the target with `orbax_transforms={}`, as the migration guide shows.
    restored = checkpoints.restore_checkpoint(tmp_path, custom, step=4, orbax_transforms={})
    assert type(restored["model"]) is CustomTrainState
    np.testing.assert_array_equal(restored["model"].params["Dense_0"]["kernel"],
                                  params["Dense_0"]["kernel"])
    np.testing.assert_array_equal(restored["model"].batch_stats["mean"], [0, 1, 2])
    assert restored["config"]["lr"] == 0.1

    # Renaming a layer: the target's Dense_1 takes the checkpoint's Dense_0.
    renamed = {"model": old.replace(params={"Dense_1": jax.tree.map(jnp.zeros_like,
                                                                    params["Dense_0"])}),
               "config": {"lr": 0.0}}
    with pytest.raises(ValueError, match=r"checkpoint_4.*Dense_1.*Dense_0"):
        checkpoints.restore_checkpoint(tmp_path, renamed)
    transforms = {r"(.*)Dense_1(.*)": ocp.Transform(original_key=r"\1Dense_0\2")}
    restored = checkpoints.restore_checkpoint(tmp_path, renamed, orbax_transforms=transforms)
    np.testing.assert_array_equal(restored["model"].params["Dense_1"]["kernel"],
                                  params["Dense_0"]["kernel"])
    np.testing.assert_array_equal(restored["model"].params["Dense_1"]["bias"], [1, 1, 1])
    assert "Dense_0" not in restored["model"].params


@legacy_notice
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


@legacy_notice
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
    import os, shutil, sys, time, numpy as np
    from flaxen import config
    from flaxen.training import _ckpt_io, checkpoints
    d, point = sys.argv[1], sys.argv[2]
    config.update('flax_use_orbax_checkpointing', point.startswith('orbax'))

    def stop_here():
        print('reached', flush=True)  # the parent kills us with SIGKILL now
        time.sleep(60)
        os._exit(3)

    checkpoints.save_checkpoint(d, {'x': np.zeros(4)}, 1)
    new, step, kwargs = {'x': np.ones(4), 'big': np.ones(1 << 20)}, 2, {}
    if point == 'legacy_write':  # killed while the new file is half written
        real_write_all = _ckpt_io._write_all
        def write_all(fd, view):
            real_write_all(fd, view[: len(view) // 2])
            stop_here()
        _ckpt_io._write_all = write_all
    elif point == 'async_write':  # the same, in an AsyncManager's background thread
        real_write_all = _ckpt_io._write_all
        def write_all(fd, view):
            real_write_all(fd, view[: len(view) // 2])
            stop_here()
        _ckpt_io._write_all = write_all
        kwargs = {'async_manager': checkpoints.AsyncManager()}
    elif point in ('orbax_write', 'orbax_overwrite'):
        # Orbax has written its temporary folder and is about to rename it into place.
        if point == 'orbax_overwrite':
            step, kwargs = 1, {'overwrite': True}
        real_rename = os.rename
        def rename(src, dst, *a, **k):
            if '.orbax-checkpoint-tmp' in os.fspath(src):
                stop_here()
            return real_rename(src, dst, *a, **k)
        os.rename = rename
    elif point == 'orbax_overwrite_staged':
        # The overwrite's staging folder is complete; the swap into place has not happened.
        step, kwargs = 1, {'overwrite': True}
        _ckpt_io.commit = lambda tmp, final: stop_here()
    elif point == 'orbax_cleanup':
        # The new checkpoint is committed; `keep` is deleting the old one, file by file.
        def rmtree(path, *a, **k):
            for root, _, files in os.walk(path):
                for f in files:
                    os.remove(os.path.join(root, f))
                    stop_here()
        shutil.rmtree = rmtree
    checkpoints.save_checkpoint(d, new, step, **kwargs)
    if 'async_manager' in kwargs:
        kwargs['async_manager'].wait_previous_save()
    print('finished', flush=True)
""")


def _run_writer_until(tmp_path, point):
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path), point],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        line = proc.stdout.readline().strip()
        assert line == "reached", f"writer ended without reaching {point!r}: {line!r}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def _assert_every_listed_checkpoint_restores(d):
    for step in checkpoints.available_steps(d):
        checkpoints.restore_checkpoint(d, None, step=step)


@pytest.mark.parametrize("point", [pytest.param("legacy_write", marks=legacy_notice),
                                   pytest.param("async_write", marks=legacy_notice),
                                   "orbax_write", "orbax_overwrite", "orbax_overwrite_staged"])
def test_killed_writer_leaves_previous_checkpoint(tmp_path, point):
    if point.startswith("orbax"):
        _need_orbax()
    _run_writer_until(tmp_path, point)
    leftovers = [n for n in os.listdir(tmp_path) if n != "checkpoint_1"]
    if point.startswith("orbax_overwrite"):
        # The staging folder of the overwrite (or Orbax's temporary folder inside its name).
        assert leftovers and all(".orbax-checkpoint-tmp" in n for n in leftovers)
    assert not (tmp_path / "checkpoint_2").exists()
    assert checkpoints.latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_1")
    assert checkpoints.available_steps(tmp_path) == [1]
    restored = checkpoints.restore_checkpoint(tmp_path, {"x": np.full(4, 7.0)})
    assert restored["x"].tolist() == [0, 0, 0, 0]
    # The next save works and leaves only finished checkpoints behind.
    with config.temp_flip_flag("use_orbax_checkpointing", point.startswith("orbax")):
        checkpoints.save_checkpoint(tmp_path, {"x": np.ones(1)}, 2)
    assert checkpoints.available_steps(tmp_path) == [2]
    assert checkpoints.restore_checkpoint(tmp_path, None)["x"].tolist() == [1]
    assert names(tmp_path) == ["checkpoint_2"]  # whatever the killed writer left is swept


def test_relative_checkpoint_dirs_work_and_come_back_as_given(tmp_path, fmt, monkeypatch):
    # The spec's guide saves to ckpt_dir='tmp/flax-checkpointing' and prints the relative path
    # it gets back; Orbax itself refuses relative paths, so the work uses absolute ones.
    monkeypatch.chdir(tmp_path)
    path = checkpoints.save_checkpoint_multiprocess("tmp", {"w": np.ones(2)}, step=1)
    assert path == os.path.join("tmp", "checkpoint_1")
    path = checkpoints.save_checkpoint("./tmp/", {"w": np.zeros(2)}, step=1, overwrite=True)
    assert path == os.path.join("tmp", "checkpoint_1")
    path = checkpoints.save_checkpoint(
        "tmp/flax-checkpointing", {"w": np.zeros(2)}, step=0, overwrite=True, keep=2)
    assert path == "tmp/flax-checkpointing/checkpoint_0"
    assert os.path.exists(tmp_path / path)
    assert checkpoints.latest_checkpoint("tmp/flax-checkpointing") == path
    assert checkpoints.restore_checkpoint("tmp/flax-checkpointing", None)["w"].tolist() == [0, 0]
    assert checkpoints.restore_checkpoint("tmp", {"w": np.ones(2)})["w"].tolist() == [0, 0]
    assert checkpoints.restore_checkpoint("tmp", None, step=1)["w"].tolist() == [0, 0]
    assert checkpoints.restore_checkpoint("tmp/checkpoint_1", None)["w"].tolist() == [0, 0]
    assert sorted(names(tmp_path / "tmp")) == ["checkpoint_1", "flax-checkpointing"]


def test_killed_during_keep_cleanup_leaves_no_half_deleted_checkpoint(tmp_path):
    _need_orbax()
    _run_writer_until(tmp_path, "orbax_cleanup")
    # The new checkpoint was committed before the clean-up began: it is the latest; the old
    # one, renamed before its deletion started, is no longer listed as a checkpoint.
    assert checkpoints.latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_2")
    assert checkpoints.available_steps(tmp_path) == [2]
    _assert_every_listed_checkpoint_restores(tmp_path)
    assert checkpoints.restore_checkpoint(tmp_path, None)["x"].tolist() == [1, 1, 1, 1]
    leftovers = [n for n in os.listdir(tmp_path) if n != "checkpoint_2"]
    assert leftovers and all(".orbax-checkpoint-tmp" in n for n in leftovers)
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        checkpoints.save_checkpoint(tmp_path, {"x": np.ones(1)}, 3)
    assert names(tmp_path) == ["checkpoint_3"]  # the next clean-up sweeps the leftover


@legacy_notice
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
        # Orbax refuses an existing step with a ValueError (as in Flax's Orbax mode)...
        with pytest.raises(ValueError, match="checkpoint_4.*already exists.*overwrite=True"):
            checkpoints.save_checkpoint(tmp_path, target, 4, orbax_checkpointer=ckptr)
        # ...and, as there, accepts an older step.
        checkpoints.save_checkpoint(tmp_path, target, 2, keep=5, orbax_checkpointer=ckptr)
        assert checkpoints.available_steps(tmp_path) == [2, 4]
        checkpoints.save_checkpoint(tmp_path, {"w": np.zeros(3)}, 4, overwrite=True,
                                    orbax_checkpointer=ckptr)
    assert path.endswith("checkpoint_4")
    out = checkpoints.restore_checkpoint(tmp_path, {"w": np.ones(3)}, step=4,
                                         orbax_checkpointer=ckptr)
    assert out["w"].tolist() == [0, 0, 0]


def test_falls_back_to_legacy_without_orbax(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "_orbax_module", lambda: None)
    with config.temp_flip_flag("use_orbax_checkpointing", True):
        with pytest.warns(DeprecationWarning, match="Flax Checkpointing will soon be deprecated"):
            path = checkpoints.save_checkpoint(tmp_path, {"a": 1}, 1)
    assert os.path.isfile(path)
    assert checkpoints.restore_checkpoint(tmp_path, None) == {"a": 1}
