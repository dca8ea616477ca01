"""Activation functions: formulas, special gradients, aliases, and the lazy PReLU export."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.linen import activation as act

X = np.linspace(-4.0, 8.0, 25, dtype=np.float32)


def test_public_names_exist():
    expected = (
        "celu elu gelu glu hard_sigmoid hard_silu hard_swish hard_tanh leaky_relu log_sigmoid "
        "log_softmax logsumexp one_hot relu relu6 selu sigmoid silu soft_sign softmax softplus "
        "standardize swish tanh normalize"
    ).split()
    for name in expected:
        assert callable(getattr(act, name)), name
    assert set(act.__all__) == set(expected) | {"PReLU"}


@pytest.mark.parametrize(
    "name, ref",
    [
        ("relu", lambda x: np.maximum(x, 0)),
        ("relu6", lambda x: np.clip(x, 0, 6)),
        ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
        ("silu", lambda x: x / (1 + np.exp(-x))),
        ("swish", lambda x: x / (1 + np.exp(-x))),
        ("soft_sign", lambda x: x / (np.abs(x) + 1)),
        ("softplus", lambda x: np.log1p(np.exp(x))),
        ("log_sigmoid", lambda x: -np.log1p(np.exp(-x))),
        ("hard_tanh", lambda x: np.clip(x, -1, 1)),
        ("hard_sigmoid", lambda x: np.clip(x + 3, 0, 6) / 6),
        ("hard_silu", lambda x: x * np.clip(x + 3, 0, 6) / 6),
        ("hard_swish", lambda x: x * np.clip(x + 3, 0, 6) / 6),
        ("elu", lambda x: np.where(x > 0, x, np.expm1(x))),
        ("celu", lambda x: np.where(x > 0, x, np.expm1(x))),
        ("leaky_relu", lambda x: np.where(x >= 0, x, 0.01 * x)),
        ("tanh", np.tanh),
        (
            "selu",
            lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
        ),
    ],
)
def test_elementwise_formulas(name, ref):
    got = np.asarray(getattr(act, name)(jnp.asarray(X)))
    np.testing.assert_allclose(got, ref(X.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_celu_and_elu_alpha():
    x = jnp.asarray(X)
    np.testing.assert_allclose(
        act.celu(x, alpha=2.0), np.where(X > 0, X, 2.0 * np.expm1(X / 2.0)), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        act.elu(x, alpha=2.0), np.where(X > 0, X, 2.0 * np.expm1(X)), rtol=1e-5, atol=1e-6
    )


def test_gelu_defaults_to_tanh_approximation():
    from math import erf, pi, sqrt

    x = X.astype(np.float64)
    approx = 0.5 * x * (1 + np.tanh(np.sqrt(2 / pi) * (x + 0.044715 * x**3)))
    exact = np.array([0.5 * v * (1 + erf(v / sqrt(2))) for v in x])
    np.testing.assert_allclose(act.gelu(jnp.asarray(X)), approx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        act.gelu(jnp.asarray(X), approximate=False), exact, rtol=1e-5, atol=1e-6
    )


def test_relu_and_relu6_gradients_at_kinks_are_zero():
    assert float(jax.grad(act.relu)(0.0)) == 0.0
    assert float(jax.grad(act.relu6)(0.0)) == 0.0
    assert float(jax.grad(act.relu6)(6.0)) == 0.0
    assert float(jax.grad(act.relu6)(3.0)) == 1.0


def test_glu_splits_along_axis():
    x = jnp.arange(8.0).reshape(2, 4) / 4
    a, b = x[:, :2], x[:, 2:]
    np.testing.assert_allclose(act.glu(x), a * jax.nn.sigmoid(b), rtol=1e-6)
    y = act.glu(x, axis=0)
    np.testing.assert_allclose(y, x[:1] * jax.nn.sigmoid(x[1:]), rtol=1e-6)


def test_one_hot_out_of_range_is_all_zeros():
    out = act.one_hot(jnp.array([0, 2, -1, 3]), 3)
    np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
    assert act.one_hot(jnp.array([1]), 2, axis=0).shape == (2, 1)
    assert act.one_hot(jnp.array([1]), 2, dtype=jnp.int8).dtype == jnp.int8


def test_softmax_where_and_log_softmax():
    x = jnp.array([1.0, 2.0, 3.0])
    where = jnp.array([True, False, True])
    p = act.softmax(x, where=where)
    np.testing.assert_allclose(p[jnp.array([0, 2])].sum(), 1.0, rtol=1e-6)
    assert float(p[1]) == 0.0
    np.testing.assert_allclose(act.log_softmax(x), np.log(act.softmax(x)), rtol=1e-5)


def test_logsumexp_sign_and_scaling():
    a = jnp.array([0.0, 0.0])
    value, sign = act.logsumexp(a, b=jnp.array([1.0, -2.0]), return_sign=True)
    assert float(sign) == -1.0
    np.testing.assert_allclose(value, 0.0, atol=1e-6)
    np.testing.assert_allclose(act.logsumexp(a), np.log(2.0), rtol=1e-6)


def test_standardize_and_normalize_alias():
    x = jnp.arange(6.0).reshape(2, 3)
    y = act.standardize(x)
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-4)
    assert act.normalize is act.standardize


def test_reuses_jax_functions_so_traces_match():
    assert act.relu is jax.nn.relu
    assert act.tanh is jnp.tanh


def test_prelu_is_listed_and_exported():
    assert "PReLU" in dir(act)
    assert act.PReLU.__name__ == "PReLU"


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_activation"):
        act.no_such_activation  # noqa: B018


def test_prelu_learns_a_scalar_slope():
    import flaxen.linen as nn

    layer = nn.PReLU(negative_slope_init=0.2)
    x = jnp.array([-2.0, 0.0, 3.0])
    y, v = layer.init_with_output(jax.random.key(0), x)
    assert v["params"]["negative_slope"].shape == ()
    np.testing.assert_allclose(y, [-0.4, 0.0, 3.0], rtol=1e-6)
    g = jax.grad(lambda p: layer.apply({"params": p}, x).sum())(v["params"])
    np.testing.assert_allclose(g["negative_slope"], -2.0)
    assert act.PReLU is nn.PReLU
    y16 = layer.apply(v, x.astype(jnp.bfloat16))
    assert y16.dtype == jnp.bfloat16
