"""Attention: MultiHeadDotProductAttention forward+backward, flaxen vs flax vs pure JAX.

One causal self-attention layer (batch 2, 8 heads of 32, features 256) at sequence length
2,048 (``--quick``: 512), jitted ``value_and_grad`` of a scalar loss with respect to the
parameters and the inputs. Besides time (target: flaxen at least as fast as flax), the
note gives each implementation's compiled memory as a ratio to flax's: temporary memory
(``memory_analysis().temp_size_in_bytes``) and peak memory, taken as arguments + outputs +
temporaries - aliased buffers (the CPU backend's ``peak_memory_in_bytes`` leaves the
temporaries out, so it is not used). The target is at most 0.5 for flaxen.

On CPU flaxen's ``dot_product_attention`` takes its blockwise path here (q_len * kv_len is
past its threshold); ``jax.nn.dot_product_attention`` with its default XLA implementation
keeps the whole weight matrix for the gradient (about 1.3x flax's temporary memory at this
size), so the fused function is used only for shorter sequences.

The pure-JAX version is the textbook computation (four projections, one softmax over the
full ``[heads, q, kv]`` matrix), i.e. what a hand-written layer does without extra work.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from benchmarks._harness import Result, compare, have_flax

_BATCH, _HEADS, _FEATURES = 2, 8, 256


def _pure_jax_loss(params: dict, x: jax.Array, mask: jax.Array) -> jax.Array:
    p = params["params"]
    q = jnp.einsum("bld,dhk->blhk", x, p["query"]["kernel"]) + p["query"]["bias"]
    k = jnp.einsum("bld,dhk->blhk", x, p["key"]["kernel"]) + p["key"]["bias"]
    v = jnp.einsum("bld,dhk->blhk", x, p["value"]["kernel"]) + p["value"]["bias"]
    q = q / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits)
    y = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
    out = jnp.einsum("blhk,hkd->bld", y, p["out"]["kernel"]) + p["out"]["bias"]
    return jnp.mean(out**2)


def _module_loss(nn: Any):
    layer = nn.MultiHeadDotProductAttention(num_heads=_HEADS)

    def loss(params: dict, x: jax.Array, mask: jax.Array) -> jax.Array:
        return jnp.mean(layer.apply(params, x, mask=mask) ** 2)

    return layer, loss


def run(quick: bool) -> list[Result]:
    import flaxen.linen as fnn

    length = 512 if quick else 2048
    x = jax.random.normal(jax.random.PRNGKey(1), (_BATCH, length, _FEATURES))
    mask = fnn.make_causal_mask(jnp.ones((_BATCH, length)))
    layer, flaxen_loss = _module_loss(fnn)
    params = layer.init(jax.random.PRNGKey(0), x[:, :8], mask=mask[..., :8, :8])

    losses = {"flaxen": flaxen_loss, "jax": _pure_jax_loss}
    if have_flax():
        import flax.linen as nn

        losses["flax"] = _module_loss(nn)[1]

    impls, temp, peak = {}, {}, {}
    for name, loss in losses.items():
        step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        compiled = step.lower(params, x, mask).compile()
        stats = compiled.memory_analysis()
        temp[name] = stats.temp_size_in_bytes
        peak[name] = (stats.argument_size_in_bytes + stats.output_size_in_bytes
                      + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
        impls[name] = (lambda c: lambda: c(params, x, mask))(compiled)

    ref_name = "flax" if "flax" in temp else "jax"
    note = "; ".join(
        f"{what} memory vs {ref_name}: " + ", ".join(
            f"{k}={v / sizes[ref_name]:.2f}x" for k, v in sizes.items())
        for what, sizes in (("temp", temp), ("peak", peak)))
    rounds = 3 if quick else 5
    return [compare("attention", f"MHDPA fwd+bwd causal L={length}", impls, rounds=rounds,
                    number=1, note=note)]
