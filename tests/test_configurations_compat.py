"""flaxen.config for code that patches or extends it the way Flax's config allows."""

from unittest import mock

import pytest

from flaxen import config
from flaxen.configurations import bool_flag


def test_swapping_values_gives_a_private_flag_set_and_restores_the_real_one():
    profile = config.flax_profile
    with mock.patch.object(config, "_values", {}):
        holder = bool_flag("compat_test", default=False, help="a test flag")
        assert config.compat_test is False and holder.value is False
        with pytest.raises(AttributeError, match="no option 'flax_profile'"):
            _ = config.flax_profile  # the real flags are out of sight while swapped
        config.update(holder, True)  # by holder
        assert config.compat_test is True
        config.update("compat_test", False)  # by name
        assert holder.value is False
        with pytest.raises(RuntimeError, match="already defined"):
            bool_flag("compat_test", default=True, help="again")
        with pytest.raises(LookupError, match="Unrecognized config option"):
            config.update("unknown", True)
        with config.temp_flip_flag("compat_test", True):
            assert config.compat_test is True
        assert config.compat_test is False
    # Back on the real store: the private flag is gone, the real ones read fast again.
    assert "compat_test" not in config._values and not hasattr(config, "compat_test")
    assert config._fast.flax_profile is profile
    with config.temp_flip_flag("profile", not profile):
        assert config.flax_profile is (not profile) and config._values["flax_profile"] is (
            not profile)
    assert config.flax_profile is profile


def test_values_mapping_and_holder_agree():
    from flaxen import configurations

    assert config._values["flax_return_frozendict"] is config.flax_return_frozendict
    config.update(configurations.flax_return_frozendict, True)
    try:
        assert configurations.flax_return_frozendict.value is True
        assert config._values["flax_return_frozendict"] is True
    finally:
        config.update("flax_return_frozendict", False)
    with pytest.raises(TypeError, match="must be a dict"):
        config._values = None
    with pytest.raises(AttributeError, match="update"):
        config.flax_profile = False


def test_module_temp_flip_flag_as_context_and_decorator():
    from flaxen.configurations import temp_flip_flag

    before = config.flax_fix_rng_separator

    @temp_flip_flag("fix_rng_separator", not before)
    def inside():
        return config.flax_fix_rng_separator

    assert inside() is (not before) and inside() is (not before)
    assert config.flax_fix_rng_separator is before
    with temp_flip_flag("flax_fix_rng_separator", not before):
        assert config.flax_fix_rng_separator is (not before)
    assert config.flax_fix_rng_separator is before


def test_flip_of_an_unknown_flag_and_holder_names_as_flax():
    from flaxen import configurations

    with pytest.raises(AttributeError, match="nonexistent"):
        with configurations.config.temp_flip_flag("nonexistent", True):
            pass
    assert configurations.flax_profile.__name__ == "_profile"
