"""Opt-in strict restores: tree_mismatches, RestoreMismatchError, and the strict= arguments.

The default stays Flax's (the target gives the structure, the saved data the values, shapes
and dtypes unchecked); ``strict=True`` lists every path that differs, with both values.
"""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import config, errors, serialization
from flaxen._tree_compare import Mismatch, check_restored, tree_mismatches
from flaxen.core.frozen_dict import FrozenDict
from flaxen.training import checkpoints
from flaxen.training.train_state import TrainState

# A legacy save warns that the format is deprecated: incidental here, asserted in
# tests/test_deprecation_warnings.py.
legacy_notice = pytest.mark.filterwarnings(
    "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")


@pytest.fixture(params=[pytest.param("legacy", marks=legacy_notice), "orbax"])
def fmt(request):
    if request.param == "orbax":
        pytest.importorskip("orbax.checkpoint")
    with config.temp_flip_flag("use_orbax_checkpointing", request.param == "orbax"):
        yield request.param


def _params(width=3, dtype=np.float32):
    return {"Dense_0": {"kernel": np.ones((2, width), dtype), "bias": np.zeros(width, dtype)},
            "head": {"kernel": np.ones((width, 1), dtype)}}


# --- the pure comparison ---------------------------------------------------------------


def test_identical_trees_have_no_mismatch():
    assert tree_mismatches(_params(), _params()) == []
    assert tree_mismatches({"a": [1, 2.0], "b": None}, {"a": [3, 4.0], "b": None}) == []


def test_every_shape_and_dtype_difference_is_listed_with_both_values():
    found = tree_mismatches(_params(3), _params(4, np.float16))
    assert [(m.path, m.kind) for m in found] == [
        ("/Dense_0/bias", "shape"), ("/Dense_0/bias", "dtype"),
        ("/Dense_0/kernel", "shape"), ("/Dense_0/kernel", "dtype"),
        ("/head/kernel", "shape"), ("/head/kernel", "dtype"),
    ]
    assert found[0] == Mismatch("/Dense_0/bias", "shape", (3,), (4,))
    assert found[1] == Mismatch("/Dense_0/bias", "dtype", "float32", "float16")


def test_structure_differences_name_both_sides():
    target = {"a": np.zeros(2), "b": {"c": np.zeros(1)}, "n": None}
    restored = {"a": np.zeros(2), "b": {"d": np.zeros(1, np.int32)}, "n": np.zeros(3)}
    assert tree_mismatches(target, restored) == [
        Mismatch("/b/c", "structure", "float64[1]", "nothing"),
        Mismatch("/b/d", "structure", "nothing", "int32[1]"),
        Mismatch("/n", "structure", "nothing", "float64[3]"),
    ]


def test_lists_line_up_with_state_dicts_and_scalars_are_lenient_on_dtype():
    # A state dict writes list indices as '0', '1', ...; a Python int takes a saved int64.
    assert tree_mismatches({"l": [1, 2]}, {"l": {"0": np.int64(5), "1": 7}}) == []
    assert tree_mismatches({"s": 1.0}, {"s": np.zeros(2)}) == [
        Mismatch("/s", "shape", (), (2,))]


def test_works_on_abstract_and_jax_leaves():
    target = {"w": jax.ShapeDtypeStruct((2, 3), jnp.bfloat16)}
    assert tree_mismatches(target, {"w": jnp.zeros((2, 3), jnp.bfloat16)}) == []
    assert tree_mismatches(target, {"w": jnp.zeros((2, 3))}) == [
        Mismatch("/w", "dtype", "bfloat16", "float32")]


def test_check_restored_raises_one_error_listing_all_paths():
    with pytest.raises(errors.RestoreMismatchError) as info:
        check_restored(_params(3), _params(5), source="ckpts/checkpoint_9")
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, errors.FlaxError)
    message = str(err)
    assert 'restored from "ckpts/checkpoint_9"' in message
    assert "at 3 paths" in message
    assert "/Dense_0/kernel: shape (2, 3) in the target, (2, 5) restored" in message
    assert "/head/kernel: shape (3, 1) in the target, (5, 1) restored" in message
    assert message.rstrip().endswith("to take the saved values as they are.")
    assert len(err.mismatches) == 3
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == message


# --- serialization.from_state_dict / from_bytes --------------------------------------------


def test_from_state_dict_default_stays_lenient():
    restored = serialization.from_state_dict(_params(3), serialization.to_state_dict(_params(4)))
    assert restored["Dense_0"]["kernel"].shape == (2, 4)


def test_from_state_dict_strict_lists_shape_dtype_and_extra_keys():
    state = serialization.to_state_dict(_params(4, np.float16))
    state["Dense_1"] = {"bias": np.zeros(1)}
    with pytest.raises(errors.RestoreMismatchError) as info:
        serialization.from_state_dict(_params(3), state, strict=True)
    paths = {(m.path, m.kind) for m in info.value.mismatches}
    assert ("/Dense_1/bias", "structure") in paths
    assert ("/Dense_0/kernel", "shape") in paths and ("/Dense_0/kernel", "dtype") in paths
    ok = serialization.from_state_dict(_params(3), serialization.to_state_dict(_params(3)),
                                       strict=True)
    assert ok["Dense_0"]["kernel"].shape == (2, 3)


def test_from_state_dict_strict_through_registered_types():
    target = FrozenDict({"opt": optax.sgd(0.1, momentum=0.9).init(_params(3)),
                         "layers": [np.zeros(2), np.zeros(3)]})
    saved = serialization.to_state_dict(
        {"opt": optax.sgd(0.1, momentum=0.9).init(_params(3)),
         "layers": [np.zeros(2), np.zeros(4)]})
    with pytest.raises(errors.RestoreMismatchError) as info:
        serialization.from_state_dict(target, saved, strict=True)
    assert [m.path for m in info.value.mismatches] == ["/layers/1"]


def test_from_bytes_strict():
    data = serialization.to_bytes({"w": np.zeros((2, 2), np.float32)})
    assert serialization.from_bytes({"w": np.zeros(1)}, data)["w"].shape == (2, 2)
    with pytest.raises(errors.RestoreMismatchError, match=r"/w: shape \(1,\)"):
        serialization.from_bytes({"w": np.zeros(1)}, data, strict=True)


# --- checkpoints ----------------------------------------------------------------------


def test_restore_checkpoint_default_takes_saved_shapes(tmp_path, fmt):
    checkpoints.save_checkpoint(tmp_path, _params(4), step=1)
    restored = checkpoints.restore_checkpoint(tmp_path, _params(3))
    assert restored["Dense_0"]["kernel"].shape == (2, 4)


def test_restore_checkpoint_strict_lists_every_difference(tmp_path, fmt):
    checkpoints.save_checkpoint(tmp_path, _params(4, np.float16), step=1)
    with pytest.raises(errors.RestoreMismatchError) as info:
        checkpoints.restore_checkpoint(tmp_path, _params(3), strict=True)
    message = str(info.value)
    assert str(tmp_path / "checkpoint_1") in message
    assert "/Dense_0/kernel: shape (2, 3) in the target, (2, 4) restored" in message
    assert "/Dense_0/kernel: dtype float32 in the target, float16 restored" in message
    assert len(info.value.mismatches) == 6
    ok = checkpoints.restore_checkpoint(tmp_path, _params(4, np.float16), strict=True)
    assert ok["head"]["kernel"].shape == (4, 1)


def test_restore_checkpoint_strict_train_state(tmp_path, fmt):
    def state(width):
        return TrainState.create(apply_fn=None, params=_params(width), tx=optax.adam(1e-3))

    checkpoints.save_checkpoint(tmp_path, state(3), step=2)
    restored = checkpoints.restore_checkpoint(tmp_path, state(3), strict=True)
    assert int(restored.step) == 0
    with pytest.raises(errors.RestoreMismatchError) as info:
        checkpoints.restore_checkpoint(tmp_path, state(5), strict=True)
    paths = [m.path for m in info.value.mismatches]
    assert "/params/Dense_0/kernel" in paths
    # Adam's two moments (mu, nu) of each of the 3 resized parameters are listed too.
    assert sum(p.startswith("/opt_state/") for p in paths) == 2 * 3


def test_strict_restore_in_jitted_dtype_target(tmp_path, fmt):
    checkpoints.save_checkpoint(tmp_path, {"w": jnp.ones(3, jnp.bfloat16)}, step=0)
    with pytest.raises(errors.RestoreMismatchError, match="dtype float32 in the target, "
                                                          "bfloat16 restored"):
        checkpoints.restore_checkpoint(tmp_path, {"w": jnp.zeros(3)}, strict=True)
