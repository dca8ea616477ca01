"""Optimizer, metrics, Rngs, layers and the 8-device sharded training run."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen import nnx


def test_optimizer_matches_optax_and_rejects_other_structure():
    m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    tx = optax.adam(0.1)
    opt = nnx.Optimizer(m, tx)
    params = {"bias": m.bias.value, "kernel": m.kernel.value}
    x = jnp.ones((1, 2))
    grads = nnx.grad(lambda m: jnp.sum(m(x)))(m)
    opt.update(grads)
    g = {"bias": grads.bias.value, "kernel": grads.kernel.value}
    upd, _ = tx.update(g, tx.init(params), params)
    np.testing.assert_allclose(m.kernel.value, params["kernel"] + upd["kernel"], rtol=1e-6)
    assert int(opt.step.value) == 1
    other = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 3)))))(nnx.Linear(3, 1, use_bias=False,
                                                                         rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="missing /bias"):
        opt.update(other)


def test_metrics():
    mm = nnx.MultiMetric(loss=nnx.metrics.Average("loss"), accuracy=nnx.metrics.Accuracy())
    mm.update(loss=jnp.array([1.0, 3.0]), logits=jnp.array([[0.0, 1.0], [1.0, 0.0]]),
              labels=jnp.array([1, 1]))
    out = mm.compute()
    assert float(out["loss"]) == 2.0 and float(out["accuracy"]) == 0.5
    mm.reset()
    assert float(mm.loss.count.value) == 0


def test_rngs_streams_and_missing_stream_error():
    rngs = nnx.Rngs(params=0)
    k = rngs.params()
    np.testing.assert_array_equal(jax.random.key_data(k),
                                  jax.random.key_data(jax.random.fold_in(jax.random.key(0), 0)))
    with pytest.raises(AttributeError, match="'dropout'.*no 'default'"):
        rngs.dropout()
    with pytest.raises(KeyError, match="dropout"):
        rngs["dropout"]
    split, bcast = nnx.fork(nnx.state(nnx.Rngs(0, other=1)), "default", 3)
    assert split.default.key.value.shape == (3,)
    assert ("other", "key") in bcast.flat_state()


def test_layers_shapes_and_modes():
    r = nnx.Rngs(0)
    assert nnx.Conv(2, 4, (3, 3), rngs=r)(jnp.ones((1, 5, 5, 2))).shape == (1, 5, 5, 4)
    e = nnx.Embed(5, 3, rngs=r)
    assert e(jnp.array([1, 2])).shape == (2, 3) and e.attend(jnp.ones((2, 3))).shape == (2, 5)
    assert nnx.LayerNorm(3, rngs=r)(jnp.ones((2, 3))).shape == (2, 3)
    assert nnx.RMSNorm(3, rngs=r)(jnp.ones((2, 3))).shape == (2, 3)
    lg = nnx.LinearGeneral((2, 3), 4, axis=(-2, -1), rngs=r)
    assert lg(jnp.ones((5, 2, 3))).shape == (5, 4)
    assert nnx.Einsum("ab,bc->ac", (3, 4), (4,), rngs=r)(jnp.ones((2, 3))).shape == (2, 4)
    seq = nnx.Sequential(nnx.Linear(2, 3, rngs=r), nnx.relu, nnx.Linear(3, 1, rngs=r))
    assert seq(jnp.ones((4, 2))).shape == (4, 1)
    bn = nnx.BatchNorm(2, rngs=r)
    bn.eval()
    assert bn.use_running_average is True
    np.testing.assert_allclose(bn(jnp.ones((2, 2))), jnp.ones((2, 2)) / jnp.sqrt(1 + 1e-5),
                               rtol=1e-6)


def test_mha_decode_matches_full_causal():
    mha = nnx.MultiHeadAttention(2, 4, decode=False, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (1, 3, 4))
    full = mha(x, mask=nnx.make_causal_mask(jnp.ones((1, 3))))
    mha.init_cache((1, 3, 4))
    steps = [mha(x[:, i:i + 1], decode=True) for i in range(3)]
    np.testing.assert_allclose(jnp.concatenate(steps, 1), full, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one step"):
        mha(x, decode=True)


def test_sharded_training_on_8_devices_matches_single_device():
    devices = np.array(jax.devices()[:8])
    if devices.size < 8:
        pytest.skip("needs 8 host devices (tests/conftest.py sets them)")
    mesh = Mesh(devices.reshape(2, 4), ("data", "model"))

    class MLP(nnx.Module):
        def __init__(self, rngs):
            init = nnx.initializers.lecun_normal()
            self.l1 = nnx.Linear(8, 16, kernel_init=nnx.with_partitioning(init, (None, "model")),
                                 rngs=rngs)
            self.l2 = nnx.Linear(16, 4, kernel_init=nnx.with_partitioning(init, ("model", None)),
                                 rngs=rngs)

        def __call__(self, x):
            return self.l2(nnx.relu(self.l1(x)))

    x = jax.random.normal(jax.random.key(0), (8, 8))
    y = jax.random.normal(jax.random.key(1), (8, 4))

    def train(model, x, y, steps=3):
        opt = nnx.Optimizer(model, optax.sgd(0.1))

        @nnx.jit
        def step(model, opt, x, y):
            loss, g = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
            opt.update(g)
            return loss

        return [float(step(model, opt, x, y)) for _ in range(steps)]

    single = train(MLP(nnx.Rngs(0)), x, y)

    sharded_model = MLP(nnx.Rngs(0))
    st = nnx.state(sharded_model)
    shardings = nnx.get_named_sharding(st, mesh)
    nnx.update(sharded_model, jax.device_put(st, shardings))
    assert sharded_model.l1.kernel.value.sharding.spec == PartitionSpec(None, "model")
    xs = jax.device_put(x, NamedSharding(mesh, PartitionSpec("data")))
    sharded = train(sharded_model, xs, y)
    np.testing.assert_allclose(sharded, single, atol=1e-5)
    assert len(sharded_model.l1.kernel.value.sharding.device_set) == 8
