"""NNX layers check their inputs' feature sizes and raise the layer shape error.

Flax's NNX layers leave this mistake to ``dot_general``/``conv_general_dilated``, whose error
names neither the layer nor the fix. flaxen's check reads static shapes only: under ``jit``
it runs once at trace time and adds nothing to the compiled computation.
"""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.layer_math.errors import LayerShapeError


def _chain_length(err: BaseException) -> int:
    n = 1
    while True:
        nxt = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
        if nxt is None:
            return n
        n, err = n + 1, nxt


def test_linear_wrong_width_names_shapes_and_fix():
    layer = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
    with pytest.raises(LayerShapeError) as info:
        layer(jnp.ones((2, 5)))
    err = info.value
    # Flax's layer lets dot_general raise TypeError: code catching that keeps working.
    assert isinstance(err, TypeError) and isinstance(err, ValueError)
    message = str(err)
    assert message.startswith("Linear: the input of shape (2, 5) has 5 features")
    assert "in_features=4" in message and "kernel has shape (4, 3)" in message
    assert "Pass inputs with 4 features there, or build the layer with in_features=5" in message
    assert _chain_length(err) == 1
    assert layer(jnp.ones((2, 4))).shape == (2, 3)


def test_linear_check_inside_jit_runs_at_trace_time_only():
    layer = nnx.Linear(4, 3, rngs=nnx.Rngs(0))

    @nnx.jit
    def apply(m, x):
        return m(x)

    assert apply(layer, jnp.ones((2, 4))).shape == (2, 3)
    with pytest.raises(LayerShapeError, match=r"input of shape \(2, 5\)") as info:
        apply(layer, jnp.ones((2, 5)))
    assert _chain_length(info.value) == 1
    # The check leaves no operation in the traced computation.
    graphdef, state = nnx.split(layer)
    jaxpr = jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.ones((2, 4)))
    prims = {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}
    assert prims <= {"dot_general", "add", "reshape", "broadcast_in_dim",
                     "convert_element_type"}, prims


def test_conv_wrong_channels():
    conv = nnx.Conv(4, 8, (3, 3), rngs=nnx.Rngs(0))
    assert conv(jnp.ones((1, 6, 6, 4))).shape == (1, 6, 6, 8)
    with pytest.raises(LayerShapeError) as info:
        conv(jnp.ones((1, 6, 6, 3)))
    assert isinstance(info.value, TypeError)
    message = str(info.value)
    assert "Conv: the input of shape (1, 6, 6, 3) has 3 features" in message
    assert "in_features=4" in message and "(3, 3, 4, 8)" in message


def test_grouped_conv_counts_all_input_channels():
    conv = nnx.Conv(4, 8, (3,), feature_group_count=2, rngs=nnx.Rngs(0))
    assert conv(jnp.ones((1, 5, 4))).shape == (1, 5, 8)
    with pytest.raises(LayerShapeError, match="in_features=4"):
        conv(jnp.ones((1, 5, 2)))


def test_linear_general_checks_every_contracted_axis():
    layer = nnx.LinearGeneral((2, 3), 4, axis=(-2, -1), rngs=nnx.Rngs(0))
    assert layer(jnp.ones((1, 2, 3))).shape == (1, 4)
    with pytest.raises(LayerShapeError) as info:
        layer(jnp.ones((1, 3, 3)))
    message = str(info.value)
    assert "has (3, 3) features on its axes (1, 2)" in message
    assert "in_features=(2, 3)" in message
