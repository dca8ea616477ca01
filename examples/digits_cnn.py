"""Train a small Linen CNN on scikit-learn's handwritten digits (the `make demo` job).

The data set ships inside scikit-learn (1,797 8x8 grey-scale digits, no download). The script
follows the Flax Quickstart: a Linen module, a ``TrainState`` with an Optax optimizer, a jitted
train step, evaluation on a held-out split after every epoch, a checkpoint after every epoch
(running the script again resumes from the last one), and a PNG plot of the loss and accuracy
curves. On a terminal a progress bar shows the epoch's running loss and accuracy; in a log file
each epoch is one line.

The learning rate follows a cosine decay over the planned epochs. Resuming with another
``--epochs`` re-plans the rest of the run and says so: from the rate an ``--epochs``-long plan
has at the current step, decayed to 0 over the epochs that remain; it never restarts at the
peak.

    python examples/digits_cnn.py --epochs 15 --workdir demo_out
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import flaxen.linen as nn
from flaxen import config, serialization
from flaxen.training import checkpoints, train_state

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = ("train_loss", "train_accuracy", "test_loss", "test_accuracy")


class CNN(nn.Module):
    """Two 3x3 convolutions, one 2x2 average pool, two dense layers."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(features=32, kernel_size=(3, 3))(x))
        x = nn.relu(nn.Conv(features=64, kernel_size=(3, 3))(x))
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(features=128)(x))
        return nn.Dense(features=10)(x)


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """Images scaled to [0, 1] with shape (N, 8, 8, 1), split into train and test sets."""
    from sklearn.datasets import load_digits as sk_load_digits

    digits = sk_load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.RandomState(seed).permutation(len(labels))
    n_test = int(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return (images[train], labels[train]), (images[test], labels[test])


def make_schedule(segments) -> optax.Schedule:
    """Cosine decays one after another: each ``(start_step, rate, decay_steps)`` segment starts
    at ``rate`` and reaches 0 after ``decay_steps``; the first starts at step 0."""
    parts = [optax.cosine_decay_schedule(float(rate), max(int(n), 1)) for _, rate, n in segments]
    if len(parts) == 1:
        return parts[0]
    return optax.join_schedules(parts, [int(start) for start, _, _ in segments[1:]])


def create_state(rng, segments) -> train_state.TrainState:
    model = CNN()
    params = model.init(rng, jnp.ones((1, 8, 8, 1)))["params"]
    tx = optax.adam(make_schedule(segments))
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def loss_and_accuracy(logits, labels):
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss, jnp.mean(jnp.argmax(logits, -1) == labels)


@jax.jit
def train_step(state, images, labels):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, images)
        return loss_and_accuracy(logits, labels)

    (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    return state.apply_gradients(grads=grads), loss, accuracy


@jax.jit
def eval_step(state, images, labels):
    return loss_and_accuracy(state.apply_fn({"params": state.params}, images), labels)


def save(ckpt_dir: str, state, history: dict, epoch: int, segments) -> str:
    payload = {"state": state, "history": {k: np.asarray(v) for k, v in history.items()},
               "schedule": np.asarray(segments, np.float64)}
    return checkpoints.save_checkpoint(ckpt_dir, payload, step=epoch, keep=2)


def plan_schedule(raw, args, steps_per_epoch: int):
    """The schedule segments for this run, and a message when resuming changes the plan."""
    planned = [(0, args.learning_rate, args.epochs * steps_per_epoch)]
    if raw is None:
        return planned, None
    segments = [tuple(row) for row in np.asarray(raw.get("schedule", planned), np.float64)]
    done = len(np.atleast_1d(raw["history"]["test_accuracy"]))
    start, rate, length = segments[-1]
    planned_epochs = round((start + length) / steps_per_epoch)
    if args.epochs == planned_epochs or args.epochs <= done:
        return segments, None
    step = int(np.asarray(raw["state"]["step"]))
    peak = float(segments[0][1])
    rate_was = float(make_schedule(segments)(step))
    rate = float(optax.cosine_decay_schedule(peak, args.epochs * steps_per_epoch)(step))
    remaining = (args.epochs - done) * steps_per_epoch
    message = (f"--epochs changed from {planned_epochs} to {args.epochs}: the learning rate goes "
               f"on from {rate:.3g}, the rate of a {args.epochs}-epoch plan at step {step} (it "
               f"was {rate_was:.3g}), and decays to 0 over the {args.epochs - done} remaining "
               f"epochs; it does not restart at the peak {peak:.3g}")
    return [*segments, (step, rate, remaining)], message


def restore(raw, state):
    """Returns ``(state, history, epochs_done)`` from a checkpoint's raw state dict, if any."""
    if raw is None:
        return state, {k: [] for k in METRICS}, 0
    # strict: a checkpoint of another model (other layer sizes) is an error naming every
    # differing parameter, not a silent restore that fails later in the first train step.
    state = serialization.from_state_dict(state, raw["state"], strict=True)
    history = {k: [float(v) for v in np.atleast_1d(raw["history"][k])] for k in METRICS}
    return state, history, len(history["test_accuracy"])


def plot(history: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = np.arange(1, len(history["train_loss"]) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for split, label in (("train", "train"), ("test", "held-out")):
        ax_loss.plot(epochs, history[f"{split}_loss"], marker="o", label=label)
        ax_acc.plot(epochs, history[f"{split}_accuracy"], marker="o", label=label)
    lowest = min(history["train_accuracy"] + history["test_accuracy"])
    ax_loss.set(title="Loss", xlabel="epoch", yscale="log")
    ax_acc.set(title="Accuracy", xlabel="epoch", ylim=(max(0.0, lowest - 0.02), 1.005))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=15, help="total epochs (default: 15)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (default: 32)")
    parser.add_argument("--learning-rate", type=float, default=2e-3,
                        help="peak Adam learning rate, cosine-decayed to 0 (default: 2e-3)")
    parser.add_argument("--workdir", default=os.path.join(REPO_ROOT, "demo_out"),
                        help="where checkpoints and the plot go (default: <repo>/demo_out)")
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed (default: 0)")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.learning_rate <= 0:
        parser.error("--epochs and --batch-size must be >= 1 and --learning-rate > 0")
    return args


class _NoProgress:
    """Stands in for rich's Progress off a terminal: its bar would be re-printed into the log
    when it stops, a second copy of every epoch line; each epoch's own line is enough."""

    def __init__(self, console) -> None:
        self.console = console

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def update(self, *args, **kwargs) -> None:
        return None

    def remove_task(self, task) -> None:
        return None


def train_epoch(state, train_x, train_y, perm, batch_size: int, steps: int, progress, task):
    """One pass over the shuffled training set; returns the state and the epoch's mean loss and
    accuracy (the progress bar shows the running means, not the last minibatch's)."""
    totals = np.zeros(2)
    pending = []
    for i in range(steps):
        idx = perm[i * batch_size:(i + 1) * batch_size]
        state, loss, acc = train_step(state, train_x[idx], train_y[idx])
        pending.append((loss, acc))
        if i % 8 == 0 or i == steps - 1:  # reading a value waits for the device
            totals += np.asarray(jax.device_get(pending), np.float64).sum(axis=0)
            pending.clear()
            mean_loss, mean_acc = totals / (i + 1)
            progress.update(task, completed=i + 1, loss=mean_loss, acc=mean_acc)
    mean_loss, mean_acc = totals / steps
    return state, float(mean_loss), float(mean_acc)


def main(argv=None) -> float:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    args = parse_args(argv)
    console = Console(soft_wrap=True)  # keep long paths on one line
    start = time.perf_counter()
    # Single-file msgpack checkpoints: the same format whether or not orbax is installed.
    config.update("flax_use_orbax_checkpointing", False)
    ckpt_dir = os.path.join(os.path.abspath(args.workdir), "checkpoints")
    plot_path = os.path.join(os.path.abspath(args.workdir), "curves.png")

    (train_x, train_y), (test_x, test_y) = load_digits(seed=args.seed)
    steps_per_epoch = len(train_y) // args.batch_size
    raw = checkpoints.restore_checkpoint(ckpt_dir, target=None)
    segments, schedule_note = plan_schedule(raw, args, steps_per_epoch)
    state = create_state(jax.random.PRNGKey(args.seed), segments)
    state, history, done = restore(raw, state)
    console.print(
        f"digits: {len(train_y)} train / {len(test_y)} held-out images; "
        f"jax devices: {jax.devices()[0].platform} x{jax.device_count()}"
    )
    if done:
        console.print(f"Resumed from the checkpoint of epoch {done} in {ckpt_dir}")
    if schedule_note:
        console.print(schedule_note)
    if done >= args.epochs:
        console.print(f"The checkpoint already holds {done} epochs (--epochs {args.epochs}): "
                      "nothing to train. Pass a larger --epochs to train on.")

    columns = (TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.4f}  acc {task.fields[acc]:.3f}"),
               TimeElapsedColumn())
    progress = (Progress(*columns, console=console, transient=True) if console.is_terminal
                else _NoProgress(console))
    with progress:
        for epoch in range(done + 1, args.epochs + 1):
            task = progress.add_task("train", total=steps_per_epoch, epoch=epoch, loss=0.0, acc=0.0)
            perm = np.random.RandomState(args.seed * 1000 + epoch).permutation(len(train_y))
            state, train_loss, train_acc = train_epoch(
                state, train_x, train_y, perm, args.batch_size, steps_per_epoch, progress, task)
            progress.remove_task(task)
            test_loss, test_acc = eval_step(state, test_x, test_y)
            for key, value in zip(METRICS, (train_loss, train_acc, test_loss, test_acc)):
                history[key].append(float(value))
            save(ckpt_dir, state, history, epoch, segments)
            progress.console.print(
                "epoch {:3d}  train loss {:.4f} acc {:.4f}  held-out loss {:.4f} acc {:.4f}".format(
                    epoch, *(history[k][-1] for k in METRICS))
            )

    test_loss, test_acc = eval_step(state, test_x, test_y)
    plot(history, plot_path)
    console.print(f"Final held-out accuracy: {float(test_acc) * 100:.2f}% "
                  f"(loss {float(test_loss):.4f}) after {len(history['test_accuracy'])} epochs")
    console.print(f"Checkpoints: {ckpt_dir}")
    console.print(f"Plot: {plot_path}")
    console.print(f"Run time: {time.perf_counter() - start:.1f} s")
    return float(test_acc)


if __name__ == "__main__":
    main(sys.argv[1:])
