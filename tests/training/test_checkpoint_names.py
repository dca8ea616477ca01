"""Flax 0.12.8's module-level names of flax.training.checkpoints: MP_ARRAY_PH, SCHEME_RE and
MultiprocessArrayType, and what flaxen does with them."""

import re
import typing

import numpy as np
import pytest

from flaxen import serialization
from flaxen.training import checkpoints


def test_constants_have_flaxs_values():
    assert checkpoints.MP_ARRAY_PH == "//GDAPlaceholder:"
    assert checkpoints.MultiprocessArrayType is typing.Any
    assert isinstance(checkpoints.SCHEME_RE, re.Pattern)


def test_scheme_re_splits_scheme_and_path():
    m = checkpoints.SCHEME_RE.match("gs://bucket/a/../ckpt")
    assert m.group("scheme") == "gs://" and m.group("path") == "bucket/a/../ckpt"
    m = checkpoints.SCHEME_RE.match("local/dir\nwith newline")
    assert m.group("scheme") is None and m.group("path") == "local/dir\nwith newline"
    assert checkpoints.safe_normpath("gs://bucket/a/../ckpt") == "gs://bucket/ckpt"


def test_legacy_file_with_multiprocess_placeholders_is_refused(tmp_path):
    # what Flax's pre-Orbax multiprocess save leaves in the msgpack file
    state = {"w": checkpoints.MP_ARRAY_PH + "w", "b": np.zeros(2, np.float32)}
    (tmp_path / "checkpoint_1").write_bytes(serialization.msgpack_serialize(state))
    with pytest.raises(ValueError, match="multiprocess array.*'w'.*Orbax"):
        checkpoints.restore_checkpoint(str(tmp_path), None)
    with pytest.raises(ValueError, match="_gda"):
        checkpoints.restore_checkpoint(str(tmp_path), {"w": np.zeros(2), "b": np.zeros(2)})


def test_ordinary_string_leaves_still_restore(tmp_path):
    state = {"name": "run-7", "b": np.ones(2, np.float32)}
    (tmp_path / "checkpoint_1").write_bytes(serialization.msgpack_serialize(state))
    restored = checkpoints.restore_checkpoint(str(tmp_path), None)
    assert restored["name"] == "run-7"
