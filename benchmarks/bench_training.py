"""Training toolkit speed: the demo's train step, and checkpoint save + restore.

* ``train_step``: one jitted Adam step of the `make demo` CNN (batch 32 of 8x8 digits) written
  with flaxen.linen + flaxen TrainState, with flax.linen + flax TrainState, and by hand in pure
  JAX (lax convolutions, optax). Includes the per-call Python work around the compiled step.
* ``checkpoint``: ``save_checkpoint`` then ``restore_checkpoint`` (legacy msgpack format, into a
  target) of a 1 GiB state (64 MiB with ``--quick``), flaxen vs flax; "jax" is the I/O floor:
  the raw array bytes written with ``ndarray.tofile`` and read back with ``np.fromfile``.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks._harness import Result, compare, have_flax

BATCH = 32


def _batch():
    rng = np.random.RandomState(0)
    images = rng.rand(BATCH, 8, 8, 1).astype(np.float32)
    labels = rng.randint(0, 10, BATCH).astype(np.int32)
    return jnp.asarray(images), jnp.asarray(labels)


def _cnn(nn):
    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(features=32, kernel_size=(3, 3))(x))
            x = nn.relu(nn.Conv(features=64, kernel_size=(3, 3))(x))
            x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(features=128)(x))
            return nn.Dense(features=10)(x)

    return CNN()


def _linen_step(nn, train_state_mod):
    """A zero-argument callable running one train step of a Linen CNN, keeping its state."""
    model = _cnn(nn)
    images, labels = _batch()
    params = model.init(jax.random.PRNGKey(0), images[:1])["params"]
    state = train_state_mod.TrainState.create(
        apply_fn=model.apply, params=params, tx=optax.adam(1e-3)
    )

    @jax.jit
    def step(state, images, labels):
        def loss_fn(params):
            logits = state.apply_fn({"params": params}, images)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, jnp.mean(jnp.argmax(logits, -1) == labels)

        (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads), loss, acc

    box = [state]

    def run():
        box[0], loss, acc = step(box[0], images, labels)
        return loss

    return run


def _jax_step():
    images, labels = _batch()
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    params = {
        "c1": (jax.random.normal(k[0], (3, 3, 1, 32)) * 0.3, jnp.zeros(32)),
        "c2": (jax.random.normal(k[1], (3, 3, 32, 64)) * 0.06, jnp.zeros(64)),
        "d1": (jax.random.normal(k[2], (1024, 128)) * 0.03, jnp.zeros(128)),
        "d2": (jax.random.normal(k[3], (128, 10)) * 0.09, jnp.zeros(10)),
    }
    tx = optax.adam(1e-3)
    dims = ("NHWC", "HWIO", "NHWC")

    def apply(p, x):
        for name in ("c1", "c2"):
            w, b = p[name]
            x = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims) + b
            x = jax.nn.relu(x)
        x = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
        x = x.reshape((x.shape[0], -1))
        x = jax.nn.relu(x @ p["d1"][0] + p["d1"][1])
        return x @ p["d2"][0] + p["d2"][1]

    @jax.jit
    def step(params, opt_state, images, labels):
        def loss_fn(params):
            logits = apply(params, images)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, jnp.mean(jnp.argmax(logits, -1) == labels)

        (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, acc

    box = [params, tx.init(params)]

    def run():
        box[0], box[1], loss, acc = step(box[0], box[1], images, labels)
        return loss

    return run


def _train_step_case(quick: bool) -> Result:
    import flaxen.linen as fnn
    from flaxen.training import train_state as our_ts

    impls = {"flaxen": _linen_step(fnn, our_ts), "jax": _jax_step()}
    if have_flax():
        import flax.linen as rnn
        from flax.training import train_state as ref_ts

        impls["flax"] = _linen_step(rnn, ref_ts)
    return compare("training", "demo CNN train_step (batch 32)", impls,
                   rounds=5 if quick else 9, min_time=0.1 if quick else 0.3)


def _state(total_bytes: int) -> dict:
    n_arrays = 16
    per = total_bytes // n_arrays // 4
    rng = np.random.RandomState(0)
    return {"params": {f"layer_{i}": {"kernel": rng.rand(per).astype(np.float32)}
                       for i in range(n_arrays)}, "step": 3}


def _checkpoint_case(quick: bool) -> Result:
    from flaxen import config
    from flaxen.training import checkpoints as ours

    size = (64 << 20) if quick else (1 << 30)
    state = _state(size)
    target = jax.tree.map(np.zeros_like, state)
    root = tempfile.mkdtemp(prefix="flaxen_bench_ckpt_")
    counters = {"flaxen": 0, "flax": 0}

    def save_restore(lib, name):
        def run():
            counters[name] += 1
            lib.save_checkpoint(os.path.join(root, name), state, counters[name])
            return lib.restore_checkpoint(os.path.join(root, name), target)["params"]
        return run

    def raw_floor():
        leaves = jax.tree.leaves(state["params"])
        path = os.path.join(root, "raw")
        with open(path, "wb") as f:
            for leaf in leaves:
                leaf.tofile(f)
            f.flush()
            os.fsync(f.fileno())
        with open(path, "rb") as f:
            return [np.fromfile(f, np.float32, leaf.size) for leaf in leaves]

    impls = {"flaxen": save_restore(ours, "flaxen"), "jax": raw_floor}
    old_flag = config.flax_use_orbax_checkpointing
    config.update("flax_use_orbax_checkpointing", False)
    ref_config = None
    if have_flax():
        import flax
        from flax.training import checkpoints as ref

        ref_config = flax.config.flax_use_orbax_checkpointing
        flax.config.update("flax_use_orbax_checkpointing", False)
        impls["flax"] = save_restore(ref, "flax")
    try:
        label = f"save+restore_checkpoint {size >> 20} MiB"
        return compare("training", label, impls, rounds=5 if quick else 3, number=1,
                       baseline="flax" if "flax" in impls else "jax",
                       note="jax = raw tofile/fromfile floor")
    finally:
        config.update("flax_use_orbax_checkpointing", old_flag)
        if ref_config is not None:
            import flax

            flax.config.update("flax_use_orbax_checkpointing", ref_config)
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool) -> list[Result]:
    return [_train_step_case(quick), _checkpoint_case(quick)]
