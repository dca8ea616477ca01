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


def test_exclusions_are_what_hide_and_show_toggle():
    traceback_util.show_flax_in_tracebacks()
    without = len(jax_traceback_util._exclude_paths)
    traceback_util.hide_flax_in_tracebacks()
    assert len(jax_traceback_util._exclude_paths) - without == len(
        traceback_util._flax_exclusions)
    assert FLAXEN_DIR in traceback_util._flax_exclusions


def test_register_exclusion_hides_another_directory(tmp_path):
    extra = str(tmp_path)
    try:
        traceback_util.register_exclusion(extra)
        assert extra in jax_traceback_util._exclude_paths
        traceback_util.show_flax_in_tracebacks()
        assert extra not in jax_traceback_util._exclude_paths
        traceback_util.hide_flax_in_tracebacks()
        assert jax_traceback_util._exclude_paths.count(extra) == 1
    finally:
        traceback_util._flax_exclusions.discard(extra)
        while extra in jax_traceback_util._exclude_paths:
            jax_traceback_util._exclude_paths.remove(extra)


def _apply_shape_error_frames():
    """Runs Dense.apply with a kernel that does not fit the input; returns the tb frames."""
    import flaxen.linen as nn

    variables = nn.Dense(4).init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    with pytest.raises(flaxen.errors.ScopeParamShapeError) as info:
        nn.Dense(4).apply(variables, jnp.ones((1, 5)))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[0].name == "_apply_shape_error_frames"
    return [f for f in frames if os.path.abspath(f.filename).startswith(FLAXEN_DIR)]


def test_apply_shape_error_shows_no_flaxen_frame():
    traceback_util.hide_flax_in_tracebacks()
    assert _apply_shape_error_frames() == []


def test_apply_shape_error_shows_flaxen_frames_when_asked():
    traceback_util.show_flax_in_tracebacks()
    names = {f.name for f in _apply_shape_error_frames()}
    assert "apply" in names and "__call__" in names


def test_filter_frames_flag_off_at_import_shows_flaxen_frames():
    import subprocess
    import sys

    code = (
        "import os, traceback, jax, jax.numpy as jnp\n"
        "import flaxen, flaxen.linen as nn\n"
        "d = os.path.dirname(flaxen.__file__)\n"
        "v = nn.Dense(2).init(jax.random.PRNGKey(0), jnp.ones((1, 3)))\n"
        "try:\n"
        "    nn.Dense(2).apply(v, jnp.ones((1, 5)))\n"
        "except flaxen.errors.ScopeParamShapeError as e:\n"
        "    fs = traceback.extract_tb(e.__traceback__)\n"
        "    print(sum(os.path.abspath(f.filename).startswith(d) for f in fs))\n"
    )
    env = {**os.environ, "FLAX_FILTER_FRAMES": "false", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert int(out.stdout.strip()) > 0


def test_nnx_entry_points_hide_flaxen_frames():
    from flaxen import nnx

    traceback_util.hide_flax_in_tracebacks()
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

    @nnx.jit
    def step(m, x):
        return m(x)

    with pytest.raises(TypeError) as info:
        step(model, jnp.ones((1, 5)))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f for f in frames if os.path.abspath(f.filename).startswith(FLAXEN_DIR)] == []
    graphdef, state = nnx.split(model)
    with pytest.raises(Exception) as info:
        nnx.merge(graphdef, {"nope": 1})
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f for f in frames if os.path.abspath(f.filename).startswith(FLAXEN_DIR)] == []
