"""Differential tests: flaxen warns (class and count) where flax 0.12.8 does for its
deprecated APIs."""

import tempfile
import warnings

import flax
import flax.jax_utils
import flax.linen
import flax.training.checkpoints
import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen
import flaxen.jax_utils
import flaxen.linen
import flaxen.training.checkpoints
import flaxen.traverse_util


def _self_attention(lib):
    layer = lib.linen.SelfAttention(num_heads=1)
    x = jnp.ones((1, 2, 2))
    layer.apply(layer.init(jax.random.key(0), x), x)


def _traversals(lib):
    lib.traverse_util.ModelParamTraversal(lambda p, v: True)
    lib.traverse_util.t_identity["a"].filter(bool).tree()


def _pmean(lib):
    jax.pmap(lambda x: lib.jax_utils.pmean(x, "i"), axis_name="i")(jnp.ones((1, 2)))


def _legacy_saves(lib):
    with lib.config.temp_flip_flag("use_orbax_checkpointing", False):
        lib.training.checkpoints.save_checkpoint(tempfile.mkdtemp(), {"w": np.ones(2)}, 1)
        lib.training.checkpoints.save_checkpoint_multiprocess(tempfile.mkdtemp(),
                                                              {"w": np.ones(2)}, 1)


@pytest.mark.parametrize("use", [_self_attention, _traversals, _pmean, _legacy_saves])
def test_deprecation_warnings_match_flax(use):
    def classes(lib):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            use(lib)
        return [w.category.__name__ for w in record if issubclass(w.category, DeprecationWarning)]

    assert classes(flaxen) == classes(flax)
