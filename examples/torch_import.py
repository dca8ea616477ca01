"""Import two PyTorch models into flaxen, check them layer by layer, and fine-tune them.

Both torch models are defined here (no downloads): a small CNN (Conv2d, BatchNorm2d,
AvgPool2d, a flatten and two Linear layers) and a small Transformer encoder (Embedding,
``nn.TransformerEncoderLayer`` with exact GELU and a key-padding mask, a Linear head). For
each, the script writes the flaxen twin, converts the torch weights in one call
(``flaxen.interop.torch.convert``), prints the layer-by-layer report of
``flaxen.interop.torch.verify``, and trains the flaxen model a few steps with Optax on
synthetic data.

The two classic pitfalls show up on purpose: the CNN's first Linear reads a flattened
activation (torch flattens C, H, W; flaxen H, W, C), fixed with the
``channels_first_flatten`` rule; the Transformer's mask is inverted (torch's True means
"padded", flaxen's means "attend").

    python examples/torch_import.py [--steps 5]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

import flaxen.linen as nn
from flaxen.interop import torch as fxt

KEY = jax.random.PRNGKey(0)


# --- the torch models --------------------------------------------------------------------


class TorchCNN(torch.nn.Module):
    def __init__(self, classes: int = 4):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc1 = torch.nn.Linear(16 * 2 * 2, 32)
        self.fc2 = torch.nn.Linear(32, classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class TorchEncoder(torch.nn.Module):
    def __init__(self, vocab: int = 20, d: int = 16, classes: int = 3):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layer = torch.nn.TransformerEncoderLayer(d, 2, dim_feedforward=32, dropout=0.0,
                                                      activation="gelu", batch_first=True)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, ids, pad):
        x = self.layer(self.embed(ids), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((x * keep).sum(1) / keep.sum(1))


# --- their flaxen twins ------------------------------------------------------------------


class CNN(nn.Module):
    classes: int = 4

    @nn.compact
    def __call__(self, x):
        for features in (8, 16):
            x = nn.Conv(features, (3, 3), padding=[(1, 1), (1, 1)])(x)
            x = nn.BatchNorm(use_running_average=True, epsilon=1e-5)(x)
            x = nn.avg_pool(nn.relu(x), (2, 2), strides=(2, 2))
        x = nn.relu(nn.Dense(32)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.classes)(x)


class Encoder(nn.Module):
    vocab: int = 20
    d: int = 16
    classes: int = 3

    @nn.compact
    def __call__(self, ids, keep):
        x = nn.Embed(self.vocab, self.d)(ids)
        mask = keep[:, None, None, :]  # True = attend
        x = nn.LayerNorm(epsilon=1e-5)(x + nn.MultiHeadDotProductAttention(num_heads=2)(
            x, mask=mask))
        h = nn.Dense(self.d)(nn.gelu(nn.Dense(32)(x), approximate=False))
        x = nn.LayerNorm(epsilon=1e-5)(x + h)
        w = keep[..., None].astype(x.dtype)
        return nn.Dense(self.classes)((x * w).sum(1) / w.sum(1))


# --- convert, verify, fine-tune ----------------------------------------------------------


def fine_tune(model, variables, inputs, labels, steps: int) -> list[float]:
    """A few Adam steps on the params (batch statistics stay frozen)."""
    params, rest = variables["params"], {k: v for k, v in variables.items() if k != "params"}
    tx = optax.adam(1e-2)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state):
        def loss_fn(p):
            logits = model.apply({"params": p, **rest}, *inputs)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for _ in range(steps):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    return losses


def import_cnn(steps: int) -> dict:
    torch.manual_seed(0)
    t = TorchCNN()
    rng = np.random.RandomState(0)
    images = rng.randn(8, 1, 8, 8).astype(np.float32)  # torch layout (N, C, H, W)
    rules = {"fc1.weight": fxt.channels_first_flatten(16)}
    target = jax.eval_shape(CNN().init, KEY, jnp.ones((1, 8, 8, 1)))
    variables = fxt.convert(t, target, rules=rules)
    report = fxt.verify(t, CNN(), variables, images, rules=rules)
    print(report)
    nhwc = jnp.asarray(np.moveaxis(images, 1, -1))
    losses = fine_tune(CNN(), variables, (nhwc,), jnp.asarray(rng.randint(0, 4, 8)), steps)
    print(f"CNN fine-tuning losses: {[round(x, 4) for x in losses]}")
    return {"ok": report.ok, "losses": losses}


def import_encoder(steps: int) -> dict:
    torch.manual_seed(1)
    t = TorchEncoder()
    rng = np.random.RandomState(1)
    ids = rng.randint(0, 20, size=(4, 6))
    pad = np.zeros((4, 6), bool)
    pad[1, 4:] = pad[3, 2:] = True  # torch: True = padding
    keep = ~pad  # flaxen: True = attend
    target = jax.eval_shape(Encoder().init, KEY, ids, keep)
    variables = fxt.convert(t, target)
    report = fxt.verify(t, Encoder(), variables, (torch.from_numpy(ids), torch.from_numpy(pad)),
                        flaxen_inputs=(ids, keep))
    print(report)
    losses = fine_tune(Encoder(), variables, (ids, keep), jnp.asarray(rng.randint(0, 3, 4)),
                       steps)
    print(f"Encoder fine-tuning losses: {[round(x, 4) for x in losses]}")
    return {"ok": report.ok, "losses": losses}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="fine-tuning steps (default 5)")
    args = parser.parse_args(argv)
    return {"cnn": import_cnn(args.steps), "encoder": import_encoder(args.steps)}


if __name__ == "__main__":
    main()
