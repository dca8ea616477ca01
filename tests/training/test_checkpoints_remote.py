"""Legacy checkpoints on paths the local file system cannot serve go through flaxen.io.

A fake ``tf.io.gfile`` maps ``fake://`` URLs onto a temporary directory, so the remote code
path (io.GFile writes, io.rename commits, io.listdir listing) runs without TensorFlow.
"""

import glob as _glob
import os
import shutil
import types

import numpy as np
import pytest

from flaxen import config, errors, io
from flaxen.training import checkpoints

# Every test here saves in the legacy format, whose deprecation notice is incidental.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")


def fake_gfile(root):
    def local(path):
        assert path.startswith("fake://"), path
        return os.path.join(root, path[len("fake://"):])

    calls = []

    def record(name, fn):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)
        return wrapper

    def rename(src, dst, overwrite=False):
        if os.path.exists(local(dst)) and not overwrite:
            raise FileExistsError(dst)
        os.replace(local(src), local(dst))

    def listdir(path):
        # Object stores list folders with a trailing slash.
        return [n + "/" if os.path.isdir(os.path.join(local(path), n)) else n
                for n in os.listdir(local(path))]

    module = types.SimpleNamespace(
        GFile=lambda p, mode: open(local(p), mode),
        exists=lambda p: os.path.exists(local(p)),
        isdir=lambda p: os.path.isdir(local(p)),
        listdir=listdir,
        makedirs=lambda p: os.makedirs(local(p), exist_ok=True),
        remove=lambda p: os.remove(local(p)),
        rmtree=lambda p: shutil.rmtree(local(p)),
        rename=rename,
        glob=lambda p: ["fake://" + os.path.relpath(q, root) for q in _glob.glob(local(p))],
        stat=lambda p: types.SimpleNamespace(length=os.path.getsize(local(p))),
    )
    for name in ("GFile", "rename", "listdir", "remove"):
        setattr(module, name, record(name, getattr(module, name)))
    module.calls = calls
    return module


@pytest.fixture
def remote(tmp_path, monkeypatch):
    gfile = fake_gfile(str(tmp_path))
    monkeypatch.setattr(io, "_gfile", lambda: gfile)
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        yield gfile


def test_save_keep_latest_and_restore_through_io(tmp_path, remote):
    d = "fake://run/ckpts"
    for step in (1, 2, 3):
        path = checkpoints.save_checkpoint(d, {"w": np.arange(3) * step}, step, keep=2)
    assert path == "fake://run/ckpts/checkpoint_3"
    assert sorted(os.listdir(tmp_path / "run" / "ckpts")) == ["checkpoint_2", "checkpoint_3"]
    assert {"GFile", "rename", "listdir", "remove"} <= set(remote.calls)
    assert checkpoints.latest_checkpoint(d) == "fake://run/ckpts/checkpoint_3"
    assert checkpoints.available_steps(d) == [2, 3]
    restored = checkpoints.restore_checkpoint(d, {"w": np.zeros(3, int)})
    assert restored["w"].tolist() == [0, 3, 6]
    assert checkpoints.restore_checkpoint(d, None, step=2)["w"].tolist() == [0, 2, 4]
    with pytest.raises(errors.InvalidCheckpointError):
        checkpoints.save_checkpoint(d, {"w": np.zeros(3)}, 3)
    with pytest.raises(ValueError, match="checkpoint_7"):
        checkpoints.restore_checkpoint(d, None, step=7)
    # Nothing there: the target comes back, as for a missing local directory.
    assert checkpoints.restore_checkpoint("fake://nowhere", {"a": 1}) == {"a": 1}


def test_local_paths_in_tf_mode_also_go_through_io(tmp_path, monkeypatch):
    remote = fake_gfile(str(tmp_path))

    def as_url(path):
        return "fake://" + path.lstrip("/")

    def forward(name):
        # In TF mode local paths go to gfile too: map "/x" to fake://x (under tmp_path).
        def call(path, *args, **kwargs):
            if name == "rename":
                args = (as_url(args[0]), *args[1:])
            return getattr(remote, name)(as_url(path), *args, **kwargs)
        return call

    names = ("GFile", "exists", "isdir", "makedirs", "remove", "rmtree", "listdir", "rename")
    monkeypatch.setattr(io, "_gfile", lambda: types.SimpleNamespace(
        **{name: forward(name) for name in names}))
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        with io.override_mode(io.BackendMode.TF):
            checkpoints.save_checkpoint("/ckpt", {"a": np.ones(2)}, 5)
            out = checkpoints.restore_checkpoint("/ckpt", None)
    assert out["a"].tolist() == [1, 1]
    assert os.path.isfile(tmp_path / "ckpt" / "checkpoint_5")
    assert {"GFile", "rename", "listdir"} <= set(remote.calls)
