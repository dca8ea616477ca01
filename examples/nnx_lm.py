"""A small decoder-only transformer language model in today's NNX API, trained on Python itself.

The training text is the source code of Python's standard library (the ``.py`` files next to
the ``os`` module), which ships with every Python install: nothing is downloaded. The model
reads bytes (a vocabulary of 256), so it needs no tokenizer and no vocabulary file.

    python examples/nnx_lm.py                  # 600 steps: a falling loss, then sampled text
    python examples/nnx_lm.py --steps 1200     # run it again: it resumes from its checkpoint
    python examples/nnx_lm.py --help           # sizes, steps, checkpoint interval, sampling

It shows a progress bar with the training loss, evaluates on held-out text every
``--eval-every`` steps, writes a checkpoint every ``--ckpt-every`` steps (running it again
resumes from the latest one, losses included), saves a plot of the losses, and ends by
printing text sampled from the model. Everything it writes goes under ``--workdir``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from flaxen import config, nnx
from flaxen.training import checkpoints

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 256  # bytes


@dataclasses.dataclass(frozen=True)
class Size:
    """The model's shape: width, depth, heads and the longest context it reads."""

    d_model: int = 96
    layers: int = 3
    heads: int = 4
    context: int = 64


class Block(nnx.Module):
    """One pre-norm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, size: Size, *, rngs: nnx.Rngs):
        d = size.d_model
        self.attn_norm = nnx.LayerNorm(d, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads=size.heads, in_features=d, decode=False, rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, 4 * d, rngs=rngs)
        self.down = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = x + self.attn(self.attn_norm(x), mask=mask)
        return x + self.down(nnx.gelu(self.up(self.mlp_norm(x))))


class LanguageModel(nnx.Module):
    """Bytes in, next-byte logits out; the output layer reuses the input embedding."""

    def __init__(self, size: Size, *, rngs: nnx.Rngs):
        self.size = size
        self.embed = nnx.Embed(VOCAB, size.d_model, rngs=rngs)
        init = nnx.initializers.normal(0.02)
        self.position = nnx.Param(init(rngs.params(), (size.context, size.d_model)))
        self.blocks = nnx.List([Block(size, rngs=rngs) for _ in range(size.layers)])
        self.final_norm = nnx.LayerNorm(size.d_model, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        length = tokens.shape[-1]
        x = self.embed(tokens) + self.position[:length]
        mask = nnx.make_causal_mask(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.embed.attend(self.final_norm(x))


def load_corpus(max_bytes: int) -> np.ndarray:
    """The standard library's top-level ``.py`` files, in name order, as a byte array."""
    stdlib = os.path.dirname(os.__file__)
    chunks, total = [], 0
    for name in sorted(os.listdir(stdlib)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(stdlib, name), "rb") as f:
            data = f.read()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    text = b"\n".join(chunks)[:max_bytes]
    return np.frombuffer(text, dtype=np.uint8)


def batch_at(data: np.ndarray, step: int, batch: int, length: int, seed: int,
             stream: int = 0) -> np.ndarray:
    """Windows of ``length + 1`` bytes at random offsets; the same ``step`` gives the same batch,
    so a resumed run sees what an uninterrupted one would have."""
    rng = np.random.default_rng([stream, seed, step])
    starts = rng.integers(0, len(data) - length - 1, size=batch)
    return np.stack([data[s:s + length + 1] for s in starts]).astype(np.int32)


def loss_fn(model: LanguageModel, batch: jax.Array) -> jax.Array:
    logits = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


@nnx.jit
def train_step(model: LanguageModel, optimizer: nnx.Optimizer, batch: jax.Array) -> jax.Array:
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def eval_loss(model: LanguageModel, batch: jax.Array) -> jax.Array:
    return loss_fn(model, batch)


@nnx.jit
def next_logits(model: LanguageModel, window: jax.Array, position: jax.Array) -> jax.Array:
    # A fixed-size window compiles once; the causal mask keeps the padding after
    # ``position`` from influencing the logits read there.
    return model(window[None])[0, position]


def sample(model: LanguageModel, prompt: str, length: int, temperature: float,
           key: jax.Array) -> str:
    """Continues ``prompt`` by ``length`` bytes drawn one at a time from the model."""
    context = model.size.context
    tokens = list(prompt.encode("utf-8")) or [ord("\n")]
    for _ in range(length):
        recent = tokens[-context:]
        window = np.zeros(context, np.int32)
        window[:len(recent)] = recent
        logits = next_logits(model, jnp.asarray(window), jnp.asarray(len(recent) - 1))
        key, sub = jax.random.split(key)
        tokens.append(int(jax.random.categorical(sub, logits / max(temperature, 1e-4))))
    return bytes(tokens).decode("utf-8", errors="replace")


def checkpoint_payload(model: LanguageModel, optimizer: nnx.Optimizer, history: dict) -> dict:
    return {
        "model": nnx.to_pure_dict(nnx.state(model)),
        "optimizer": nnx.to_pure_dict(nnx.state(optimizer)),
        "history": {k: np.asarray(v, np.float32).reshape(-1, 2) for k, v in history.items()},
    }


def restore(ckpt_dir: str, model: LanguageModel, optimizer: nnx.Optimizer) -> tuple[dict, int]:
    """Loads the latest checkpoint into ``model`` and ``optimizer``; returns (history, step)."""
    empty: dict = {"train": [], "eval": []}
    latest = checkpoints.latest_checkpoint(ckpt_dir)
    if latest is None:
        return empty, 0
    raw = checkpoints.restore_checkpoint(latest, target=None)
    for obj, key in ((model, "model"), (optimizer, "optimizer")):
        state = nnx.state(obj)
        # strict: resuming with other size flags than the checkpoint's fails here, listing
        # every differing array, instead of training a model of mixed shapes.
        nnx.replace_by_pure_dict(state, raw[key], strict=True)
        nnx.update(obj, state)
    history = {k: [tuple(map(float, row)) for row in np.asarray(raw["history"][k]).reshape(-1, 2)]
               for k in empty}
    return history, int(optimizer.step.value)


def plot(history: dict, path: str) -> None:
    """Training loss (each logged step) and held-out loss against the step, in bits per byte."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, style in (("train", "training batch", "-"), ("eval", "held-out", "o-")):
        if history[key]:
            steps, losses = zip(*history[key])
            ax.plot(steps, np.asarray(losses) / np.log(2), style, label=label)
    ax.set(title="Byte-level language model on Python's standard library", xlabel="step",
           ylabel="loss (bits per byte)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    size = parser.add_argument_group("model size")
    size.add_argument("--d-model", type=int, default=Size.d_model, help="embedding width")
    size.add_argument("--layers", type=int, default=Size.layers, help="transformer blocks")
    size.add_argument("--heads", type=int, default=Size.heads, help="attention heads")
    size.add_argument("--context", type=int, default=Size.context,
                      help="bytes the model reads at once")
    train = parser.add_argument_group("training")
    train.add_argument("--steps", type=int, default=600,
                       help="total training steps (a resumed run continues up to this many)")
    train.add_argument("--batch-size", type=int, default=32, help="sequences per step")
    train.add_argument("--learning-rate", type=float, default=3e-3,
                       help="peak AdamW learning rate (warm-up, then cosine decay)")
    train.add_argument("--corpus-mb", type=float, default=2.0,
                       help="megabytes of standard-library source to train on")
    train.add_argument("--seed", type=int, default=0, help="seed of the weights and batches")
    out = parser.add_argument_group("progress, checkpoints and sampling")
    out.add_argument("--workdir", default=os.path.join(REPO_ROOT, "lm_out"),
                     help="where checkpoints and the loss plot go")
    out.add_argument("--ckpt-every", type=int, default=100, help="steps between checkpoints")
    out.add_argument("--eval-every", type=int, default=100,
                     help="steps between held-out evaluations")
    out.add_argument("--prompt", default="def ", help="text the sample starts from")
    out.add_argument("--sample-length", type=int, default=300, help="bytes to sample")
    out.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    out.add_argument("--no-progress", action="store_true",
                     help="print a line per evaluation instead of a progress bar")
    args = parser.parse_args(argv)
    positive = ("d_model", "layers", "heads", "context", "steps", "batch_size", "ckpt_every",
                "eval_every")
    bad = [f"--{name.replace('_', '-')}" for name in positive if getattr(args, name) < 1]
    if bad:
        parser.error(f"{', '.join(bad)} must be >= 1")
    if args.d_model % args.heads:
        parser.error(f"--d-model ({args.d_model}) must be a multiple of --heads ({args.heads})")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Trains (or resumes), plots, samples; returns the losses, the sample and the paths."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    args = parse_args(argv)
    console = Console(soft_wrap=True)
    start = time.perf_counter()
    workdir = os.path.abspath(args.workdir)
    ckpt_dir = os.path.join(workdir, "checkpoints")
    plot_path = os.path.join(workdir, "loss.png")
    os.makedirs(workdir, exist_ok=True)

    data = load_corpus(int(args.corpus_mb * 2**20))
    split = int(len(data) * 0.95)
    train_data, eval_data = data[:split], data[split:]
    size = Size(args.d_model, args.layers, args.heads, args.context)
    model = LanguageModel(size, rngs=nnx.Rngs(args.seed))
    warmup = max(1, min(100, args.steps // 10))
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.learning_rate, warmup, args.steps)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    params = sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
    console.print(f"corpus: {len(data):,} bytes of Python's standard library; model: "
                  f"{params:,} parameters ({size.layers} blocks, width {size.d_model}, "
                  f"{size.heads} heads, context {size.context})")

    history, done = restore(ckpt_dir, model, optimizer)
    if done:
        console.print(f"Resumed from the checkpoint of step {done} in {ckpt_dir}")

    def evaluate(step: int) -> float:
        batches = [batch_at(eval_data, i, args.batch_size, size.context, args.seed,
                            stream=1) for i in range(4)]
        loss = float(np.mean([eval_loss(model, jnp.asarray(b)) for b in batches]))
        history["eval"].append((step, loss))
        return loss

    # Single-file msgpack checkpoints: the same format whether or not orbax is installed.
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        columns = (TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn(),
                   TimeRemainingColumn())
        with Progress(*columns, console=console, disable=args.no_progress) as progress:
            task = progress.add_task("train", total=args.steps, completed=done, loss=float("nan"))
            for step in range(done + 1, args.steps + 1):
                batch = batch_at(train_data, step, args.batch_size, size.context, args.seed)
                loss = train_step(model, optimizer, jnp.asarray(batch))
                if step % 10 == 0 or step == args.steps:  # reading the loss waits for it
                    history["train"].append((step, float(loss)))
                    progress.update(task, completed=step, loss=float(loss))
                if step % args.eval_every == 0 or step == args.steps:
                    progress.console.print(f"step {step:5d}  held-out loss {evaluate(step):.3f}")
                if step % args.ckpt_every == 0 or step == args.steps:
                    checkpoints.save_checkpoint(
                        ckpt_dir, checkpoint_payload(model, optimizer, history), step=step,
                        keep=2)

    plot(history, plot_path)
    text = sample(model, args.prompt, args.sample_length, args.temperature,
                  jax.random.key(args.seed + 1))
    console.print("[bold]Sampled text:[/bold]")
    console.print(text, markup=False, highlight=False)
    console.print(f"Checkpoints: {ckpt_dir}")
    console.print(f"Plot: {plot_path}")
    console.print(f"Run time: {time.perf_counter() - start:.1f} s")
    return {"train": history["train"], "eval": history["eval"], "sample": text,
            "plot": plot_path, "checkpoints": ckpt_dir}


if __name__ == "__main__":
    main(sys.argv[1:])
