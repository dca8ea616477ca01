"""Differential test: ``repr(config)`` is Flax's, character for character."""

import flax

import flaxen


def test_config_repr_matches_flax():
    # Compared on the same values: each side's flags as the other has them.
    with_flax_values = dict(flax.config._values)
    saved = dict(flaxen.config._values)
    try:
        for name, value in with_flax_values.items():
            flaxen.config.update(name, value)
        assert repr(flaxen.config) == repr(flax.config)
    finally:
        for name, value in saved.items():
            flaxen.config.update(name, value)
