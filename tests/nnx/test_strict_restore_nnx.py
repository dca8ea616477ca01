"""Opt-in strict NNX restores: ``nnx.update(..., strict=True)`` and
``replace_by_pure_dict(..., strict=True)`` list every differing path and write nothing."""

import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import RestoreMismatchError


def _model(din: int = 2, dout: int = 3, seed: int = 0) -> nnx.Linear:
    return nnx.Linear(din, dout, rngs=nnx.Rngs(seed))


def test_update_strict_accepts_a_matching_state_and_writes_it():
    model, other = _model(), _model(seed=1)
    nnx.update(model, nnx.state(other), strict=True)
    assert jnp.array_equal(model.kernel[...], other.kernel[...])


def test_update_strict_lists_every_difference_and_writes_nothing():
    model = _model()
    before = model.kernel[...]
    wrong = nnx.state(nnx.Linear(4, 5, rngs=nnx.Rngs(0)))
    with pytest.raises(RestoreMismatchError) as err:
        nnx.update(model, wrong, strict=True)
    text = str(err.value)
    assert "/kernel" in text and "/bias" in text
    assert "(2, 3)" in text and "(4, 5)" in text
    assert jnp.array_equal(model.kernel[...], before)


def test_update_strict_reports_dtype_and_missing_paths():
    model = _model()
    state = nnx.state(model)
    pure = nnx.to_pure_dict(state)
    bad = {"kernel": pure["kernel"].astype(jnp.float16)}  # bias missing, kernel narrower
    with pytest.raises(RestoreMismatchError) as err:
        nnx.update(model, bad, strict=True)
    text = str(err.value)
    assert "float16" in text and "/bias" in text


def test_update_default_stays_permissive_as_in_flax():
    model = _model()
    nnx.update(model, {"kernel": jnp.zeros((4, 5))})  # no check unless asked
    assert model.kernel[...].shape == (4, 5)


def test_replace_by_pure_dict_strict():
    state = nnx.state(_model())
    good = nnx.to_pure_dict(nnx.state(_model(seed=3)))
    nnx.replace_by_pure_dict(state, good, strict=True)
    assert jnp.array_equal(state["kernel"][...], good["kernel"])
    with pytest.raises(RestoreMismatchError, match="/kernel"):
        state.replace_by_pure_dict({"kernel": jnp.zeros((9, 3)), "bias": good["bias"]},
                                   strict=True)
    assert jnp.array_equal(state["kernel"][...], good["kernel"])
