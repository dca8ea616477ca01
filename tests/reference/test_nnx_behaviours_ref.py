"""Differential tests: behaviours real code relies on, flaxen.nnx next to flax.nnx 0.12.8.

Each test computes the same observable with both libraries (string and path filters, the order
of Rngs streams, what Rngs.split / split_rngs select, SpectralNorm's wrapped weights, the
repr depth flag) and asserts the results are equal.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import config as flaxen_config
from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")
flax_config = pytest.importorskip("flax").config

BOTH = pytest.mark.parametrize("lib", [nnx, fnnx], ids=["flaxen", "flax"])


def _paths(lib, state):
    return sorted(tuple(map(str, p)) for p, _ in lib.to_flat_state(state))


def _model(lib):
    class Model(lib.Module):
        def __init__(self, rngs):
            self.rngs = rngs
            self.dropout = lib.Dropout(0.5, rngs=rngs)
            self.linear = lib.Linear(2, 3, rngs=rngs)
            self.params = lib.Param(jnp.ones(1))
            self.w = lib.Param(jnp.zeros(1), tag="weights")

    return Model(lib.Rngs(params=0, dropout=1))


FILTERS = {
    "string_stream": lambda lib: "params",
    "string_attribute": lambda lib: "linear",
    "string_tag": lambda lib: "weights",
    "string_dropout": lambda lib: "dropout",
    "list_of_strings": lambda lib: ["params", "weights"],
    "path_contains": lambda lib: lib.PathContains("params"),
    "path_contains_substring": lambda lib: lib.PathContains("lin"),
    "path_contains_inexact": lambda lib: lib.PathContains("lin", exact=False),
    "path_in": lambda lib: lib.filterlib.PathIn(("linear", "kernel"), ("params",)),
    "not_string": lambda lib: lib.Not("params"),
    "all_type_and_path": lambda lib: lib.All(lib.Param, lib.PathContains("linear")),
    "rng_count": lambda lib: lib.RngCount,
    "with_tag": lambda lib: lib.WithTag("dropout"),
}


def _selected(lib, name):
    return _paths(lib, lib.state(_model(lib), FILTERS[name](lib)))


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_state_with_a_filter_selects_what_flax_selects(name):
    assert _selected(nnx, name) == _selected(fnnx, name)


def test_to_predicate_forms_match():
    for f in ("x", ["x"], ("a", "b")):
        assert repr(nnx.filterlib.to_predicate(f)) == repr(fnnx.filterlib.to_predicate(f))


def _split_groups(lib):
    m = _model(lib)
    _, *states = lib.split(m, lib.Param, "dropout", "params", ...)
    return [_paths(lib, s) for s in states]


def test_split_by_stream_names_matches():
    assert _split_groups(nnx) == _split_groups(fnnx)


@BOTH
def test_split_accepts_trailing_ellipses_and_refuses_a_middle_one(lib):
    m = lib.Linear(1, 1, rngs=lib.Rngs(0))
    assert len(lib.split(m, ..., ...)) == 3
    with pytest.raises(ValueError, match="can only be used as the last filters"):
        lib.split(m, ..., lib.Param)


def _of_type_on_a_type_attribute(lib):
    class HasType:
        type = lib.Param

    return lib.OfType(lib.Param)((), HasType())


def test_of_type_on_an_object_with_a_type_attribute():
    assert _of_type_on_a_type_attribute(nnx) == _of_type_on_a_type_attribute(fnnx)


def _rngs_order(lib):
    rngs = lib.Rngs(0, params=1, dropout=2)
    state_paths = _paths(lib, lib.state(rngs))
    repr_order = [name for name in ("params", "dropout", "default")
                  if f"{name}=RngStream" in repr(rngs)]
    repr_order.sort(key=lambda n: repr(rngs).index(f"{n}=RngStream"))
    return list(rngs), state_paths, repr_order, list(lib.Rngs({"b": 0, "a": 1}, c=2))


def test_rngs_stream_order_matches():
    assert _rngs_order(nnx) == _rngs_order(fnnx)


def _rngs_split_shapes(lib):
    rngs = lib.Rngs(params=0, dropout=1)
    out = []
    for rule in ({lib.RngStream: 3}, {lib.RngKey: 3, ...: None}, {"dropout": 2, ...: None},
                 {lib.PathContains("key"): 2, ...: None}):
        split = rngs.split(rule)
        out.append((split.params.key.shape, split.dropout.key.shape))
    return out


def test_rngs_split_filters_match():
    assert _rngs_split_shapes(nnx) == _rngs_split_shapes(fnnx)


def _split_rngs_shapes(lib):
    out = []
    for only in (lib.RngKey, "dropout", ..., lib.PathContains("params")):
        rngs = lib.Rngs(params=0, dropout=1)
        with lib.split_rngs(rngs, splits=4, only=only):
            out.append((rngs.params.key.shape, rngs.dropout.key.shape))
    return out


def test_split_rngs_selection_matches():
    assert _split_rngs_shapes(nnx) == _split_rngs_shapes(fnnx)


def _spectral(lib):
    layer = lib.MultiHeadAttention(2, 4, qkv_features=4, decode=False, rngs=lib.Rngs(0))
    sn = lib.SpectralNorm(layer, rngs=lib.Rngs(1))
    x = jnp.linspace(-1.0, 1.0, 24).reshape(1, 3, 8)[..., :4]
    outs = [np.asarray(sn(x, update_stats=True)) for _ in range(2)]
    kernels = {p: np.asarray(v[...]) for p, v in lib.to_flat_state(lib.state(layer, lib.Param))}
    stats = {p: np.asarray(v[...]) for p, v in lib.to_flat_state(lib.state(sn.batch_stats))}
    return outs, kernels, stats


def test_spectral_norm_leaves_the_same_weights_in_the_wrapped_layer():
    outs, kernels, stats = _spectral(nnx)
    f_outs, f_kernels, f_stats = _spectral(fnnx)
    for a, b in zip(outs, f_outs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert sorted(kernels) == sorted(f_kernels) and sorted(stats) == sorted(f_stats)
    for p in kernels:
        np.testing.assert_allclose(kernels[p], f_kernels[p], rtol=1e-5, atol=1e-6)
    for p in stats:
        np.testing.assert_allclose(stats[p], f_stats[p], rtol=1e-5, atol=1e-6)


def _deep_repr(lib, config, depth):
    class Block(lib.Module):
        def __init__(self):
            self.inner = lib.Linear(1, 1, use_bias=False, rngs=lib.Rngs(0))
            self.d = lib.data({"a": lib.Param(jnp.ones(1))})

    saved = config.flax_max_repr_depth
    config.update("flax_max_repr_depth", depth)
    try:
        text = repr(Block())
    finally:
        config.update("flax_max_repr_depth", saved)
    return [line for line in text.splitlines() if "<function" not in line]


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_max_repr_depth_cuts_reprs_as_flax_does(depth):
    assert _deep_repr(nnx, flaxen_config, depth) == _deep_repr(fnnx, flax_config, depth)
