"""Today's ``nnx.Optimizer`` against Flax 0.12.8's contract (issues 21 and 22): what Optax
receives (States of arrays), what ``opt_state`` holds, ``wrt`` over bare-array attributes,
the write-back paths, and flaxen's own errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flaxen import nnx
from flaxen.errors import GraphStateMismatchError


class Bare(nnx.Module):
    """A model whose trainable weight and counter are plain array attributes."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.w = jax.random.uniform(rngs(), (2, 4))
        self.count = jnp.array(0)

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count += 1
        return x @ self.w


def _is_w(path: tuple, _: object) -> bool:
    return path[-1] == "w"


def _grads(model: nnx.Module) -> nnx.State:
    return nnx.grad(lambda m: (m(jnp.ones((1, 2))) ** 2).sum())(model)


def test_tx_sees_states_of_arrays_and_returns_state_updates():
    seen = {}

    def spy_init(params):
        seen["init"] = params
        return optax.EmptyState()

    def spy_update(updates, state, params=None):
        seen["update"] = (updates, params)
        return updates, state

    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.GradientTransformation(spy_init, spy_update),
                        wrt=nnx.Param)
    assert isinstance(seen["init"], nnx.State)
    assert isinstance(seen["init"]["kernel"], nnx.Param)  # init gets nnx.state(model, wrt)
    grads = _grads(model)
    out = opt.update(model, grads)
    g, p = seen["update"]
    for tree in (g, p, out):
        assert isinstance(tree, nnx.State)
        assert all(isinstance(x, jax.Array) for x in jax.tree_util.tree_leaves(tree))
    np.testing.assert_allclose(out["kernel"], grads["kernel"].value)


def test_map_state_labels_work_with_optax_partition():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    kernel0 = model.kernel.value
    labels = nnx.map_state(lambda path, _: "frozen" if path[-1] == "kernel" else "train",
                           nnx.state(model, nnx.Param))
    for tx in (optax.partition({"train": optax.sgd(1.0), "frozen": optax.set_to_zero()},
                               labels),
               optax.multi_transform({"train": optax.adam(0.1),
                                      "frozen": optax.set_to_zero()}, labels)):
        opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
        bias0 = model.bias.value
        opt.update(model, _grads(model))
        np.testing.assert_array_equal(model.kernel.value, kernel0)
        assert not np.allclose(model.bias.value, bias0)


def test_opt_state_matches_flax_layout():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(0.1), wrt=nnx.Param)
    adam = opt.opt_state[0]
    assert isinstance(adam.count, nnx.OptArray)
    assert isinstance(adam.mu, nnx.State) and set(adam.mu) == {"bias", "kernel"}
    assert isinstance(adam.mu["kernel"], nnx.OptVariable)
    opt.update(model, _grads(model))
    assert int(adam.count.value) == 1 and int(opt.step.value) == 1
    assert float(jnp.abs(adam.mu["kernel"].value).sum()) > 0


def test_opt_variable_keeps_sharding_metadata():
    with nnx.use_eager_sharding(False):  # axis names only, no mesh
        model = nnx.Linear(2, 3, use_bias=False, rngs=nnx.Rngs(0),
                           kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(),
                                                             ("a", "b")))
    opt = nnx.Optimizer(model, optax.adam(0.1), wrt=nnx.Param)
    assert opt.opt_state[0].mu["kernel"].out_sharding == ("a", "b")


def test_wrt_path_filter_over_bare_arrays_eager_and_jit():
    model = Bare(nnx.Rngs(1))
    w0 = model.w
    opt = nnx.Optimizer(model, optax.sgd(0.5), wrt=_is_w)
    grads = nnx.state(model, _is_w)
    grads = jax.tree_util.tree_map(jnp.ones_like, grads)
    updates = opt.update(model, grads)
    np.testing.assert_allclose(model.w, w0 - 0.5)
    np.testing.assert_allclose(updates["w"], -0.5 * jnp.ones((2, 4)))
    assert int(model.count) == 0  # not selected by wrt: left alone

    x, y = jax.random.normal(jax.random.key(0), (5, 2)), jnp.ones((5, 4))

    @jax.jit
    def train_step(model, opt):
        graphdef, params, rest = nnx.split(model, _is_w, ...)

        def loss_fn(params):
            m = nnx.merge(graphdef, params, rest)
            return jnp.mean((m(x) - y) ** 2), nnx.state(m, nnx.Not(_is_w))

        (loss, new_rest), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        nnx.update(model, new_rest)
        opt.update(model, grads)
        return loss, model, opt

    w1 = model.w
    loss, model, opt = train_step(model, opt)
    assert float(loss) > 0
    assert int(model.count) == 1 and int(opt.step.value) == 2
    assert not np.allclose(model.w, w1)


def test_plain_array_next_to_param_is_left_alone():
    class Mixed(nnx.Module):
        def __init__(self) -> None:
            self.buf = jnp.ones((2,))
            self.p = nnx.Param(jnp.ones((3,)))

    m = Mixed()
    opt = nnx.Optimizer(m, optax.sgd(0.1), wrt=nnx.Param)
    opt.update(m, nnx.grad(lambda m: (m.p.value ** 2).sum())(m))
    np.testing.assert_allclose(m.p.value, 0.8 * np.ones(3), rtol=1e-6)
    np.testing.assert_array_equal(m.buf, np.ones(2))


def test_functional_state_as_model():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    opt = nnx.Optimizer(model, optax.sgd(1.0), wrt=nnx.Param)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)  # a State of Params
    bias0 = model.bias.value
    opt.update(params, grads)  # a State of the model's Variables: written through them
    np.testing.assert_allclose(model.bias.value, bias0 - 1.0)
    pure = nnx.as_pure(nnx.state(model, nnx.Param))
    opt = nnx.Optimizer(pure, optax.sgd(1.0), wrt=...)
    opt.update(pure, nnx.as_pure(grads))  # a State of arrays: updated in place
    np.testing.assert_allclose(pure["bias"], bias0 - 2.0)
    np.testing.assert_allclose(model.bias.value, bias0 - 1.0)


def test_tree_mode_optimizer():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param, graph=False)
    bias0 = model.bias.value
    opt.update(model, _grads(model))
    assert not np.allclose(model.bias.value, bias0) and int(opt.step.value) == 1


def test_kwargs_reach_tx_as_arrays():
    seen = {}

    def spy_update(updates, state, params=None, *, extra=None):
        seen["extra"] = extra
        return updates, state

    tx = optax.GradientTransformationExtraArgs(lambda p: optax.EmptyState(), spy_update)
    model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    opt.update(model, _grads(model), extra=nnx.state(model, nnx.Param))
    assert isinstance(seen["extra"]["kernel"], jax.Array)


def test_wrt_matching_nothing_gives_an_optimizer_over_nothing():
    class OnlyArrays(nnx.Module):
        def __init__(self) -> None:
            self.w = jnp.ones((2,))

    assert jax.tree_util.tree_leaves(
        nnx.Optimizer(OnlyArrays(), optax.sgd(0.1), wrt=nnx.Param).opt_state) == []
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    before = model.kernel[...]
    opt = nnx.Optimizer(model, optax.adam(0.1), wrt=nnx.LoRAParam)
    opt.update(model, _grads(model))  # the Param gradients are not the LoRAParams'
    assert (model.kernel[...] == before).all() and int(opt.step[...]) == 1


def test_grads_mismatch_names_the_path():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    grads = _grads(model)
    del grads["bias"]
    with pytest.raises(GraphStateMismatchError, match="missing /bias"):
        opt.update(model, grads)
    with pytest.raises(GraphStateMismatchError,
                       match="missing /bias: the gradient there is a plain array.*not select"):
        opt.update(model, {"bias": jnp.zeros(3)})  # plain arrays are not nnx.Param
    assert int(opt.step.value) == 0


def test_train_state_is_generic():
    ts_type = nnx.TrainState[nnx.Linear]
    assert ts_type.__origin__ is nnx.TrainState  # type: ignore[attr-defined]
    graphdef, params = nnx.split(nnx.Linear(2, 1, rngs=nnx.Rngs(0)))
    state = nnx.TrainState.create(graphdef, params=params, tx=optax.sgd(0.1))
    assert [f for f in state.__dataclass_fields__] == [
        "graphdef", "params", "opt_state", "step", "tx"]
    grads = jax.tree_util.tree_map(jnp.ones_like, state.params)
    assert int(state.apply_gradients(grads).step) == 1


def test_update_with_partial_state_keeps_other_bare_arrays():
    model = Bare(nnx.Rngs(1))
    w0 = model.w
    nnx.update(model, nnx.State({"count": jnp.array(5)}))
    assert int(model.count) == 5
    assert model.w is w0  # not named by the state: kept, not replaced by a placeholder


def test_update_does_not_walk_the_model_again(monkeypatch):
    from flaxen.nnx import _graph_engine

    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(0.1), wrt=nnx.Param)
    opt.update(model, _grads(model))  # the model's walk is now cached
    grads = _grads(model)  # a new State, as every training step makes
    walks = []
    real = _graph_engine.flatten
    monkeypatch.setattr(_graph_engine, "flatten", lambda *a, **k: walks.append(1) or real(*a, **k))
    bias = model.bias.value
    opt.update(model, grads)
    assert walks == [] and not np.allclose(model.bias.value, bias)
    nnx.state(grads, nnx.Param)  # the probe does see a walk of a new State
    assert walks


def test_train_state_subclass_fields_and_apply_checks():
    from flaxen.errors import NNXArgumentError

    class WithStats(nnx.TrainState[nnx.BatchNorm]):
        batch_stats: nnx.State
        note: str = "x"

    graphdef, params, stats = nnx.split(nnx.BatchNorm(2, rngs=nnx.Rngs(0)), nnx.Param,
                                        nnx.BatchStat)
    ts = WithStats.create(graphdef, params=params, tx=optax.sgd(0.1), batch_stats=stats)
    assert type(ts) is WithStats
    y, _ = ts.apply("params", "batch_stats")(jnp.ones((1, 2)))
    assert y.shape == (1, 2)
    with pytest.raises(NNXArgumentError, match=r"WithStats\.note to be a State, got a str"):
        ts.apply("params", "note")
    grads = jax.tree_util.tree_map(jnp.ones_like, ts.params)
    assert type(ts.apply_gradients(grads)) is WithStats


def test_optimizers_metrics_and_ema_are_pytrees_not_modules():
    # as in Flax 0.12.8: code that tells layers apart with isinstance(x, nnx.Module) must not
    # take an optimizer, a metric or an EMA for one
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    objects = [nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param),
               nnx.ModelAndOptimizer(model, optax.sgd(0.1), wrt=nnx.Param),
               nnx.metrics.Average(), nnx.metrics.Accuracy(), nnx.metrics.Welford(),
               nnx.MultiMetric(loss=nnx.metrics.Average()),
               nnx.EMA(nnx.state(model, nnx.Param), decay=0.9)]
    for obj in objects:
        assert isinstance(obj, nnx.Pytree), type(obj)
        assert not isinstance(obj, nnx.Module), type(obj)
        assert nnx.state(obj) is not None
