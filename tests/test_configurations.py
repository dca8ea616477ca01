"""Tests for flaxen.configurations: flag reads, updates, env overrides, helpers."""

import os
import subprocess
import sys

import numpy as np
import pytest

import flaxen
from flaxen import configurations
from flaxen.configurations import Config, config


@pytest.fixture
def fresh_config(monkeypatch):
    """A private Config, so tests can define flags without touching the global one."""
    cfg = Config()
    monkeypatch.setattr(configurations, "config", cfg)
    return cfg


def test_package_root_exposes_the_same_config():
    assert flaxen.config is config
    assert flaxen.configurations.config is config


def test_defaults_match_flax_012():
    assert config.flax_return_frozendict is False
    assert config.flax_fix_rng_separator is False
    assert config.flax_use_orbax_checkpointing is True
    assert config.flax_preserve_adopted_names is False
    assert config.flax_profile is True
    assert config.flax_filter_frames is True
    assert config.flax_max_repr_depth is None
    assert config.flax_always_shard_variable is True


def test_update_and_holder_value():
    holder = configurations.flax_return_frozendict
    try:
        config.update("flax_return_frozendict", True)
        assert config.flax_return_frozendict is True
        assert holder.value is True
        config.update(holder, False)
        assert config.flax_return_frozendict is False
    finally:
        config.update("flax_return_frozendict", False)


def test_unknown_option_lists_known_ones():
    with pytest.raises(LookupError, match="flax_return_frozendict") as info:
        config.update("flax_retrun_frozendict", True)
    assert "flax_retrun_frozendict" in str(info.value)
    with pytest.raises(AttributeError, match="Known options: .*flax_profile"):
        config.flax_no_such_flag  # noqa: B018


def test_values_flax_accepts_are_accepted_and_bool_strings_are_parsed():
    try:
        config.update("flax_profile", "no")  # a truthy string in Flax: parsed here
        assert config.flax_profile is False
        config.update("flax_profile", " YES ")
        assert config.flax_profile is True
        config.update("flax_max_repr_depth", "4")
        assert config.flax_max_repr_depth == 4
        config.update("flax_max_repr_depth", 2.5)  # Flax stores any value; so does flaxen
        assert config.flax_max_repr_depth == 2.5
        config.update("flax_profile", None)
        assert config.flax_profile is None and not config.flax_profile
    finally:
        config.update("flax_profile", True)
        config.update("flax_max_repr_depth", None)
    assert config.flax_profile is True and config.flax_max_repr_depth is None


def test_lenient_bool_values():
    try:
        config.update("flax_profile", 0)
        assert config.flax_profile is False
        config.update("flax_profile", np.bool_(True))
        assert config.flax_profile is True
    finally:
        config.update("flax_profile", True)


def test_int_flag_update():
    try:
        config.update("flax_max_repr_depth", 3)
        assert config.flax_max_repr_depth == 3
    finally:
        config.update("flax_max_repr_depth", None)


def test_assignment_is_refused():
    with pytest.raises(AttributeError, match="update"):
        config.flax_profile = False
    assert config.flax_profile is True


def test_temp_flip_flag_restores_even_on_error():
    with config.temp_flip_flag("return_frozendict", True):
        assert config.flax_return_frozendict is True
    assert config.flax_return_frozendict is False
    with pytest.raises(RuntimeError):
        with config.temp_flip_flag("flax_profile", False):
            assert config.flax_profile is False
            raise RuntimeError("boom")
    assert config.flax_profile is True
    with pytest.raises(LookupError, match="nonexistent"):
        with config.temp_flip_flag("nonexistent", True):
            pass


def test_flag_holder_refuses_bool():
    with pytest.raises(TypeError, match=r"\.value"):
        bool(configurations.flax_profile)


def test_define_bool_state_and_env(fresh_config, monkeypatch):
    monkeypatch.setenv("FLAX_TEST_FEATURE", "On")
    holder = configurations.define_bool_state("test_feature", False, "a test flag")
    assert holder.name == "flax_test_feature"
    assert fresh_config.flax_test_feature is True and holder.value is True
    fresh_config.update("flax_test_feature", False)
    assert holder.value is False
    with pytest.raises(RuntimeError, match="already defined"):
        configurations.define_bool_state("test_feature", False, "again")


def test_bool_flag_without_env_uses_default(fresh_config, monkeypatch):
    monkeypatch.delenv("FLAX_OTHER", raising=False)
    configurations.bool_flag("flax_other", default=True, help="h")
    assert fresh_config.flax_other is True


def test_int_flag_env(fresh_config, monkeypatch):
    monkeypatch.setenv("FLAX_DEPTHY", "7")
    configurations.int_flag("flax_depthy", default=None, help="h")
    assert fresh_config.flax_depthy == 7
    monkeypatch.setenv("FLAX_BAD_DEPTH", "seven")
    with pytest.raises(ValueError, match="FLAX_BAD_DEPTH"):
        configurations.int_flag("flax_bad_depth", default=None, help="h")


@pytest.mark.parametrize("raw", ["y", "YES", "t", "True", "on", "1"])
def test_static_bool_env_true(monkeypatch, raw):
    monkeypatch.setenv("FLAXEN_T_VAR", raw)
    assert configurations.static_bool_env("FLAXEN_T_VAR", False) is True


@pytest.mark.parametrize("raw", ["n", "No", "f", "FALSE", "off", "0"])
def test_static_bool_env_false(monkeypatch, raw):
    monkeypatch.setenv("FLAXEN_T_VAR", raw)
    assert configurations.static_bool_env("FLAXEN_T_VAR", True) is False


def test_static_bool_env_unset_and_bad(monkeypatch):
    monkeypatch.delenv("FLAXEN_T_VAR", raising=False)
    assert configurations.static_bool_env("FLAXEN_T_VAR", True) is True
    assert configurations.static_bool_env("FLAXEN_T_VAR", False) is False
    monkeypatch.setenv("FLAXEN_T_VAR", "maybe")
    with pytest.raises(ValueError, match="FLAXEN_T_VAR.*maybe|maybe.*FLAXEN_T_VAR"):
        configurations.static_bool_env("FLAXEN_T_VAR", True)


def _import_config_with_env(**env):
    full = dict(os.environ, **env)
    code = ("from flaxen import config; "
            "print(config.flax_return_frozendict, config.flax_max_repr_depth)")
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True)


def test_environment_overrides_at_import():
    done = _import_config_with_env(FLAX_RETURN_FROZENDICT="true", FLAX_MAX_REPR_DEPTH="4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "4"]


def test_bad_environment_value_names_the_variable():
    done = _import_config_with_env(FLAX_RETURN_FROZENDICT="sometimes")
    assert done.returncode != 0
    assert "ValueError" in done.stderr and "FLAX_RETURN_FROZENDICT" in done.stderr


FLAX_0_12_8_FLAGS = {
    "flax_filter_frames": True,
    "flax_profile": True,
    "flax_use_orbax_checkpointing": True,
    "flax_preserve_adopted_names": False,
    "flax_return_frozendict": False,
    "flax_fix_rng_separator": False,
    "flax_use_flaxlib": False,
    "flax_array_ref": False,
    "flax_pytree_module": True,
    "flax_max_repr_depth": None,
    "flax_always_shard_variable": True,
    "flax_hijax_variable": False,
    "nnx_graph_mode": True,
    "nnx_graph_updates": True,
}


def test_every_flax_0_12_8_flag_with_its_default_holder_and_class_attribute():
    for name, default in FLAX_0_12_8_FLAGS.items():
        assert getattr(config, name) == default, name
        assert name in Config.__dict__, f"{name} is a class-level attribute as in Flax"
        assert Config.__dict__[name].__doc__
    for holder_name in ("flax_array_ref", "flax_pytree_module", "flax_hijax_variable"):
        holder = getattr(configurations, holder_name)
        assert isinstance(holder, configurations.FlagHolder)
    assert "no effect in flaxen" in configurations.flax_array_ref.help  # inert in Flax too


@pytest.mark.parametrize("name", ["flax_array_ref", "flax_pytree_module", "flax_use_flaxlib"])
def test_new_flags_update_and_environment(name):
    before = getattr(config, name)
    with config.temp_flip_flag(name[len("flax_"):], not before):
        assert getattr(config, name) is (not before)
    assert getattr(config, name) is before
    env = {**os.environ, name.upper(): "1" if not before else "0", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", f"from flaxen import config; print(config.{name})"],
        env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(not before)


def test_flag_holder_has_flax_signature_and_accepts_attributes():
    holder = configurations.FlagHolder("flax_profile", "profiles")
    assert holder.value is config.flax_profile  # reads the module's config
    assert holder.__name__ == "_profile" and "profiles" in holder.__doc__
    holder.extra = 1  # settable, as in Flax
    assert holder.extra == 1
    assert configurations.FlagHolder("nnx_graph_mode", "h").__name__ == "nnx_graph_mode"


def test_config_accepts_plain_attributes_but_not_flag_assignment():
    cfg = Config()
    cfg.my_note = "x"  # Flax's Config is an ordinary object for non-flag attributes
    assert cfg.my_note == "x"
    del cfg.my_note
    with pytest.raises(AttributeError, match="update"):
        config.flax_array_ref = True
    with pytest.raises(AttributeError):
        del config.flax_array_ref
    assert config.flax_array_ref is False


def test_flag_names_are_lowercased_like_flax(fresh_config, monkeypatch):
    monkeypatch.setenv("FLAX_MIXED_CASE", "true")
    holder = configurations.bool_flag("FLAX_Mixed_Case", default=False, help="h")
    assert holder.name == "flax_mixed_case" and fresh_config.flax_mixed_case is True


def test_variable_default_flags_take_effect_as_in_flax():
    import jax.numpy as jnp

    from flaxen import nnx

    assert nnx.use_eager_sharding.get_default() is True
    with config.temp_flip_flag("always_shard_variable", False):
        assert nnx.use_eager_sharding.get_default() is False
        assert nnx.using_eager_sharding() is False
        assert nnx.Param(jnp.ones(2)).get_metadata()["eager_sharding"] is False
        with nnx.use_eager_sharding(True):  # an explicit context wins over the flag
            assert nnx.using_eager_sharding() is True
    assert nnx.Param(jnp.ones(2)).get_metadata()["eager_sharding"] is True
    with config.temp_flip_flag("hijax_variable", True):
        assert nnx.var_defaults().hijax is True
        with nnx.var_defaults(hijax=False):
            assert nnx.var_defaults().hijax is False
    assert nnx.var_defaults().hijax is False


def test_pytree_module_flag_is_the_default_of_the_pytree_class_keyword():
    env = {**os.environ, "FLAX_PYTREE_MODULE": "0", "JAX_PLATFORMS": "cpu"}
    code = ("from flaxen import nnx\n"
            "class M(nnx.Module):\n    pass\n"
            "class P(nnx.Module, pytree=True):\n    pass\n"
            "print(M._pytree__is_pytree, P._pytree__is_pytree)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "True"]


def test_repr_lists_one_flag_a_line_in_definition_order():
    from flaxen import config

    lines = repr(config).split("\n")
    assert lines[0] == "Config(" and lines[-1] == ")"
    assert [line.split("=")[0].strip() for line in lines[1:-1]] == list(config._values)
    assert lines[1] == f"  flax_filter_frames={config.flax_filter_frames!r}, "
    assert not lines[-2].endswith(",")
