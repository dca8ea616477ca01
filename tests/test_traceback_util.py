"""Tests for flaxen.traceback_util: flaxen frames are hidden / shown on request."""

import os
import traceback

import jax
import jax.numpy as jnp
import pytest
from jax._src import source_info_util
from jax._src import traceback_util as jax_traceback_util

import flaxen
from flaxen import configurations, traceback_util

FLAXEN_DIR = os.path.dirname(os.path.abspath(flaxen.__file__))


@pytest.fixture(autouse=True)
def _restore_hiding():
    previous_mode = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "quiet_remove_frames")
    yield
    jax.config.update("jax_traceback_filtering", previous_mode)
    traceback_util.hide_flax_in_tracebacks()


def _flaxen_frames_of_error_through_jit(monkeypatch):
    # static_int_env raises a ValueError from inside flaxen, here under jax.jit's boundary.
    monkeypatch.setenv("FLAXEN_TB_TEST", "not-an-int")

    def user_fn(x):
        configurations.static_int_env("FLAXEN_TB_TEST", None)
        return x

    with pytest.raises(ValueError, match="FLAXEN_TB_TEST") as info:
        jax.jit(user_fn)(jnp.ones(2))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(f.name == "user_fn" for f in frames)
    return [f for f in frames if os.path.abspath(f.filename).startswith(FLAXEN_DIR)]


def test_hidden_by_default():
    assert configurations.config.flax_filter_frames is True
    assert traceback_util.is_hiding_flax_frames()
    assert FLAXEN_DIR in jax_traceback_util._exclude_paths
    assert FLAXEN_DIR in source_info_util._exclude_paths


def test_show_and_hide_toggle_the_exclusion_lists():
    traceback_util.show_flax_in_tracebacks()
    assert FLAXEN_DIR not in jax_traceback_util._exclude_paths
    assert FLAXEN_DIR not in source_info_util._exclude_paths
    assert configurations.config.flax_filter_frames is False
    traceback_util.hide_flax_in_tracebacks()
    traceback_util.hide_flax_in_tracebacks()
    assert jax_traceback_util._exclude_paths.count(FLAXEN_DIR) == 1
    assert source_info_util._exclude_paths.count(FLAXEN_DIR) == 1
    assert configurations.config.flax_filter_frames is True


def test_frames_hidden_in_error_through_jit(monkeypatch):
    traceback_util.hide_flax_in_tracebacks()
    assert _flaxen_frames_of_error_through_jit(monkeypatch) == []


def test_frames_shown_in_error_through_jit(monkeypatch):
    traceback_util.show_flax_in_tracebacks()
    frames = _flaxen_frames_of_error_through_jit(monkeypatch)
    assert any(f.name == "static_int_env" for f in frames)


def test_api_boundary_is_jaxs():
    assert traceback_util.api_boundary is jax_traceback_util.api_boundary
