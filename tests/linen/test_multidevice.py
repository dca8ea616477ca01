"""Scale-out on 8 host devices: data parallelism, 2x4 data x model sharding through logical
axis rules (with ``nn.scan`` over layers), and a ``jax.pmap`` ensemble.

Every sharded step is checked against the same step on one device (loss within 1e-5), and
the shardings of parameters and outputs are asserted. Dimensions are tiny.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import flaxen.linen as nn
from flaxen import jax_utils
from flaxen.training import train_state
from tests import _inputs

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (host) devices")

KEY = jax.random.PRNGKey(0)


def _mesh(shape, names):
    return Mesh(np.asarray(jax.devices()[:int(np.prod(shape))]).reshape(shape), names)


def _spec(x):
    return x.sharding.spec if isinstance(x.sharding, NamedSharding) else None


# ------------------------------------------------------------ data-parallel Transformer block


class TransformerBlock(nn.Module):
    features: int = 8
    heads: int = 2

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.SelfAttention(num_heads=self.heads, qkv_features=self.features)(h)
        h = nn.LayerNorm()(x)
        h = nn.Dense(2 * self.features)(h)
        return x + nn.Dense(self.features)(nn.gelu(h))


def _loss(apply_fn, params, x, y):
    return jnp.mean((apply_fn({"params": params}, x) - y) ** 2)


# TransformerBlock uses the deprecated nn.SelfAttention, which warns on every call; the test is
# about data-parallel training (tests/test_deprecation_warnings.py asserts the warning).
@pytest.mark.filterwarnings("ignore:SelfAttention will be deprecated soon:DeprecationWarning")
def test_data_parallel_transformer_block_training():
    mesh = _mesh((8,), ("data",))
    x = _inputs.normal(1, (16, 4, 8))
    y = _inputs.normal(2, (16, 4, 8))
    model = TransformerBlock()
    state = train_state.TrainState.create(
        apply_fn=model.apply, params=jax.jit(model.init)(KEY, x[:1])["params"],
        tx=optax.sgd(0.1))

    def step(state, x, y):
        loss, grads = jax.value_and_grad(
            functools.partial(_loss, state.apply_fn))(state.params, x, y)
        return state.apply_gradients(grads=grads), loss

    replicated = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P("data"))
    sharded_step = jax.jit(step, in_shardings=(replicated, batch, batch),
                           out_shardings=(replicated, replicated))
    s_state = jax.device_put(state, replicated)
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    assert _spec(xs) == P("data")
    ref_state, ref_losses, losses = state, [], []
    for _ in range(3):
        s_state, loss = sharded_step(s_state, xs, ys)
        ref_state, ref_loss = jax.jit(step)(ref_state, x, y)
        losses.append(float(loss))
        ref_losses.append(float(ref_loss))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    assert losses[-1] < losses[0]
    for leaf in jax.tree_util.tree_leaves(s_state.params):
        assert _spec(leaf) == P()
    out = jax.jit(model.apply, out_shardings=batch)({"params": s_state.params}, xs)
    assert _spec(out) == P("data") and out.shape == (16, 4, 8)


# ------------------------------------------------------------ 2x4 data x model, logical axes


class LogicalDotReluDot(nn.Module):
    depth: int

    @nn.compact
    def __call__(self, x, _):
        init = nn.initializers.xavier_normal()
        w1 = self.param("W1", nn.with_logical_partitioning(init, ("embed", "hidden")),
                        (x.shape[-1], self.depth))
        y = nn.with_logical_constraint(jax.nn.relu(x @ w1), ("batch", "hidden"))
        w2 = self.param("W2", nn.with_logical_partitioning(init, ("hidden", "embed")),
                        (self.depth, x.shape[-1]))
        return nn.with_logical_constraint(y @ w2, ("batch", "embed")), None


class ScannedMLP(nn.Module):
    layers: int = 2
    depth: int = 8

    @nn.compact
    def __call__(self, x):
        S = nn.scan(LogicalDotReluDot, length=self.layers, variable_axes={"params": 0},
                    split_rngs={"params": True}, metadata_params={nn.PARTITION_NAME: "layer"})
        return S(self.depth)(x, None)[0]


RULES = (("batch", "data"), ("hidden", "model"), ("embed", None), ("layer", None))


def test_2x4_data_model_sharding_through_logical_rules():
    mesh = _mesh((2, 4), ("data", "model"))
    x = _inputs.normal(1, (8, 4))
    y = _inputs.normal(2, (8, 4))
    model = ScannedMLP()

    abstract = jax.eval_shape(model.init, KEY, x)
    logical_spec = nn.get_partition_spec(abstract)
    assert logical_spec["params"]["ScanLogicalDotReluDot_0"]["W1"] == P("layer", "embed",
                                                                         "hidden")
    shardings = nn.logical_to_mesh_sharding(logical_spec, mesh, RULES)
    x_sharding = NamedSharding(mesh, nn.logical_to_mesh_axes(("batch", "embed"), RULES))

    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        variables = jax.jit(model.init, out_shardings=shardings)(KEY, x)
    w1 = variables["params"]["ScanLogicalDotReluDot_0"]["W1"]
    assert type(w1).__name__ == "LogicallyPartitioned"
    assert w1.value.shape == (2, 4, 8)
    assert _spec(w1.value) == P(None, None, "model")
    assert _spec(variables["params"]["ScanLogicalDotReluDot_0"]["W2"].value) == P(
        None, "model", None)

    params = nn.unbox(variables["params"])
    param_shardings = nn.unbox(shardings["params"])

    def step(params, x, y):
        loss, grads = jax.value_and_grad(
            lambda p: _loss(model.apply, p, x, y))(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), loss

    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        sharded_step = jax.jit(step, in_shardings=(param_shardings, x_sharding, x_sharding),
                               out_shardings=(param_shardings, NamedSharding(mesh, P())))
        new_params, loss = sharded_step(params, jax.device_put(x, x_sharding),
                                        jax.device_put(y, x_sharding))
        out = jax.jit(lambda p, x: model.apply({"params": p}, x),
                      out_shardings=x_sharding)(new_params, jax.device_put(x, x_sharding))
    assert _spec(new_params["ScanLogicalDotReluDot_0"]["W1"]) == P(None, None, "model")
    assert _spec(out) == P("data", None)

    host = jax.tree_util.tree_map(np.asarray, params)
    ref_params, ref_loss = jax.jit(step)(host, x, y)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out), np.asarray(model.apply(
        {"params": ref_params}, x)), rtol=1e-5, atol=1e-6)


def test_unknown_logical_axis_name_raises_under_raise_error():
    mesh = _mesh((2, 4), ("data", "model"))

    @jax.jit
    def f(x):
        return nn.with_logical_constraint(x, ("batch", "vocab"), rules=RULES,
                                          fallback=nn.RulesFallback.RAISE_ERROR)

    with jax.set_mesh(mesh), pytest.raises(ValueError, match="vocab"):
        f(jnp.ones((8, 4)))


def test_mesh_axis_that_does_not_divide_the_dimension_is_an_error():
    mesh = _mesh((2, 4), ("data", "model"))

    class Odd(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x @ self.param("w", nn.with_logical_partitioning(
                nn.initializers.ones, ("embed", "hidden")), (x.shape[-1], 3))

    x = jnp.ones((8, 4))
    shardings = nn.logical_to_mesh_sharding(
        nn.get_partition_spec(jax.eval_shape(Odd().init, KEY, x)), mesh, RULES)
    with jax.set_mesh(mesh), pytest.raises(ValueError, match=r"divisible|divide") as info:
        jax.jit(Odd().init, out_shardings=shardings)(KEY, x)
    assert "3" in str(info.value)


# ------------------------------------------------------------ pmap ensemble


class CNNish(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.relu(nn.Dense(6)(x)))


def test_pmap_ensemble_with_replicate():
    n = jax.local_device_count()
    model = CNNish()
    x = _inputs.normal(1, (5, 4))
    labels = jnp.arange(5) % 3

    @functools.partial(jax.pmap, static_broadcasted_argnums=(1,))
    def create_state(rng, lr):
        params = model.init(rng, jnp.ones((1, 4)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                             tx=optax.sgd(lr))

    @functools.partial(jax.pmap, axis_name="ensemble")
    def apply_model(state, x, labels):
        def loss_fn(params):
            logits = state.apply_fn({"params": params}, x)
            one_hot = jax.nn.one_hot(labels, 3)
            return optax.softmax_cross_entropy(logits, one_hot).mean(), logits

        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        probs = jax.lax.pmean(jax.nn.softmax(logits), axis_name="ensemble")
        return grads, loss, probs

    @jax.pmap
    def update(state, grads):
        return state.apply_gradients(grads=grads)

    state = create_state(jax.random.split(KEY, n), 0.1)
    kernels = state.params["Dense_1"]["kernel"]  # Dense(6), built second
    assert kernels.shape == (n, 4, 6)
    assert not np.allclose(kernels[0], kernels[1])  # independent members
    grads, loss, probs = apply_model(state, jax_utils.replicate(x), jax_utils.replicate(labels))
    state = update(state, grads)
    assert loss.shape == (n,) and int(jax_utils.unreplicate(state.step)) == 1
    # the ensemble average equals the mean of the members computed one by one
    members = [jax.nn.softmax(model.apply(
        {"params": jax.tree_util.tree_map(lambda a, i=i: a[i], create_state(
            jax.random.split(KEY, n), 0.1).params)}, x)) for i in range(n)]
    np.testing.assert_allclose(jax_utils.unreplicate(probs), np.mean(members, axis=0),
                               rtol=1e-5, atol=1e-6)


def test_multihost_example_runs_single_process(capsys, monkeypatch):
    import importlib.util
    import pathlib
    import sys

    path = pathlib.Path(__file__).parents[2] / "examples" / "multihost.py"
    spec = importlib.util.spec_from_file_location("multihost_example", path)
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "multihost_example", example)  # dataclasses need it
    spec.loader.exec_module(example)
    assert example.main(["--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "step 1: loss" in out and "P(None, None, 'model')" in out


def test_vmap_spmd_axis_name_shards_the_mapped_axis():
    mesh = _mesh((2, 4), ("data", "model"))

    class Member(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.with_logical_constraint(nn.Dense(8)(x), ("batch", "hidden"))

    ensemble = nn.vmap(Member, variable_axes={"params": 0}, split_rngs={"params": True},
                       spmd_axis_name="data")()
    x = jnp.ones((2, 4, 3))
    with jax.set_mesh(mesh), nn.logical_axis_rules((("batch", None), ("hidden", "model"))):
        variables = jax.jit(ensemble.init)(KEY, x)
        y = jax.jit(ensemble.apply)(variables, x)
    # the constraint inside the vmap gains the mapped axis on 'data'
    assert _spec(y) == P("data", None, "model")
    np.testing.assert_allclose(np.asarray(y), np.asarray(ensemble.apply(variables, x)),
                               rtol=1e-6)
