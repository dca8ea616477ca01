"""flaxen.training's TrainState and small utilities against flax.training, same inputs."""

import dataclasses
import random

import flax.serialization as ref_ser
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import common_utils as ref_cu
from flax.training import dynamic_scale as ref_ds
from flax.training import early_stopping as ref_es
from flax.training import lr_schedule as ref_lr
from flax.training import train_state as ref_ts

from flaxen import serialization
from flaxen.training import common_utils as our_cu
from flaxen.training import dynamic_scale as our_ds
from flaxen.training import early_stopping as our_es
from flaxen.training import lr_schedule as our_lr
from flaxen.training import train_state as our_ts


def _fields(cls):
    return [(f.name, f.default, dict(f.metadata)) for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("pair", [(ref_ts.TrainState, our_ts.TrainState),
                                  (ref_es.EarlyStopping, our_es.EarlyStopping),
                                  (ref_ds.DynamicScale, our_ds.DynamicScale)])
def test_same_fields_defaults_and_static_markers(pair):
    assert _fields(pair[0]) == _fields(pair[1])


@pytest.mark.parametrize("make_tx", [lambda: optax.sgd(0.1, momentum=0.9),
                                     lambda: optax.adamw(1e-2), lambda: optax.lamb(1e-3)])
def test_train_state_steps_identical(make_tx):
    tx = make_tx()
    params = {"Dense_0": {"kernel": jnp.linspace(-1, 1, 12).reshape(3, 4), "bias": jnp.zeros(4)}}
    theirs = ref_ts.TrainState.create(apply_fn=None, params=params, tx=tx)
    mine = our_ts.TrainState.create(apply_fn=None, params=params, tx=tx)
    for i in range(3):
        grads = jax.tree.map(lambda p, i=i: jnp.sin(p + i), params)
        theirs = theirs.apply_gradients(grads=grads)
        mine = mine.apply_gradients(grads=grads)
    for a, b in zip(jax.tree.leaves(theirs), jax.tree.leaves(mine)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert ref_ser.to_bytes(theirs) == serialization.to_bytes(mine)
    jitted_ref = jax.jit(lambda s, g: s.apply_gradients(grads=g))(theirs, grads)
    jitted_ours = jax.jit(lambda s, g: s.apply_gradients(grads=g))(mine, grads)
    assert ref_ser.to_bytes(jitted_ref) == serialization.to_bytes(jitted_ours)


def test_train_state_restores_across_libraries_via_bytes():
    tx = optax.adam(1e-3)
    params = {"w": jnp.ones((2, 2))}
    theirs = ref_ts.TrainState.create(apply_fn=None, params=params, tx=tx)
    mine = our_ts.TrainState.create(apply_fn=None, params=params, tx=tx)
    theirs = theirs.apply_gradients(grads={"w": jnp.ones((2, 2))})
    restored = serialization.from_bytes(mine, ref_ser.to_bytes(theirs))
    assert int(restored.step) == 1
    np.testing.assert_array_equal(restored.params["w"], theirs.params["w"])


def test_early_stopping_random_sequences():
    rnd = random.Random(0)
    for _ in range(200):
        kw = dict(min_delta=rnd.choice([0, 0.01, 0.1]), patience=rnd.choice([0, 1, 2, 3]))
        a, b = ref_es.EarlyStopping(**kw), our_es.EarlyStopping(**kw)
        for _ in range(10):
            m = rnd.choice([rnd.random(), 0.5, 0.49, float("inf")])
            a, b = a.update(m), b.update(m)
            assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert dataclasses.asdict(a.reset()) == dataclasses.asdict(b.reset())


@pytest.mark.parametrize("kw", [{}, dict(scale=2.0, growth_interval=2),
                                dict(scale=8.0, minimum_scale=4.0, growth_interval=1),
                                dict(minimum_scale=None, scale=1.0)])
def test_dynamic_scale_sequences(kw):
    def run(cls):
        ds, out = cls(**kw), []
        for v in [1.0, 2.0, jnp.inf, 3.0, 1e30, 0.5, 0.25, 4.0]:
            f = lambda x: jnp.sum(x.astype(jnp.float16) ** 2)
            r = ds.value_and_grad(f)(jnp.ones(2) * v)
            ds = r.dynamic_scale
            out.append((r.aux, r.grad, r.finite, ds.scale, ds.fin_steps))
        return out

    for x, y in zip(run(ref_ds.DynamicScale), run(our_ds.DynamicScale)):
        for u, w in zip(x, y):
            np.testing.assert_array_equal(np.asarray(u), np.asarray(w))
            assert np.asarray(u).dtype == np.asarray(w).dtype


def test_lr_schedules_match():
    steps = [0, 1, 5, 9, 10, 11, 19, 24, 25, 26, 29, 30, 45, 60, 1000]
    pairs = [
        (ref_lr.create_constant_learning_rate_schedule(0.1, 10, warmup_length=2.0),
         our_lr.create_constant_learning_rate_schedule(0.1, 10, warmup_length=2.0)),
        (ref_lr.create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.5], [2.5, 0.1]], 1.0),
         our_lr.create_stepped_learning_rate_schedule(0.1, 10, [[1, 0.5], [2.5, 0.1]], 1.0)),
        (ref_lr.create_cosine_learning_rate_schedule(0.1, 10, 3, warmup_length=1.0),
         our_lr.create_cosine_learning_rate_schedule(0.1, 10, 3, warmup_length=1.0)),
    ]
    for theirs, mine in pairs:
        np.testing.assert_allclose([float(theirs(s)) for s in steps],
                                   [float(mine(s)) for s in steps], rtol=1e-6, atol=1e-9)
    plain_ref = ref_lr.create_constant_learning_rate_schedule(0.1, 10)
    plain_ours = our_lr.create_constant_learning_rate_schedule(0.1, 10)
    assert plain_ref(3) == plain_ours(3)


def test_common_utils_match():
    n = jax.local_device_count()
    xs = {"a": np.arange(n * 4).reshape(n * 2, 2), "b": jnp.ones(n)}
    for a, b in zip(jax.tree.leaves(ref_cu.shard(xs)), jax.tree.leaves(our_cu.shard(xs))):
        assert type(a) is type(b)
        np.testing.assert_array_equal(a, b)
    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(ref_cu.shard_prng_key(key), our_cu.shard_prng_key(key))
    forest = [{"a": 1, "b": np.ones(2) * i} for i in range(3)]
    for a, b in zip(jax.tree.leaves(ref_cu.stack_forest(forest)),
                    jax.tree.leaves(our_cu.stack_forest(forest))):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    step = jax.pmap(lambda x, i: {"loss": x * i}, in_axes=(0, None))
    hist = [step(jnp.arange(1.0, n + 1.0), float(i)) for i in range(3)]
    np.testing.assert_array_equal(ref_cu.get_metrics(hist)["loss"],
                                  our_cu.get_metrics(hist)["loss"])
    labels = jnp.array([[0, 2], [1, 5]])
    np.testing.assert_array_equal(ref_cu.onehot(labels, 3, 2.0, -1.0),
                                  our_cu.onehot(labels, 3, 2.0, -1.0))
