"""Today's (Flax 0.12.8) Rngs and training API at ``flaxen.nnx``: streams, split/fork/with/
reseed/restore, Optimizer(model, tx, wrt=) / ModelAndOptimizer, metrics, EMA, and the 0.8.3
faces kept at ``flaxen.experimental.nnx``."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import errors, nnx
from flaxen.experimental import nnx as old_nnx


def _data(key):
    return np.asarray(jax.random.key_data(key))


# --- Rngs / RngStream ---------------------------------------------------------------------


def test_stream_draws_fold_in_count_and_keeps_key():
    key0 = jax.random.key(3)
    rngs = nnx.Rngs(params=key0)
    k1, k2 = rngs.params(), rngs.params()
    assert rngs.params.key.value is key0
    assert int(rngs.params.count.value) == 2
    np.testing.assert_array_equal(_data(k1), _data(jax.random.fold_in(key0, 0)))
    np.testing.assert_array_equal(_data(k2), _data(jax.random.fold_in(key0, 1)))


def test_missing_stream_is_attribute_and_key_error():
    rngs = nnx.Rngs(some=0)
    with pytest.raises(AttributeError, match="No RngStream named 'dropout'"):
        rngs.dropout()
    with pytest.raises(KeyError):
        rngs["dropout"]
    with pytest.raises(AttributeError):
        rngs.__json__  # noqa: B018 - dunders are never streams


def test_random_helpers_use_the_stream_keys():
    rngs = nnx.Rngs(0, params=1)
    np.testing.assert_allclose(
        rngs.normal((2,)), jax.random.normal(jax.random.fold_in(jax.random.key(0), 0), (2,)))
    init = rngs.params.lecun_normal()
    expect = jax.nn.initializers.lecun_normal()(jax.random.fold_in(jax.random.key(1), 0),
                                                (2, 3))
    np.testing.assert_allclose(init((2, 3)), expect)


def test_stream_split_broadcast_fork_make_new_streams():
    s = nnx.RngStream(0, tag="params")
    split = s.split((2, 3))
    assert split.key.value.shape == (2, 3) and split.count.value.shape == (2, 3)
    b = s.broadcast(4)
    keys = _data(b.key.value)
    assert (keys == keys[0]).all()
    f = s.fork()
    assert isinstance(f, nnx.RngStream) and f.key.value.shape == ()
    assert int(s.count.value) == 3


def test_rngs_split_broadcast_fork_return_rngs():
    rngs = nnx.Rngs(params=1, dropout=2, noise=3)
    new = rngs.split({"params": 5, "dropout": None, ...: (2, 5)})
    assert new.params.key.value.shape == (5,)
    # as Flax, which rebuilds the result from keys: the same key in a new stream
    assert new["dropout"] is not rngs["dropout"]
    assert new["dropout"].key.value is rngs["dropout"].key.value
    assert new.noise.key.value.shape == (2, 5)
    b = rngs.broadcast({"params": 5})
    assert b.params.key.value.shape == (5,) and b["noise"].key.value.shape == ()
    forked = rngs.fork()
    assert isinstance(forked, nnx.Rngs) and sorted(forked) == ["dropout", "noise", "params"]


def test_split_rngs_in_place_and_restore():
    rngs = nnx.Rngs(params=0, dropout=1)
    backups = nnx.split_rngs(rngs, splits=5, only="params")
    assert rngs.params.key.value.shape == (5,)
    assert rngs.params.count.value.shape == (5,)
    assert rngs["dropout"].key.value.shape == ()
    nnx.restore_rngs(backups)
    assert rngs.params.key.value.shape == () and rngs.params.count.value.shape == ()


def test_split_rngs_copy_leaves_original_and_decorator_restores():
    rngs = nnx.Rngs(params=0)
    copy = nnx.split_rngs(rngs, splits=(2, 3), graph_updates=False)
    assert copy.params.key.value.shape == (2, 3) and rngs.params.key.value.shape == ()

    @nnx.split_rngs(splits=4)
    def inner(r):
        return r.params.key.value.shape

    assert inner(rngs) == (4,)
    assert rngs.params.key.value.shape == ()
    with pytest.raises(ValueError, match="squeeze"):
        nnx.split_rngs(rngs, splits=3, squeeze=True)


def test_fork_rngs_in_place_then_restore():
    rngs = nnx.Rngs(params=0)
    before = _data(rngs.params.key.value)
    with nnx.fork_rngs(rngs):
        assert not np.array_equal(_data(rngs.params.key.value), before)
    np.testing.assert_array_equal(_data(rngs.params.key.value), before)
    copy = nnx.fork_rngs(rngs, graph_updates=False)
    assert not np.array_equal(_data(copy.params.key.value), before)


def test_with_rngs_rules_and_conflicts():
    rngs = nnx.Rngs(params=0, dropout=1)
    key_var = rngs.params.key
    new = nnx.with_rngs(rngs, split={"params": 4}, fork=..., graph_updates=False)
    assert new.params.key.value.shape == (4,) and new["dropout"].key.value.shape == ()
    assert rngs.params.key is key_var
    tree = nnx.with_rngs({"a": nnx.RngStream(0, tag="x")}, broadcast=3, graph=False)
    assert tree["a"].key.value.shape == (3,)
    with pytest.raises(ValueError, match="multiple rules"):
        nnx.with_rngs(rngs, split={"params": 4}, fork="params", graph_updates=False)
    with pytest.raises(NotImplementedError):
        nnx.with_rngs(rngs, split=2, graph=True, graph_updates=True)


def test_reseed_repeats_dropout_masks():
    rngs = nnx.Rngs(dropout=42)
    drop = nnx.Dropout(0.5, deterministic=False)
    x = jnp.ones((16,))
    y1 = drop(x, rngs=rngs)
    nnx.reseed(rngs, dropout=42)
    y2 = drop(x, rngs=rngs)
    nnx.reseed(rngs, dropout=42)
    np.testing.assert_array_equal(y2, drop(x, rngs=rngs))
    assert y1.shape == y2.shape
    nnx.split_rngs(rngs, splits=2)
    with pytest.raises(ValueError, match="non-scalar key"):
        nnx.reseed(rngs, dropout=1)
    nnx.reseed(rngs, dropout=1, policy="match_shape")
    assert rngs["dropout"].key.value.shape == (2,)


def test_stream_from_other_trace_raises():
    rngs = nnx.Rngs(0)

    @jax.jit
    def f():
        with pytest.raises(errors.TraceContextError, match="Cannot mutate RngCount"):
            rngs.params()
        return 0

    f()


def test_experimental_rngs_keep_the_083_face():
    rngs = old_nnx.Rngs(params=0, dropout=1)
    keys = rngs.fork(4, dropout=None)
    assert keys["params"].shape == (4,) and keys["dropout"].shape == ()
    with pytest.raises(AttributeError, match="No RNG named"):
        old_nnx.Rngs(a=0).b()
    assert isinstance(rngs, nnx.Rngs)


# --- Optimizer ------------------------------------------------------------------------------


def test_optimizer_requires_wrt_and_model_in_update():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="wrt"):
        nnx.Optimizer(model, optax.sgd(0.1))
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    with pytest.raises(AttributeError, match="ModelAndOptimizer"):
        opt.model  # noqa: B018
    grads = nnx.grad(lambda m: m(jnp.ones((1, 2))).sum())(model)
    with pytest.raises(TypeError, match="grads"):
        opt.update(grads)


def test_optimizer_update_matches_optax_and_returns_updates():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    tx = optax.adam(0.1)
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    params = {"bias": model.bias.value, "kernel": model.kernel.value}
    grads = nnx.grad(lambda m: (m(jnp.ones((1, 2))) ** 2).sum())(model)
    g = {"bias": grads["bias"].value, "kernel": grads["kernel"].value}
    expect, _ = tx.update(g, tx.init(params), params)
    updates = opt.update(model, grads)
    np.testing.assert_allclose(updates["kernel"], expect["kernel"], rtol=1e-6)
    np.testing.assert_allclose(model.kernel.value, params["kernel"] + expect["kernel"],
                               rtol=1e-6)
    assert int(opt.step.value) == 1
    leaves = jax.tree_util.tree_leaves(opt.opt_state, is_leaf=lambda x: isinstance(
        x, nnx.Variable))
    assert all(isinstance(v, nnx.OptState) for v in leaves)


def test_model_and_optimizer_under_nnx_jit_and_line_search():
    model = nnx.Linear(2, 4, rngs=nnx.Rngs(0))
    x, y = jnp.ones((1, 2)), jnp.zeros((1, 4))

    def loss_fn(m):
        return ((m(x) - y) ** 2).mean()

    state = nnx.ModelAndOptimizer(model, optax.adam(1e-2))
    before = loss_fn(model)

    @nnx.jit
    def step(s):
        s.update(nnx.grad(loss_fn)(s.model))

    step(state)
    assert loss_fn(model) < before
    graphdef = nnx.graphdef(model)
    lbfgs = nnx.ModelAndOptimizer(model, optax.lbfgs())
    before = loss_fn(model)
    grads = nnx.grad(loss_fn)(model)
    lbfgs.update(grads, grad=grads, value=before,
                 value_fn=lambda s: loss_fn(nnx.merge(graphdef, s)))
    assert loss_fn(model) < before


def test_experimental_optimizer_keeps_update_grads():
    model = old_nnx.Linear(2, 1, rngs=old_nnx.Rngs(0))
    opt = old_nnx.Optimizer(model, optax.sgd(0.1))
    opt.update(old_nnx.grad(lambda m: m(jnp.ones((1, 2))).sum())(model))
    assert int(opt.step.value) == 1 and opt.model is model


# --- metrics, EMA, helpers -------------------------------------------------------------------


def test_metrics_masks_threshold_and_welford():
    acc = nnx.metrics.Accuracy(threshold=0.5)
    acc.update(logits=jnp.array([0.4, 0.7, 0.2, 0.6]), labels=jnp.array([0, 1, 1, 1]))
    assert float(acc.compute()) == 0.75
    with pytest.raises(ValueError, match="For binary classification"):
        acc.update(logits=jnp.zeros((4,)), labels=jnp.zeros((2, 2), jnp.int32))
    avg = nnx.metrics.Average()
    avg.update(values=jnp.array([1.0, 5.0, 3.0]), mask=jnp.array([1.0, 0.0, 1.0]))
    assert float(avg.compute()) == 2.0
    with pytest.raises(ValueError, match="should be a jax array"):
        avg.update(values=2, mask=jnp.ones(1))
    mm = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average())
    mm.update(logits=jnp.array([[0.0, 1.0], [1.0, 0.0]]), labels=jnp.array([1, 1]),
              values=jnp.array([1.0, 3.0]), mask={"accuracy": jnp.array([True, False])})
    out = mm.compute()
    assert float(out["accuracy"]) == 1.0 and float(out["loss"]) == 2.0
    values = jax.random.normal(jax.random.key(0), (5, 2))
    w = nnx.metrics.Welford()
    w.update(values=values[:2])
    w.update(values=values[2:])
    stats = w.compute()
    np.testing.assert_allclose(stats.mean, values.mean(), rtol=1e-5)
    np.testing.assert_allclose(stats.standard_deviation, values.std(), rtol=1e-5)


def test_ema_update_and_apply_to():
    model = nnx.Linear(2, 2, use_bias=False, rngs=nnx.Rngs(0))
    k0 = model.kernel.value
    ema = nnx.EMA(model, decay=0.9)
    ema_model = ema.apply_to(model)
    model.kernel.value = k0 * 2
    ema.update(model)
    np.testing.assert_allclose(ema.params["kernel"].value, 1.1 * k0, rtol=1e-6)
    assert ema_model.kernel is ema.params["kernel"]
    assert ema_model.kernel is not model.kernel


def test_helpers_module_paths():
    from flaxen.nnx import helpers

    assert helpers.TrainState is nnx.TrainState
    assert helpers.Sequential is nnx.Sequential
    assert nnx.rnglib.split_rngs is nnx.split_rngs and nnx.rnglib.reseed is nnx.reseed


def test_empty_sequential_is_identity():
    iden = nnx.Sequential()
    assert iden(12) == 12 and iden(12, 23) == (12, 23)
    assert iden() is None and iden(k=2) == {"k": 2}


def test_train_state_apply_takes_the_state_by_keyword():
    import jax.numpy as jnp
    import optax

    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    ts = nnx.TrainState.create(graphdef, params=params, tx=optax.sgd(0.1))
    by_name, _ = ts.apply(state="params")(jnp.ones((1, 2)))
    by_state, _ = ts.apply(params)(jnp.ones((1, 2)))
    assert by_name.shape == (1, 3)
    assert jnp.array_equal(by_name, by_state)


def test_the_metric_base_cannot_be_built_but_its_subclasses_can():
    with pytest.raises(NotImplementedError, match="Must override `__init__\\(\\)` method"):
        nnx.metrics.Metric()

    class Count(nnx.metrics.Metric):
        def __init__(self) -> None:  # no Metric.__init__ call, as in Flax
            self.n = nnx.metrics.MetricState(jnp.array(0))

        def update(self, **kwargs) -> None:
            self.n[...] += 1

        def compute(self):
            return self.n[...]

    c = Count()
    c.update()
    assert int(c.compute()) == 1
