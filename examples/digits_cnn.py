"""Train a small Linen CNN on scikit-learn's handwritten digits (the `make demo` job).

The data set ships inside scikit-learn (1,797 8x8 grey-scale digits, no download). The script
follows the Flax Quickstart: a Linen module, a ``TrainState`` with an Optax optimizer, a jitted
train step, evaluation on a held-out split after every epoch, a checkpoint after every epoch
(running the script again resumes from the last one), and a PNG plot of the loss and accuracy
curves.

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


def create_state(rng, learning_rate: float, total_steps: int) -> train_state.TrainState:
    model = CNN()
    params = model.init(rng, jnp.ones((1, 8, 8, 1)))["params"]
    # Adam with the rate decaying to 0 along a half cosine over the whole run.
    tx = optax.adam(optax.cosine_decay_schedule(learning_rate, total_steps))
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


def save(ckpt_dir: str, state, history: dict, epoch: int) -> str:
    payload = {"state": state, "history": {k: np.asarray(v) for k, v in history.items()}}
    return checkpoints.save_checkpoint(ckpt_dir, payload, step=epoch, keep=2)


def restore(ckpt_dir: str, state):
    """Returns ``(state, history, epochs_done)`` from the latest checkpoint, if any."""
    raw = checkpoints.restore_checkpoint(ckpt_dir, target=None)
    if raw is None:
        return state, {k: [] for k in METRICS}, 0
    state = serialization.from_state_dict(state, raw["state"])
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
    rng = jax.random.PRNGKey(args.seed)
    state = create_state(rng, args.learning_rate, args.epochs * steps_per_epoch)
    state, history, done = restore(ckpt_dir, state)
    console.print(
        f"digits: {len(train_y)} train / {len(test_y)} held-out images; "
        f"jax devices: {jax.devices()[0].platform} x{jax.device_count()}"
    )
    if done:
        console.print(f"Resumed from the checkpoint of epoch {done} in {ckpt_dir}")

    columns = (TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.4f}  acc {task.fields[acc]:.3f}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for epoch in range(done + 1, args.epochs + 1):
            task = progress.add_task("train", total=steps_per_epoch, epoch=epoch, loss=0.0, acc=0.0)
            perm = np.random.RandomState(args.seed * 1000 + epoch).permutation(len(train_y))
            losses, accs = [], []
            for i in range(steps_per_epoch):
                idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
                state, loss, acc = train_step(state, train_x[idx], train_y[idx])
                losses.append(loss)
                accs.append(acc)
                if i % 8 == 0 or i == steps_per_epoch - 1:  # reading a value waits for it
                    progress.update(task, completed=i + 1, loss=float(loss), acc=float(acc))
            test_loss, test_acc = eval_step(state, test_x, test_y)
            for key, value in zip(METRICS, (np.mean(losses), np.mean(accs), test_loss, test_acc)):
                history[key].append(float(value))
            save(ckpt_dir, state, history, epoch)
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
