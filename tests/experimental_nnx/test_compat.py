"""Interop: Linen modules inside NNX (LinenWrapper / bridge.ToNNX) and NNX modules inside Linen
(NNXWrapper / bridge.ToLinen), plus compatibility.functional and nnx.TrainState."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import linen as nn
from flaxen.experimental import nnx
from flaxen.experimental.nnx import _bridge as bridge
from flaxen.nnx import compatibility


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Dense(4)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.5)(x)
        x = nn.Dropout(0.5, deterministic=not train)(x)
        return nn.Dense(1)(nn.relu(x))


class NNXMLP(nnx.Module):
    def __init__(self, din, dout, *, rngs):
        self.linear = nnx.Linear(din, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, momentum=0.5, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.out = nnx.Linear(4, dout, rngs=rngs)

    def __call__(self, x):
        x = self.dropout(self.bn(self.linear(x)))
        return self.out(nnx.relu(x))


X = jnp.linspace(-1.0, 1.0, 16).reshape(8, 2)
Y = jnp.sum(X, axis=1, keepdims=True)


# -- Linen inside NNX ----------------------------------------------------------------------------

def test_linen_wrapper_collections_and_same_output():
    w = compatibility.LinenWrapper(LinenMLP(), X, rngs=nnx.Rngs(0), train=False)
    params = nnx.state(w, nnx.Param)
    stats = nnx.state(w, nnx.BatchStat)
    assert set(dict(params.flat_state())) == {
        ("params", "Dense_0", "kernel"), ("params", "Dense_0", "bias"),
        ("params", "BatchNorm_0", "scale"), ("params", "BatchNorm_0", "bias"),
        ("params", "Dense_1", "kernel"), ("params", "Dense_1", "bias")}
    assert set(dict(stats.flat_state())) == {("batch_stats", "BatchNorm_0", "mean"),
                                       ("batch_stats", "BatchNorm_0", "var")}
    assert isinstance(w.params["Dense_0"]["kernel"], nnx.Param)
    assert isinstance(w.batch_stats["BatchNorm_0"]["mean"], nnx.BatchStat)
    # same parameters as Linen's own init with the key the stream gives
    key = nnx.Rngs(0).params()
    ref = LinenMLP().init({"params": key}, X, train=False)
    np.testing.assert_array_equal(w.params["Dense_0"]["kernel"].value,
                                  ref["params"]["Dense_0"]["kernel"])
    # eval call: same output as Linen apply, state untouched
    out = w(X, train=False)
    np.testing.assert_allclose(out, LinenMLP().apply(ref, X, train=False), rtol=1e-6)
    np.testing.assert_array_equal(w.batch_stats["BatchNorm_0"]["mean"].value, 0.0)


def test_linen_wrapper_train_call_updates_batch_stats_like_linen():
    w = compatibility.LinenWrapper(LinenMLP(), X, rngs=nnx.Rngs(0), train=False)
    variables = w.linen_variables()
    mean_var = w.batch_stats["BatchNorm_0"]["mean"]
    y = w(X, rngs=nnx.Rngs(dropout=1))
    ref_y, ref_upd = LinenMLP().apply(variables, X, rngs={"dropout": nnx.Rngs(dropout=1).dropout()},
                                      mutable=["batch_stats"])
    np.testing.assert_allclose(y, ref_y, rtol=1e-6)
    assert w.batch_stats["BatchNorm_0"]["mean"] is mean_var  # updated in place
    np.testing.assert_allclose(mean_var.value, ref_upd["batch_stats"]["BatchNorm_0"]["mean"],
                               rtol=1e-6)


def test_linen_wrapper_trains_under_nnx_jit_and_grad():
    model = compatibility.LinenWrapper(LinenMLP(), X, rngs=nnx.Rngs(0, dropout=1), train=False)
    opt = nnx.Optimizer(model, optax.adam(0.05))

    @nnx.jit
    def step(model, opt, x, y):
        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(grads)
        return loss

    count0 = int(model.rngs.dropout.count.value)
    stats0 = model.batch_stats["BatchNorm_0"]["mean"].value
    losses = [float(step(model, opt, X, Y)) for _ in range(30)]
    assert losses[-1] < losses[0]
    assert int(opt.step.value) == 30
    assert int(model.rngs.dropout.count.value) == count0 + 30  # fresh dropout key per step
    assert not np.allclose(model.batch_stats["BatchNorm_0"]["mean"].value, stats0)
    grads = nnx.grad(lambda m: jnp.mean(m(X, train=False)))(model)
    assert set(dict(grads.flat_state())) == set(dict(nnx.state(model, nnx.Param).flat_state()))


def test_linen_wrapper_custom_collection_and_partitioning():
    class Counter(nn.Module):
        @nn.compact
        def __call__(self, x):
            count = self.variable("counters", "n", lambda: jnp.zeros((), jnp.int32))
            count.value += 1
            k = self.param("w", nn.with_partitioning(nn.initializers.ones, ("in", "out")),
                           (x.shape[-1], 2))
            self.sow("intermediates", "h", x @ k)
            return x @ k

    w = compatibility.LinenWrapper(Counter(), jnp.ones((1, 3)), rngs=nnx.Rngs(0))
    typ = compatibility.variable_type("counters")
    assert typ.__name__ == "Counters" and compatibility.collection_name(typ) == "counters"
    assert isinstance(w.counters["n"], typ)
    assert w.params["w"].out_sharding == ("in", "out")
    assert nnx.get_partition_spec(nnx.state(w, nnx.Param)).params.w.value == \
        jax.sharding.PartitionSpec("in", "out")
    n0 = int(w.counters["n"].value)
    w(jnp.ones((1, 3)))
    assert int(w.counters["n"].value) == n0 + 1
    # intermediates are not mutable by default, but can be asked for
    w(jnp.ones((1, 3)), mutable=["counters", "intermediates"])
    assert isinstance(w.intermediates["h"], nnx.Intermediate)


def test_to_nnx_lazy_init_inside_jit():
    model = bridge.ToNNX(nn.Dense(3), rngs=nnx.Rngs(0))
    assert model.collections == ()

    @nnx.jit
    def f(model, x):
        return model(x)

    y = f(model, jnp.ones((2, 2)))
    assert y.shape == (2, 3)
    assert model.params["kernel"].value.shape == (2, 3)
    np.testing.assert_allclose(y, nn.Dense(3).apply({"params": model.linen_variables()["params"]},
                                                    jnp.ones((2, 2))), rtol=1e-6)
    m2 = bridge.lazy_init(bridge.ToNNX(nn.Dense(3), rngs=nnx.Rngs(0)), jnp.ones((1, 2)))
    np.testing.assert_array_equal(m2.params["kernel"].value, model.params["kernel"].value)


def test_linen_wrapper_uninitialized_call_and_reserved_collection_errors():
    class Bad(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.variable("module", "v", lambda: jnp.zeros(()))
            return x

    with pytest.raises(ValueError, match="collection named 'module'"):
        compatibility.LinenWrapper(Bad(), jnp.ones(1), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="no variables yet"):
        _uninit_call()


def _uninit_call():
    w = bridge.ToNNX(nn.Dense(2))  # not initialized yet; the base class call refuses
    return compatibility.LinenWrapper.__call__(w, jnp.ones((1, 2)))


# -- NNX inside Linen ----------------------------------------------------------------------------

def test_nnx_wrapper_collections_and_same_output():
    wrapped = compatibility.NNXWrapper(NNXMLP, args=(2, 1))
    variables = wrapped.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)
    assert set(variables) == {"params", "batch_stats"}
    assert set(variables["params"]) == {"linear", "bn", "out"}
    assert set(variables["params"]["bn"]) == {"scale", "bias"}
    assert set(variables["batch_stats"]["bn"]) == {"mean", "var"}
    # init records the state as constructed (running stats untouched, as Linen's BatchNorm)
    np.testing.assert_array_equal(variables["batch_stats"]["bn"]["mean"], 0.0)
    # the NNX module itself, given the same variables, gives the same outputs
    direct = NNXMLP(2, 1, rngs=nnx.Rngs(0))
    nnx.update(direct, _state_from_linen(variables))
    direct.eval()
    np.testing.assert_array_equal(direct.linear.kernel.value,
                                  variables["params"]["linear"]["kernel"])
    out = compatibility.NNXWrapper(NNXMLP, args=(2, 1)).apply(variables, X,
                                                              nnx_method=_eval_call)
    np.testing.assert_allclose(out, direct(X), rtol=1e-6)


def _state_from_linen(variables):
    flat = {}
    for col, typ in (("params", nnx.Param), ("batch_stats", nnx.BatchStat)):
        for path, leaf in jax.tree_util.tree_leaves_with_path(variables[col]):
            flat[tuple(k.key for k in path)] = typ.state(leaf)
    return nnx.State.from_flat_path(flat)


def _eval_call(module, x):
    module.eval()
    return module(x)


def test_nnx_wrapper_trains_under_jax_jit_and_updates_batch_stats():
    wrapped = compatibility.NNXWrapper(NNXMLP, args=(2, 1))
    variables = wrapped.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)
    tx = optax.adam(0.05)
    params, stats = variables["params"], variables["batch_stats"]
    opt_state = tx.init(params)

    @jax.jit
    def step(params, stats, opt_state, key):
        def loss_fn(params):
            y, upd = wrapped.apply({"params": params, "batch_stats": stats}, X,
                                   rngs={"dropout": key}, mutable=["batch_stats"])
            return jnp.mean((y - Y) ** 2), upd["batch_stats"]

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state, loss

    losses = []
    for i in range(30):
        params, stats, opt_state, loss = step(params, stats, opt_state, jax.random.key(i))
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    assert not np.allclose(stats["bn"]["mean"], 0.0)
    # the trained variables, merged into the NNX module itself, give the same outputs
    direct = NNXMLP(2, 1, rngs=nnx.Rngs(0))
    nnx.update(direct, _state_from_linen({"params": params, "batch_stats": stats}))
    direct.eval()
    y = wrapped.apply({"params": params, "batch_stats": stats}, X, nnx_method=_eval_call)
    np.testing.assert_allclose(y, direct(X), rtol=1e-6)


def test_nnx_wrapper_immutable_collection_error_and_missing_variable_error():
    wrapped = compatibility.NNXWrapper(NNXMLP, args=(2, 1))
    variables = wrapped.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)
    with pytest.raises(ValueError, match="batch_stats/bn/mean.*not mutable"):
        wrapped.apply(variables, X, rngs={"dropout": jax.random.key(2)})
    with pytest.raises(ValueError, match="no /batch_stats/bn/"):
        wrapped.apply({"params": variables["params"]}, X, nnx_method=_eval_call)


def test_nnx_inside_linen_inside_nnx_and_to_linen():
    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = bridge.to_linen(nnx.Linear, 2, 3, name="inner")(x)
            return nn.Dense(1)(x)

    variables = Outer().init(jax.random.key(0), jnp.ones((1, 2)))
    assert set(variables["params"]) == {"inner", "Dense_0"}
    assert variables["params"]["inner"]["kernel"].shape == (2, 3)
    y = Outer().apply(variables, jnp.ones((4, 2)))
    p = variables["params"]
    ref = (jnp.ones((4, 2)) @ p["inner"]["kernel"] + p["inner"]["bias"]) @ \
        p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    # and back into NNX: Linen(NNX) inside an NNX model
    model = compatibility.LinenWrapper(Outer(), jnp.ones((1, 2)), rngs=nnx.Rngs(0))
    assert model.params["inner"]["kernel"].value.shape == (2, 3)
    np.testing.assert_allclose(model(jnp.ones((4, 2))),
                               Outer().apply(model.linen_variables(), jnp.ones((4, 2))),
                               rtol=1e-6)


def test_nnx_wrapper_sharding_metadata_becomes_partitioned():
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("in", "out"))
    wrapped = bridge.to_linen(nnx.Linear, 2, 3, kernel_init=init)
    variables = wrapped.init(jax.random.key(0), jnp.ones((1, 2)))
    kernel = variables["params"]["kernel"]
    assert isinstance(kernel, nn.Partitioned) and kernel.names == ("in", "out")
    out = wrapped.apply(variables, jnp.ones((1, 2)))
    assert out.shape == (1, 3)


def test_functional():
    f = compatibility.functional(nnx.Linear)(2, 3)
    state = f.init(rngs=nnx.Rngs(0))
    y, (graphdef, new_state) = f.apply(state)(jnp.ones((1, 2)))
    np.testing.assert_allclose(y, nnx.Linear(2, 3, rngs=nnx.Rngs(0))(jnp.ones((1, 2))), rtol=1e-6)
    assert graphdef == f.graphdef
    with pytest.raises(ValueError, match="call init"):
        compatibility.functional(nnx.Linear)(2, 3).apply(state)


def test_lazy_attributes_raise_attribute_error():
    assert hasattr(nnx, "TrainState") and hasattr(nnx, "bridge") and hasattr(nnx, "compatibility")
    assert not hasattr(nnx, "no_such_thing")
    with pytest.raises(AttributeError, match="no_such_thing"):
        nnx.no_such_thing  # noqa: B018


def test_nnx_wrapper_dropout_uses_the_linen_dropout_stream():
    wrapped = compatibility.NNXWrapper(NNXMLP, args=(2, 1))
    variables = wrapped.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)

    def run(key):
        return wrapped.apply(variables, X, rngs={"dropout": key}, mutable=["batch_stats"])[0]

    np.testing.assert_array_equal(run(jax.random.key(2)), run(jax.random.key(2)))
    assert not np.allclose(run(jax.random.key(2)), run(jax.random.key(3)))
