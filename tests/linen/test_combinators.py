"""Sequential: ordering, names, tuple/dict forwarding, empty error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn


def test_layers_applied_in_order_with_positional_names():
    model = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
    x = jnp.ones((3, 5))
    y, v = model.init_with_output(jax.random.key(0), x)
    p = v["params"]
    h = np.maximum(x @ p["layers_0"]["kernel"] + p["layers_0"]["bias"], 0)
    np.testing.assert_allclose(y, h @ p["layers_2"]["kernel"] + p["layers_2"]["bias"],
                               rtol=1e-5, atol=1e-6)


def test_tuple_and_dict_outputs_are_forwarded():
    model = nn.Sequential([
        lambda a, b: (a + b, a - b),
        lambda s, d: {"s": s, "d": d},
        lambda s, d: s * d,
    ])
    assert float(model.apply({}, 3.0, 1.0)) == 8.0


def test_keyword_arguments_reach_the_first_layer():
    model = nn.Sequential([lambda x, scale=1.0: x * scale, lambda x: x + 1])
    assert float(model.apply({}, 2.0, scale=3.0)) == 7.0


def test_layers_built_inline_belong_to_the_enclosing_module():
    # As in Flax: Modules constructed inside a compact method are children of that
    # method's Module, so the Sequential itself holds no parameters.
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Sequential([nn.Dense(3), nn.Dense(2)])(x)

    v = Net().init(jax.random.key(0), jnp.ones((1, 4)))
    assert set(v["params"]) == {"Dense_0", "Dense_1"}


def test_empty_sequential_is_an_error():
    with pytest.raises(ValueError, match="Empty Sequential"):
        nn.Sequential([]).init(jax.random.key(0), jnp.ones(2))


def test_sequential_function_layers_may_build_submodules_inline():
    mlp = nn.Sequential([
        lambda x: nn.Dense(x.shape[-1] + 1)(x),
        nn.relu,
        lambda x: nn.Dense(2)(x),
    ])
    y, v = mlp.init_with_output(jax.random.key(0), jnp.ones((3, 4)))
    assert y.shape == (3, 2)
    assert jax.tree_util.tree_map(jnp.shape, dict(v["params"])) == {
        "Dense_0": {"kernel": (4, 5), "bias": (5,)},
        "Dense_1": {"kernel": (5, 2), "bias": (2,)},
    }
