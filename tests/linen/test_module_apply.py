"""init / apply / collections / RNGs / sow / perturb / capture / interceptors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen import config
from flaxen.core import FrozenDict
from tests.linen._module_helpers import KEY, MLP, Dense, X, shapes


class BiasAdderWithRunningMean(nn.Module):
    decay: float = 0.99

    @nn.compact
    def __call__(self, x):
        is_initialized = self.has_variable("batch_stats", "mean")
        ra_mean = self.variable("batch_stats", "mean", lambda s: jnp.zeros(s), x.shape[1:])
        bias = self.param("bias", lambda rng, shape: jnp.zeros(shape), x.shape[1:])
        if is_initialized:
            ra_mean.value = self.decay * ra_mean.value + (1.0 - self.decay) * jnp.mean(
                x, axis=0, keepdims=True)
        return x - ra_mean.value + bias


def test_init_returns_dict_in_creation_order_and_frozendict_by_flag():
    variables = BiasAdderWithRunningMean().init(KEY, jnp.ones((10, 5)))
    assert type(variables) is dict
    assert list(variables) == ["batch_stats", "params"]
    with config.temp_flip_flag("return_frozendict", True):
        frozen = BiasAdderWithRunningMean().init(KEY, jnp.ones((10, 5)))
    assert isinstance(frozen, FrozenDict)


def test_apply_mutable_returns_only_mutated_collections():
    model = BiasAdderWithRunningMean()
    variables = model.init(KEY, jnp.ones((10, 5)))
    y, updated = model.apply(variables, jnp.ones((10, 5)), mutable=["batch_stats"])
    assert list(updated) == ["batch_stats"]
    np.testing.assert_allclose(updated["batch_stats"]["mean"], np.full((1, 5), 0.01),
                               rtol=1e-6)
    _, by_str = model.apply(variables, jnp.ones((10, 5)), mutable="batch_stats")
    assert list(by_str) == ["batch_stats"]
    _, everything = model.apply(variables, jnp.ones((10, 5)), mutable=True)
    assert set(everything) == {"batch_stats", "params"}
    out = MLP().apply(MLP().init(KEY, X), X)
    assert isinstance(out, jax.Array)


def test_init_with_output_and_function_forms():
    y, variables = MLP().init_with_output(KEY, X)
    assert y.shape == (1, 2)
    np.testing.assert_allclose(MLP().apply(variables, X), y)
    y2, v2 = nn.init_with_output(lambda m, x: m(x) * 2, MLP())(KEY, X)
    np.testing.assert_allclose(y2, 2 * y)
    v3 = nn.init(lambda m, x: m(x), MLP())(KEY, X)
    assert shapes(v3) == shapes(variables)
    np.testing.assert_allclose(nn.apply(lambda m, x: m(x) + 1, MLP())(variables, X), y + 1)
    out, mutated = nn.apply(lambda m, x: m(x), MLP(), mutable=["params"])(variables, X)
    assert list(mutated) == ["params"]


def test_apply_method_forms():
    class AE(nn.Module):
        def setup(self):
            self.enc = Dense(2)
            self.dec = Dense(4)

        def encode(self, x):
            return self.enc(x)

        def __call__(self, x):
            return self.dec(self.enc(x))

    variables = AE().init(KEY, X)
    expected = AE().apply(variables, X, method=AE.encode)
    for method in ("encode", AE().encode, lambda m, x: m.encode(x)):
        np.testing.assert_allclose(AE().apply(variables, X, method=method), expected)
    enc_only = AE().init(KEY, X, method="encode")
    assert list(enc_only["params"]) == ["enc"]


def test_rngs_single_key_and_dict():
    class Noise(nn.Module):
        @nn.compact
        def __call__(self):
            return jax.random.normal(self.make_rng("noise"), (2,))

    a = Noise().apply({}, rngs={"noise": KEY})
    b = Noise().apply({}, rngs={"noise": KEY})
    np.testing.assert_array_equal(a, b)
    c = Noise().apply({}, rngs={"noise": jax.random.PRNGKey(1)})
    assert not np.array_equal(a, c)
    v1 = MLP().init(KEY, X)
    v2 = MLP().init({"params": KEY}, X)
    np.testing.assert_array_equal(v1["params"]["Dense_0"]["kernel"],
                                  v2["params"]["Dense_0"]["kernel"])


def test_make_rng_gives_new_key_each_call_and_bound_keeps_counting():
    class Keys(nn.Module):
        @nn.compact
        def __call__(self):
            return self.make_rng("params"), self.make_rng("params")

    k1, k2 = Keys().apply({}, rngs={"params": KEY})
    assert not np.array_equal(k1, k2)
    bound = Keys().bind({}, rngs={"params": KEY})
    first = bound()
    second = bound()
    assert not np.array_equal(first[0], second[0])


def test_sow_default_tuple_custom_reduce_and_noop_when_immutable():
    class Sower(nn.Module):
        @nn.compact
        def __call__(self, x):
            stored = self.sow("intermediates", "h", x)
            self.sow("intermediates", "h", 2 * x)
            self.sow("sums", "s", x, init_fn=lambda: 0, reduce_fn=lambda a, b: a + b)
            self.sow("sums", "s", 2 * x, init_fn=lambda: 0, reduce_fn=lambda a, b: a + b)
            return stored

    x = jnp.array([[1.0]])
    variables = Sower().init(KEY, x)
    assert "intermediates" not in variables  # init: intermediates immutable by default
    np.testing.assert_allclose(variables["sums"]["s"], [[3.0]])
    stored, state = Sower().apply({}, x, mutable=["intermediates"])
    assert stored is True or bool(stored)
    assert len(state["intermediates"]["h"]) == 2
    assert Sower().apply({}, x, mutable=["sums"])[0] is False


def test_perturb_adds_zeros_at_init_and_is_identity_without_collection():
    class P(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = Dense(3)(x)
            x = self.perturb("hidden", x)
            return Dense(1)(x)

    variables = P().init(KEY, X)
    assert shapes(variables["perturbations"]) == {"hidden": (1, 3)}
    y = P().apply({"params": variables["params"]}, X)
    np.testing.assert_allclose(y, P().apply(variables, X))

    def loss(params, perturbations):
        return P().apply({"params": params, "perturbations": perturbations}, X).sum()

    grads = jax.grad(loss, argnums=1)(variables["params"], variables["perturbations"])
    expected = variables["params"]["Dense_1"]["kernel"][:, 0]
    np.testing.assert_allclose(grads["hidden"][0], expected, rtol=1e-6)


def test_capture_intermediates_true_and_filter():
    variables = MLP().init(KEY, X)
    y, state = MLP().apply(variables, X, capture_intermediates=True)
    inter = state["intermediates"]
    assert set(inter) == {"Dense_0", "Dense_1", "__call__"}
    np.testing.assert_allclose(inter["__call__"][0], y)
    _, state = MLP().apply(variables, X, capture_intermediates=lambda m, n: m.name == "Dense_1")
    assert set(state["intermediates"]) == {"Dense_1"}
    # no hooks left behind
    assert MLP().apply(variables, X).shape == (1, 2)
    _, state = MLP().apply(variables, X, mutable=["intermediates"])
    assert state == {} or "intermediates" not in state or not state["intermediates"]


def test_intercept_methods_sees_every_call_and_can_change_outputs():
    seen = []

    def record(next_fun, args, kwargs, context):
        seen.append((type(context.module).__name__, context.method_name))
        return next_fun(*args, **kwargs)

    variables = MLP().init(KEY, X)
    with nn.intercept_methods(record):
        MLP().apply(variables, X)
    assert seen == [("MLP", "__call__"), ("Dense", "__call__"), ("Dense", "__call__")]

    def zero_dense(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        return jnp.zeros_like(out) if isinstance(context.module, Dense) else out

    with nn.intercept_methods(zero_dense):
        np.testing.assert_array_equal(MLP().apply(variables, X), jnp.zeros((1, 2)))


def test_lazy_init_with_shape_dtype_struct():
    variables = MLP().lazy_init(KEY, jax.ShapeDtypeStruct((1, 4), jnp.float32))
    eager = MLP().init(KEY, X)
    np.testing.assert_array_equal(variables["params"]["Dense_0"]["kernel"],
                                  eager["params"]["Dense_0"]["kernel"])


def test_jit_and_grad_through_apply():
    variables = MLP().init(KEY, X)
    y = jax.jit(MLP().apply)(variables, X)
    np.testing.assert_allclose(y, MLP().apply(variables, X), rtol=1e-6)
    grads = jax.grad(lambda v: MLP().apply(v, X).sum())(variables)
    assert shapes(grads) == shapes(variables)
    traced = jax.eval_shape(MLP().init, KEY, X)
    assert shapes(traced) == shapes(variables)


def test_empty_variables_for_module_without_params():
    class NoParams(nn.Module):
        def __call__(self, x):
            return x * 2

    np.testing.assert_allclose(NoParams().apply({}, X), 2 * X)


@pytest.mark.parametrize("mutable", [False, True, "params", ["params"]])
def test_mutable_forms_accepted(mutable):
    variables = MLP().init(KEY, X)
    out = MLP().apply(variables, X, mutable=mutable)
    assert isinstance(out, tuple) == (mutable is not False)
