"""ResNet-50 training step (forward + backward + batch-stat update), jitted.

The same bottleneck ResNet-50 is built from each library's own layers (``nn.Conv``,
``nn.BatchNorm``, ``nn.Dense``, ``nn.max_pool``, ``nn.avg_pool``), plus a hand-written pure
JAX version that reads the very same parameter tree. All three should compile to the same
program, so the ratio measures the layers' lowering, not Python overhead. ``quick`` uses
32x32 images and a quarter of the channel widths; the full run 64x64 and full widths.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from benchmarks._harness import Result, compare, have_flax

STAGES = (3, 4, 6, 3)  # ResNet-50


def _make_model(nn: Any) -> type:
    class Bottleneck(nn.Module):
        filters: int
        strides: int

        @nn.compact
        def __call__(self, x, train: bool):
            def bn(name, zero=False):
                return nn.BatchNorm(
                    use_running_average=not train, momentum=0.9, name=name,
                    scale_init=nn.initializers.zeros_init() if zero else nn.initializers.ones,
                )

            s = (self.strides, self.strides)
            y = nn.Conv(self.filters, (1, 1), use_bias=False, name="conv1")(x)
            y = nn.relu(bn("bn1")(y))
            y = nn.Conv(self.filters, (3, 3), s, use_bias=False, name="conv2")(y)
            y = nn.relu(bn("bn2")(y))
            y = nn.Conv(self.filters * 4, (1, 1), use_bias=False, name="conv3")(y)
            y = bn("bn3", zero=True)(y)
            if x.shape != y.shape:
                x = nn.Conv(self.filters * 4, (1, 1), s, use_bias=False, name="proj")(x)
                x = bn("proj_bn")(x)
            return nn.relu(x + y)

    class ResNet(nn.Module):
        width: int
        classes: int = 10

        @nn.compact
        def __call__(self, x, train: bool = True):
            x = nn.Conv(self.width, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], use_bias=False,
                        name="stem")(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9,
                                     name="stem_bn")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for i, blocks in enumerate(STAGES):
                for j in range(blocks):
                    strides = 2 if i > 0 and j == 0 else 1
                    x = Bottleneck(self.width * 2**i, strides, name=f"block{i}_{j}")(x, train)
            x = jnp.mean(x, axis=(1, 2))
            return nn.Dense(self.classes, name="head")(x)

    return ResNet


# ------------------------------------------------------------------ pure JAX, same params
def _conv(x, k, strides=(1, 1), padding="SAME"):
    return lax.conv_general_dilated(x, k, strides, padding,
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _bn(p, s, x, momentum=0.9, eps=1e-5):
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, (0, 1, 2))
    var = jnp.maximum(0.0, jnp.mean(x32 * x32, (0, 1, 2)) - mean * mean)
    y = (x32 - mean) * (lax.rsqrt(var + eps) * p["scale"]) + p["bias"]
    new = {"mean": momentum * s["mean"] + (1 - momentum) * mean,
           "var": momentum * s["var"] + (1 - momentum) * var}
    return y, new


def _jax_forward(params, stats, x):
    new_stats = {}
    x = _conv(x, params["stem"]["kernel"], (2, 2), [(3, 3), (3, 3)])
    x, new_stats["stem_bn"] = _bn(params["stem_bn"], stats["stem_bn"], x)
    x = jax.nn.relu(x)
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    for i, blocks in enumerate(STAGES):
        for j in range(blocks):
            name = f"block{i}_{j}"
            p, s, ns = params[name], stats[name], {}
            st = (2, 2) if i > 0 and j == 0 else (1, 1)
            y = _conv(x, p["conv1"]["kernel"])
            y, ns["bn1"] = _bn(p["bn1"], s["bn1"], y)
            y = _conv(jax.nn.relu(y), p["conv2"]["kernel"], st)
            y, ns["bn2"] = _bn(p["bn2"], s["bn2"], y)
            y = _conv(jax.nn.relu(y), p["conv3"]["kernel"])
            y, ns["bn3"] = _bn(p["bn3"], s["bn3"], y)
            if "proj" in p:
                x = _conv(x, p["proj"]["kernel"], st)
                x, ns["proj_bn"] = _bn(p["proj_bn"], s["proj_bn"], x)
            x = jax.nn.relu(x + y)
            new_stats[name] = ns
    x = jnp.mean(x, axis=(1, 2))
    return x @ params["head"]["kernel"] + params["head"]["bias"], new_stats


def _loss(logits, labels):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, axis=-1))


def run(quick: bool) -> list[Result]:
    import flaxen.linen as flaxen_nn

    size, width, batch = (32, 16, 4) if quick else (64, 64, 8)
    x = jax.random.normal(jax.random.key(1), (batch, size, size, 3), jnp.float32)
    labels = jax.nn.one_hot(jnp.arange(batch) % 10, 10)

    libs = {"flaxen": flaxen_nn}
    if have_flax():
        import flax.linen as flax_nn

        libs["flax"] = flax_nn

    impls: dict[str, Any] = {}
    variables = None
    for name, nn in libs.items():
        model = _make_model(nn)(width)
        v = model.init(jax.random.key(0), x, train=False)
        variables = v if variables is None else variables

        def step(v, x, model=model):
            def loss_fn(params):
                logits, upd = model.apply(dict(v, params=params), x, train=True,
                                          mutable=["batch_stats"])
                return _loss(logits, labels), upd

            (loss, upd), grads = jax.value_and_grad(loss_fn, has_aux=True)(v["params"])
            return loss, grads, upd

        jitted = jax.jit(step)
        impls[name] = lambda f=jitted, v=v: f(v, x)

    def jax_step(params, stats, x):
        def loss_fn(params):
            logits, new_stats = _jax_forward(params, stats, x)
            return _loss(logits, labels), new_stats

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return loss, grads, new_stats

    jax_jitted = jax.jit(jax_step)
    impls["jax"] = lambda: jax_jitted(variables["params"], variables["batch_stats"], x)

    rounds = 5 if quick else 7
    return [
        compare(
            "resnet",
            f"ResNet-50 train step {batch}x{size}x{size} width {width}",
            impls, rounds=rounds, min_time=0.2,
        )
    ]
