"""Optimizer, metrics, Rngs, layers and the 8-device sharded training run."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen.experimental import nnx


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
    assert ("other", "key") in dict(bcast.flat_state())


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
        pytest.skip("needs 8 host devices (the root conftest.py sets them)")
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


# -- Optimizer filter errors, repr; LinearGeneral default; TrainState ---------------------------

def test_optimizer_wrt_matching_nothing_is_an_error_naming_the_filter():
    m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"wrt=nnx\.BatchStat matches no Variable.*Param at"):
        nnx.Optimizer(m, optax.sgd(0.1), wrt=nnx.BatchStat)
    with pytest.raises(ValueError, match="matches no Variable"):
        nnx.Optimizer(m, optax.sgd(0.1), wrt="no_such_attribute")
    opt = nnx.Optimizer(m, optax.sgd(0.1), wrt=nnx.All(nnx.Param, "kernel"))
    grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))),
                     wrt=nnx.All(nnx.Param, "kernel"))(m)
    bias = m.bias.value
    opt.update(grads)
    np.testing.assert_array_equal(m.bias.value, bias)


def test_optimizer_repr_hides_private_fields():
    opt = nnx.Optimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), optax.adam(0.1))
    text = repr(opt)
    assert "_opt_leaves" not in text and "_opt_treedef" not in text
    assert "opt_state=" in text and "step=" in text and "model=Linear(" in text


def test_linear_general_batch_axis_default_is_empty_frozen_mapping():
    import inspect

    from flaxen.core import FrozenDict

    default = inspect.signature(nnx.LinearGeneral).parameters["batch_axis"].default
    assert isinstance(default, FrozenDict) and len(default) == 0
    layer = nnx.LinearGeneral(3, 4, rngs=nnx.Rngs(0))
    assert layer.batch_axis == {} and isinstance(layer.batch_axis, FrozenDict)
    batched = nnx.LinearGeneral((2, 3), 4, axis=(-2, -1), batch_axis={0: 5}, rngs=nnx.Rngs(0))
    assert batched.kernel.value.shape == (5, 2, 3, 4)
    assert batched(jnp.ones((5, 2, 3))).shape == (5, 4)
    # hashable static attribute: equal models share one graph definition
    assert nnx.graphdef(layer) == nnx.graphdef(nnx.LinearGeneral(3, 4, rngs=nnx.Rngs(1)))


def test_train_state_create_apply_and_gradients_under_jit():
    model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    tx = optax.adam(0.01)
    state = nnx.TrainState.create(graphdef, params=params, tx=tx)
    assert int(state.step) == 0
    assert state.graphdef is graphdef and state.tx is tx
    # graphdef and tx are static: only arrays are leaves
    leaves = jax.tree_util.tree_leaves(state)
    assert all(isinstance(x, jax.Array) for x in leaves)
    x = jnp.ones((3, 2))
    y, (gd, new_params) = state.apply("params")(x)
    np.testing.assert_allclose(y, model(x), rtol=1e-6)
    assert gd == graphdef
    y2, _ = state.apply(state.params)(x)
    np.testing.assert_array_equal(y, y2)

    @jax.jit
    def step(state, x):
        def loss_fn(params):
            out, _ = state.apply(params)(x)
            return jnp.mean(out ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    losses = []
    for _ in range(5):
        state, loss = step(state, x)
        losses.append(float(loss))
    assert int(state.step) == 5 and losses[-1] < losses[0]
    # the same updates as plain Optax on the same params
    ref_p = {"bias": params.bias.value, "kernel": params.kernel.value}
    ref_s = tx.init(ref_p)
    for _ in range(5):
        g = jax.grad(lambda p: jnp.mean((x @ p["kernel"] + p["bias"]) ** 2))(ref_p)
        upd, ref_s = tx.update(g, ref_s, ref_p)
        ref_p = optax.apply_updates(ref_p, upd)
    np.testing.assert_allclose(state.params.kernel.value, ref_p["kernel"], rtol=1e-5)
    # positional grads work too; a mismatched structure is a clear error
    grads = jax.grad(lambda p: jnp.sum(state.apply(p)(x)[0]))(state.params)
    assert int(state.apply_gradients(grads).step) == 6
    with pytest.raises(ValueError, match="parameter at /bias has no gradient"):
        state.apply_gradients(grads=nnx.State({"kernel": grads.kernel}))
    with pytest.raises(TypeError, match="GraphDef"):
        nnx.TrainState.create(model, params=params, tx=tx)


def test_train_state_subclass_with_batch_stats_and_method_call():
    class Model(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(2, 3, rngs=rngs)
            self.bn = nnx.BatchNorm(3, rngs=rngs)

        def __call__(self, x):
            return self.bn(self.linear(x))

        def features(self, x):
            return self.linear(x)

    class State(nnx.TrainState):
        batch_stats: nnx.State
        extra: int = 0

    graphdef, params, stats = nnx.split(Model(nnx.Rngs(0)), nnx.Param, nnx.BatchStat)
    state = State.create(graphdef, params=params, tx=optax.sgd(0.1), batch_stats=stats, step=3)
    assert int(state.step) == 3 and state.extra == 0
    x = jax.random.normal(jax.random.key(0), (4, 2))
    y, (_, updated) = state.apply("params", "batch_stats")(x)
    new_stats = updated.filter(nnx.BatchStat)
    assert not np.allclose(new_stats.bn.mean.value, stats.bn.mean.value)
    feats, _ = state.apply("params", "batch_stats").features(x)
    assert feats.shape == (4, 3)

    @jax.jit
    def step(state):
        def loss_fn(params):
            out, (_, s) = state.apply(params, "batch_stats")(x)
            return jnp.mean(out ** 2), s.filter(nnx.BatchStat)

        grads, bs = jax.grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads, batch_stats=bs, extra=1)

    state = step(state)
    assert int(state.step) == 4 and state.extra == 1
    np.testing.assert_allclose(state.batch_stats.bn.mean.value, new_stats.bn.mean.value,
                               rtol=1e-6)
    with pytest.raises(AttributeError, match="no field 'nope'"):
        state.apply("nope")
