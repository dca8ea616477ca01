"""Differential tests of ``layers_with_named_axes`` against the reference ``flax``.

Same key -> bit-identical parameters; same ``params_axes`` names; same variables and inputs
-> bit-identical outputs; same error classes; same dataclass fields and reprs.
"""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("flax")

from flax.linen import partitioning as fpart  # noqa: E402
from flax.linen.experimental import layers_with_named_axes as F  # noqa: E402

from flaxen.linen.experimental import layers_with_named_axes as L  # noqa: E402

KEY = jax.random.PRNGKey(42)
RNG = np.random.RandomState(7)


def _flat(tree, prefix=()):
    if isinstance(tree, dict) or hasattr(tree, "items") and not hasattr(tree, "names"):
        out = {}
        for k, v in tree.items():
            out.update(_flat(v, prefix + (k,)))
        return out
    return {prefix: tree}


def _same_array(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), "arrays differ"


def _same_variables(ours, theirs):
    ours, theirs = _flat(ours), _flat(theirs)
    assert sorted(ours) == sorted(theirs)
    for path in ours:
        if path[0].endswith("_axes"):
            assert type(ours[path]).__name__ == type(theirs[path]).__name__ == "AxisMetadata"
            assert ours[path].names == theirs[path].names, path
        else:
            _same_array(ours[path], theirs[path])


def _compare(ours, theirs, *args, method=None, init_args=None):
    """init both with the same key, then apply flax's variables to both."""
    init_args = args if init_args is None else init_args
    v_ours = ours.init(KEY, *init_args)
    v_theirs = theirs.init(KEY, *init_args)
    _same_variables(v_ours, v_theirs)
    y_ours = ours.apply(v_theirs, *args, method=method)
    y_theirs = theirs.apply(v_theirs, *args, method=method)
    _same_array(y_ours, y_theirs)


def _x(*shape, dtype=jnp.float32):
    return jnp.asarray(RNG.randn(*shape) * 2 + 0.5, dtype)


# ----------------------------------------------------------------------------- Dense
DENSE_CASES = [
    (dict(features=4, kernel_axes=("embed", "mlp")), (2, 3)),
    (dict(features=5, use_bias=False), (2, 3)),
    (dict(features=3, kernel_axes=("a", "b"), dtype=jnp.bfloat16, param_dtype=jnp.bfloat16),
     (2, 4)),
    (dict(features=2, kernel_axes=("e", "m"), precision=jax.lax.Precision.HIGHEST,
          bias_init=jax.nn.initializers.normal(0.5)), (2, 3, 4)),
    (dict(features=3, kernel_axes=("e", "m"), dtype=jnp.float16, param_dtype=jnp.float32,
          kernel_init=jax.nn.initializers.xavier_uniform()), (1, 4)),
]


@pytest.mark.parametrize("kwargs, shape", DENSE_CASES)
def test_dense_matches_flax(kwargs, shape):
    _compare(L.Dense(**kwargs), F.Dense(**kwargs), _x(*shape))


def test_dense_same_error_without_kernel_axes():
    for mod in (L, F):
        with pytest.raises(IndexError):
            mod.Dense(4).init(KEY, jnp.ones((1, 3)))


# ----------------------------------------------------------------------------- Embed
EMBED_CASES = [
    dict(num_embeddings=6, features=3),
    dict(num_embeddings=6, features=3, one_hot=True),
    dict(num_embeddings=5, features=4, dtype=jnp.bfloat16, param_dtype=jnp.float32),
    dict(num_embeddings=5, features=2, embedding_init=jax.nn.initializers.uniform()),
]


@pytest.mark.parametrize("kwargs", EMBED_CASES)
def test_embed_matches_flax(kwargs):
    ids = jnp.asarray(RNG.randint(0, kwargs["num_embeddings"], (2, 3)), jnp.int32)
    _compare(L.Embed(**kwargs), F.Embed(**kwargs), ids)


@pytest.mark.parametrize("attend_dtype", [None, jnp.bfloat16])
def test_embed_attend_matches_flax(attend_dtype):
    kwargs = dict(num_embeddings=6, features=3, attend_dtype=attend_dtype)
    _compare(L.Embed(**kwargs), F.Embed(**kwargs), _x(2, 3), method="attend",
             init_args=(jnp.array([0, 1]),))


def test_embed_cast_input_and_errors_match_flax():
    ids = jnp.array([[1.0, 3.0]])
    kwargs = dict(num_embeddings=4, features=2, cast_input_dtype=jnp.int32)
    _compare(L.Embed(**kwargs), F.Embed(**kwargs), ids)
    for mod in (L, F):
        with pytest.raises(ValueError, match="Input type must be an integer"):
            mod.Embed(4, 2).init(KEY, ids)


# ----------------------------------------------------------------------------- LayerNorm
class _FlaxLayerNormFixed(F.LayerNorm):
    """Flax's LayerNorm calls ``self.param_with_axes``, which Flax Modules lack; this adds it.

    With it, Flax's own maths and parameter creation run, giving the reference for scale and
    bias (the only change from Flax's layer).
    """

    def param_with_axes(self, name, *args, axes=None):
        return fpart.param_with_axes(name, *args, axes=axes, module=self)


LN_CASES = [
    (dict(), (2, 5), jnp.float32),
    (dict(epsilon=1e-2, use_bias=False), (2, 3, 4), jnp.float32),
    (dict(use_scale=False), (3, 4), jnp.float32),
    (dict(dtype=jnp.bfloat16, param_dtype=jnp.bfloat16), (2, 6), jnp.bfloat16),
    (dict(scale_init=jax.nn.initializers.normal(1.0),
          bias_init=jax.nn.initializers.normal(1.0)), (2, 4), jnp.float16),
]


@pytest.mark.parametrize("kwargs, shape, dtype", LN_CASES)
def test_layer_norm_matches_flax_with_param_with_axes_supplied(kwargs, shape, dtype):
    _compare(L.LayerNorm(**kwargs), _FlaxLayerNormFixed(**kwargs), _x(*shape, dtype=dtype))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_layer_norm_without_parameters_matches_flax_unpatched(dtype):
    kwargs = dict(use_scale=False, use_bias=False, dtype=dtype)
    _compare(L.LayerNorm(**kwargs), F.LayerNorm(**kwargs), _x(3, 5, dtype=dtype))


def test_layer_norm_with_parameters_fails_in_flax_but_works_in_flaxen():
    # a known Flax 0.12.8 bug (``mdl.param_with_axes``); flaxen creates the parameters
    with pytest.raises(AttributeError, match="param_with_axes"):
        F.LayerNorm().init(KEY, jnp.ones((1, 3)))
    assert set(L.LayerNorm().init(KEY, jnp.ones((1, 3)))["params"]) == {"scale", "bias"}


def test_helpers_match_flax():
    x = _x(2, 3, 4)
    for axes in ((-1,), (1, 2), -2):
        assert tuple(L._canonicalize_axes(3, axes)) == tuple(F._canonicalize_axes(3, axes))
        for a, b in zip(L._compute_stats(x, axes), F._compute_stats(x, axes), strict=True):
            _same_array(a, b)
    z = jnp.asarray(RNG.randn(3) + 1j * RNG.randn(3), jnp.complex64)
    _same_array(L._abs_sq(z), F._abs_sq(z))


# ----------------------------------------------------------------------------- surface
@pytest.mark.parametrize("name", ["Dense", "Embed", "LayerNorm"])
def test_dataclass_fields_and_repr_match_flax(name):
    ours, theirs = getattr(L, name), getattr(F, name)

    def fields(cls):
        return [(f.name, f.init, f.kw_only, f.default is dataclasses.MISSING)
                for f in dataclasses.fields(cls)]

    assert fields(ours) == fields(theirs)
    for f in dataclasses.fields(theirs):
        if f.default is not dataclasses.MISSING and f.name not in ("parent", "name"):
            d_ours = getattr(ours, f.name)
            assert type(d_ours) is type(f.default), f.name
            if not callable(f.default) or isinstance(f.default, type):
                assert d_ours == f.default, f.name
    args = {"Dense": (3,), "Embed": (5, 2), "LayerNorm": ()}[name]

    def clean(s):
        return re.sub(r"0x[0-9a-f]+", "0x", s)

    assert clean(repr(ours(*args))) == clean(repr(theirs(*args)))


def test_public_names_match_flax():
    theirs = {n for n in vars(F) if not n.startswith("__")}
    missing = sorted(n for n in theirs if not hasattr(L, n))
    assert not missing, missing
    key = jax.random.PRNGKey(5)
    for init in ("default_kernel_init", "default_embed_init"):
        _same_array(getattr(L, init)(key, (4, 3)), getattr(F, init)(key, (4, 3)))
