"""Tests for flaxen.io: the default (local) backend, mode switching and the TF routing."""

import os
import types

import pytest

from flaxen import errors, io


def test_mode_override_restores_previous_and_rejects_unknown():
    assert io.io_mode is io.BackendMode.DEFAULT
    with io.override_mode(io.BackendMode.TF):
        assert io.io_mode is io.BackendMode.TF
        with io.override_mode(io.BackendMode.DEFAULT):
            assert io.io_mode is io.BackendMode.DEFAULT
        assert io.io_mode is io.BackendMode.TF
    assert io.io_mode is io.BackendMode.DEFAULT
    with pytest.raises(ValueError, match="Unknown io backend 'tf'.*BackendMode.TF"):
        io.set_mode("tf")
    io.set_mode(io.BackendMode.TF)
    io.set_mode(io.BackendMode.DEFAULT)
    assert io.io_mode is io.BackendMode.DEFAULT


def test_local_file_operations(tmp_path):
    a = tmp_path / "a.bin"
    with io.GFile(a, "wb") as f:
        f.write(b"12345")
    with io.GFile(str(a), "rb") as f:
        assert f.read() == b"12345"
    with io.GFile(tmp_path / "t.txt", "w") as f:
        f.write("héllo")
    assert (tmp_path / "t.txt").read_bytes() == "héllo".encode()
    assert io.getsize(a) == 5 and io.exists(a) and not io.isdir(a)
    io.makedirs(tmp_path / "d" / "e")
    io.makedirs(tmp_path / "d" / "e")  # an existing directory is fine
    assert io.isdir(tmp_path / "d" / "e")
    assert sorted(io.listdir(tmp_path)) == ["a.bin", "d", "t.txt"]
    assert sorted(os.path.basename(p) for p in io.glob(str(tmp_path / "*.*"))) == [
        "a.bin", "t.txt"]

    io.copy(a, tmp_path / "b.bin")
    with pytest.raises(errors.AlreadyExistsError, match="b.bin.*overwrite=True"):
        io.copy(a, tmp_path / "b.bin")
    io.copy(tmp_path / "t.txt", tmp_path / "b.bin", overwrite=True)
    assert (tmp_path / "b.bin").read_bytes() == "héllo".encode()

    with pytest.raises(errors.AlreadyExistsError, match="a.bin"):
        io.rename(tmp_path / "b.bin", a)
    io.rename(tmp_path / "b.bin", a, overwrite=True)
    assert not io.exists(tmp_path / "b.bin") and io.getsize(a) == len("héllo".encode())

    io.remove(a)
    assert not io.exists(a)
    io.rmtree(tmp_path / "d")
    assert not io.exists(tmp_path / "d")


def test_tf_mode_and_remote_paths_use_gfile(monkeypatch):
    calls = []

    def record(name):
        return lambda *args, **kwargs: calls.append((name, args, kwargs)) or []

    fake = types.SimpleNamespace(
        **{n: record(n) for n in ("listdir", "glob", "makedirs", "remove", "rmtree", "copy",
                                   "rename", "exists", "isdir", "GFile")},
        stat=lambda p: types.SimpleNamespace(length=7),
    )
    monkeypatch.setattr(io, "_gfile", lambda: fake)
    # A URL path goes to gfile even in the default mode; a local one only in TF mode.
    io.listdir("gs://bucket/dir")
    assert calls[-1][0] == "listdir"
    with io.override_mode(io.BackendMode.TF):
        io.copy("/x", "/y")
        io.rename("/x", "/y", overwrite=True)
        assert io.getsize("/x") == 7
    assert calls[-2][0] == "copy" and calls[-2][2] == {"overwrite": False}
    assert calls[-1][0] == "rename" and calls[-1][2] == {"overwrite": True}


def test_tf_mode_without_tensorflow_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tf(name, *args, **kwargs):
        if name.startswith("tensorflow"):
            raise ImportError("no tensorflow here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tf)
    with io.override_mode(io.BackendMode.TF):
        with pytest.raises(ImportError, match="needs TensorFlow.*pip install"):
            io.exists("/tmp")


def test_flax_names_gfile_not_found_error_and_override_keyword(tmp_path):
    import importlib.util

    assert io.NotFoundError is FileNotFoundError
    try:
        io.GFile(str(tmp_path / "absent.txt"), "r")
    except io.NotFoundError:
        pass
    else:
        raise AssertionError("a missing file raises io.NotFoundError")
    has_tf = importlib.util.find_spec("tensorflow") is not None
    assert (io.gfile is not None) == has_tf
    with io.override_mode(override=io.BackendMode.TF):
        assert io.io_mode is io.BackendMode.TF
    io.set_mode(override=io.BackendMode.DEFAULT)
    assert io.io_mode is io.BackendMode.DEFAULT
