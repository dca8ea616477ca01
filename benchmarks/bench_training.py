"""Training toolkit speed: the demo's train step, and checkpoint save + restore.

* ``train_step``: one step of the `make demo` job exactly as ``examples/digits_cnn.py`` writes
  it (its ``CNN``, ``create_state``: Adam on a cosine-decay schedule over the demo's default run,
  and its jitted ``train_step``; batch 32 of 8x8 digits):
  - "flaxen": the demo module itself;
  - "flax": the same file loaded with its flaxen imports pointed at flax (``flax.linen``,
    ``flax.training``), so the two cannot drift apart;
  - "jax": the same network, optimizer and schedule by hand (lax convolutions, optax), starting
    from the same parameters.
  Each includes the per-call Python work around the compiled step.
* ``checkpoint``: ``save_checkpoint`` then ``restore_checkpoint`` (legacy msgpack format, into a
  target) of a 1 GiB state (64 MiB with ``--quick``), flaxen vs flax; "jax" is the I/O floor:
  the raw array bytes written with ``ndarray.tofile`` and read back with ``np.fromfile``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks._harness import Result, compare, have_flax

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                    "digits_cnn.py")
# The demo's defaults (examples/digits_cnn.py --help): 15 epochs of batch 32 over the 1,438
# training digits, peak learning rate 2e-3.
BATCH, EPOCHS, LEARNING_RATE, N_TRAIN = 32, 15, 2e-3, 1438
TOTAL_STEPS = EPOCHS * (N_TRAIN // BATCH)
# How the demo imports flaxen, and what the flax copy imports instead.
_TO_FLAX = {
    "import flaxen.linen as nn": "import flax.linen as nn",
    "from flaxen import config, serialization": "from flax import config, serialization",
    "from flaxen.training import checkpoints, train_state":
        "from flax.training import checkpoints, train_state",
}


def _load_demo(flavour: str) -> types.ModuleType:
    """examples/digits_cnn.py as a module; with "flax", its flaxen imports become flax's."""
    name = f"_bench_digits_cnn_{flavour}"
    if name in sys.modules:
        return sys.modules[name]
    with open(DEMO) as f:
        source = f.read()
    if flavour == "flax":
        for ours, theirs in _TO_FLAX.items():
            if ours not in source:
                raise RuntimeError(
                    f"{DEMO} no longer contains {ours!r}; update _TO_FLAX in "
                    "benchmarks/bench_training.py so the flax copy matches the demo."
                )
            source = source.replace(ours, theirs)
        if "flaxen" in source.replace("flaxen_", ""):
            raise RuntimeError(f"{DEMO} imports flaxen in a way _TO_FLAX does not rewrite.")
    module = types.ModuleType(name)
    module.__file__ = DEMO
    sys.modules[name] = module
    exec(compile(source, DEMO, "exec"), module.__dict__)
    return module


def _batch():
    rng = np.random.RandomState(0)
    images = rng.rand(BATCH, 8, 8, 1).astype(np.float32)
    labels = rng.randint(0, 10, BATCH).astype(np.int32)
    return jnp.asarray(images), jnp.asarray(labels)


def _demo_step(demo: types.ModuleType):
    """A zero-argument callable running the demo's train step, keeping its state."""
    images, labels = _batch()
    # one schedule segment: cosine decay from step 0 over the whole run
    state = demo.create_state(jax.random.PRNGKey(0), [(0, LEARNING_RATE, TOTAL_STEPS)])
    box = [state]

    def run():
        box[0], loss, _ = demo.train_step(box[0], images, labels)
        return loss

    return run, state.params


def _jax_step(linen_params):
    """The demo's network, Adam and schedule written by hand, from the same parameters."""
    images, labels = _batch()
    lp = jax.tree.map(jnp.asarray, dict(linen_params))
    params = {name: (lp[layer]["kernel"], lp[layer]["bias"]) for name, layer in
              (("c1", "Conv_0"), ("c2", "Conv_1"), ("d1", "Dense_0"), ("d2", "Dense_1"))}
    tx = optax.adam(optax.cosine_decay_schedule(LEARNING_RATE, TOTAL_STEPS))
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
    flaxen_run, params = _demo_step(_load_demo("flaxen"))
    impls = {"flaxen": flaxen_run, "jax": _jax_step(params)}
    if have_flax():
        impls["flax"], _ = _demo_step(_load_demo("flax"))
    # The three compute the same step: check the losses of a first step agree.
    first = {k: float(fn()) for k, fn in impls.items()}
    if max(first.values()) - min(first.values()) > 1e-4 * max(1.0, abs(first["flaxen"])):
        raise RuntimeError(f"the train steps disagree on the first loss: {first}")
    return compare("training", f"demo CNN train_step (batch {BATCH}, Adam+cosine)", impls,
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
            with warnings.catch_warnings():
                # the legacy format is what this case measures: both libraries warn that
                # it is deprecated, once per call
                warnings.filterwarnings("ignore", "Flax Checkpointing will soon be deprecated",
                                        DeprecationWarning)
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
