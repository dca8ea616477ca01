"""Linen Module system overhead: flaxen vs flax vs hand-written pure JAX.

Models (each written once against an ``nn`` namespace, so flaxen and flax run identical code):

* ``MLP-2`` / ``MLP-100``: Dense layers built in a compact loop, tiny widths so the Python
  overhead of the Module system dominates. The Dense layer is defined here with
  ``self.param`` so the numbers measure the Module machinery, not a layer implementation.
* ``ResNet-50``: the bottleneck ResNet of ``bench_resnet`` (``Conv``, ``BatchNorm``, ``Dense``;
  inference mode) on 2x32x32x3 images, width 16.
* ``Transformer-12``: 12 pre-LayerNorm encoder blocks (``LayerNorm``,
  ``MultiHeadDotProductAttention``, ``Dense``), d=32, 4 heads, sequence 16.

Cases for each model:

* traced init (``jax.eval_shape(model.init, key, x)``),
* eager ``apply``,
* jitted ``apply`` (steady state),

plus per-module construction, ``bind`` and ``clone`` cost (baseline: flax).

The pure-JAX versions ("jax") keep parameters in plain dicts and use the same initialisers with
the same keys as Linen (``fold_in`` of the root key with the hash of the scope path and the
per-scope counter, hashes precomputed), so they produce bit-identical parameters (checked once,
untimed). Their init also runs the forward pass, because ``Module.init`` traces it: the ratio
then measures the Module machinery, not the model. ``jax_initonly`` (MLPs only) is the older,
smaller baseline: parameters drawn with ``jax.random.split`` and no forward pass.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from benchmarks._harness import Result, compare, have_flax

_lecun = jax.nn.initializers.lecun_normal()
_zeros = jax.nn.initializers.zeros
_ones = jax.nn.initializers.ones


# --------------------------------------------------------------------------- RNG like Linen
@functools.cache
def _h32(path: tuple) -> int:
    """First 4 bytes of the SHA-1 of the path items: the value Linen folds into the key."""
    m = hashlib.sha1()
    for x in path:
        m.update(x.encode() if isinstance(x, str) else x.to_bytes((x.bit_length() + 7) // 8, "big"))
    return int.from_bytes(m.digest()[:4], "big")


def _key(root: Any, *path: Any) -> Any:
    """The key of ``make_rng('params')`` number ``path[-1]`` in the scope ``path[:-1]``."""
    return jax.random.fold_in(root, _h32(path))


def _check_same(name: str, a: Any, b: Any) -> None:
    """Untimed sanity check: the pure-JAX baseline computes what Linen computes."""
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb:
        raise AssertionError(f"{name}: pure-JAX variables differ in structure:\n{ta}\n{tb}")
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5,
                                   err_msg=name)


# --------------------------------------------------------------------------- MLP
def _make_mlp(nn: Any) -> tuple[type, type]:
    class Dense(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            kernel = self.param("kernel", _lecun, (x.shape[-1], self.features))
            bias = self.param("bias", _zeros, (self.features,))
            return x @ kernel + bias

    class MLP(nn.Module):
        depth: int
        width: int

        @nn.compact
        def __call__(self, x):
            for _ in range(self.depth - 1):
                x = jax.nn.relu(Dense(self.width)(x))
            return Dense(self.width)(x)

    return Dense, MLP


def _jax_mlp_apply(variables: dict, x: Any, depth: int) -> Any:
    params = variables["params"]
    for i in range(depth):
        p = params[f"Dense_{i}"]
        x = x @ p["kernel"] + p["bias"]
        if i < depth - 1:
            x = jax.nn.relu(x)
    return x


def _jax_mlp_init(key: Any, x: Any, depth: int, width: int) -> dict:
    params = {}
    fan_in = x.shape[-1]
    for i in range(depth):
        name = f"Dense_{i}"
        params[name] = {"kernel": _lecun(_key(key, name, 1), (fan_in, width)),
                        "bias": _zeros(_key(key, name, 2), (width,))}
        fan_in = width
    variables = {"params": params}
    _jax_mlp_apply(variables, x, depth)  # Module.init traces the forward pass too
    return variables


def _jax_mlp_init_only(key: Any, x: Any, depth: int, width: int) -> dict:
    params = {}
    fan_in = x.shape[-1]
    for i in range(depth):
        key, sub = jax.random.split(key)
        params[f"Dense_{i}"] = {"kernel": _lecun(sub, (fan_in, width)),
                                "bias": _zeros(sub, (width,))}
        fan_in = width
    return {"params": params}


# --------------------------------------------------------------------------- ResNet-50
def _make_resnet(nn: Any) -> type:
    from benchmarks.bench_resnet import _make_model

    return _make_model(nn)


def _resnet_stages() -> tuple:
    from benchmarks.bench_resnet import STAGES

    return STAGES


def _conv(x, k, strides=(1, 1), padding="SAME"):
    return lax.conv_general_dilated(x, k, strides, padding,
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _bn_eval(p, s, x, eps=1e-5):
    return (x - s["mean"]) * (lax.rsqrt(s["var"] + eps) * p["scale"]) + p["bias"]


def _jax_resnet_apply(variables: dict, x: Any) -> Any:
    params, stats = variables["params"], variables["batch_stats"]
    x = _conv(x, params["stem"]["kernel"], (2, 2), [(3, 3), (3, 3)])
    x = jax.nn.relu(_bn_eval(params["stem_bn"], stats["stem_bn"], x))
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    for i, blocks in enumerate(_resnet_stages()):
        for j in range(blocks):
            name = f"block{i}_{j}"
            p, s = params[name], stats[name]
            st = (2, 2) if i > 0 and j == 0 else (1, 1)
            y = jax.nn.relu(_bn_eval(p["bn1"], s["bn1"], _conv(x, p["conv1"]["kernel"])))
            y = jax.nn.relu(_bn_eval(p["bn2"], s["bn2"], _conv(y, p["conv2"]["kernel"], st)))
            y = _bn_eval(p["bn3"], s["bn3"], _conv(y, p["conv3"]["kernel"]))
            if "proj" in p:
                x = _bn_eval(p["proj_bn"], s["proj_bn"], _conv(x, p["proj"]["kernel"], st))
            x = jax.nn.relu(x + y)
    x = jnp.mean(x, axis=(1, 2))
    return x @ params["head"]["kernel"] + params["head"]["bias"]


def _jax_resnet_init(key: Any, x: Any, width: int, classes: int = 10) -> dict:
    params: dict = {}
    stats: dict = {}

    def conv(path, cin, cout, k):
        return {"kernel": _lecun(_key(key, *path, 1), (k, k, cin, cout))}

    def bn(path, c, zero=False):
        scale = (_zeros if zero else _ones)(_key(key, *path, 1), (c,))
        return ({"scale": scale, "bias": _zeros(_key(key, *path, 2), (c,))},
                {"mean": jnp.zeros((c,)), "var": jnp.ones((c,))})

    params["stem"] = conv(("stem",), x.shape[-1], width, 7)
    params["stem_bn"], stats["stem_bn"] = bn(("stem_bn",), width)
    cin = width
    for i, blocks in enumerate(_resnet_stages()):
        f = width * 2**i
        for j in range(blocks):
            name = f"block{i}_{j}"
            p, s = {}, {}
            p["conv1"] = conv((name, "conv1"), cin, f, 1)
            p["bn1"], s["bn1"] = bn((name, "bn1"), f)
            p["conv2"] = conv((name, "conv2"), f, f, 3)
            p["bn2"], s["bn2"] = bn((name, "bn2"), f)
            p["conv3"] = conv((name, "conv3"), f, 4 * f, 1)
            p["bn3"], s["bn3"] = bn((name, "bn3"), 4 * f, zero=True)
            if cin != 4 * f or (i > 0 and j == 0):
                p["proj"] = conv((name, "proj"), cin, 4 * f, 1)
                p["proj_bn"], s["proj_bn"] = bn((name, "proj_bn"), 4 * f)
            params[name], stats[name] = p, s
            cin = 4 * f
    params["head"] = {"kernel": _lecun(_key(key, "head", 1), (cin, classes)),
                      "bias": _zeros(_key(key, "head", 2), (classes,))}
    variables = {"params": params, "batch_stats": stats}
    _jax_resnet_apply(variables, x)
    return variables


# --------------------------------------------------------------------------- Transformer
_D, _HEADS, _MLP, _LAYERS = 32, 4, 64, 12


def _make_transformer(nn: Any) -> type:
    class EncoderBlock(nn.Module):
        @nn.compact
        def __call__(self, x):
            y = nn.LayerNorm(name="ln1")(x)
            y = nn.MultiHeadDotProductAttention(num_heads=_HEADS, qkv_features=_D,
                                                name="attn")(y)
            x = x + y
            y = nn.LayerNorm(name="ln2")(x)
            y = nn.Dense(_MLP, name="mlp_in")(y)
            y = nn.Dense(_D, name="mlp_out")(nn.gelu(y))
            return x + y

    class Encoder(nn.Module):
        layers: int = _LAYERS

        @nn.compact
        def __call__(self, x):
            for i in range(self.layers):
                x = EncoderBlock(name=f"block_{i}")(x)
            return nn.LayerNorm(name="ln_out")(x)

    return Encoder


def _layer_norm(p, x, eps=1e-6):
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.maximum(0.0, jnp.mean(x * x, -1, keepdims=True) - mean * mean)
    return (x - mean) * (lax.rsqrt(var + eps) * p["scale"]) + p["bias"]


def _attention(p, x):
    q = jnp.einsum("bsd,dhk->bshk", x, p["query"]["kernel"]) + p["query"]["bias"]
    k = jnp.einsum("bsd,dhk->bshk", x, p["key"]["kernel"]) + p["key"]["bias"]
    v = jnp.einsum("bsd,dhk->bshk", x, p["value"]["kernel"]) + p["value"]["bias"]
    q = q / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k), axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v)
    return jnp.einsum("bshk,hkd->bsd", o, p["out"]["kernel"]) + p["out"]["bias"]


def _jax_transformer_apply(variables: dict, x: Any) -> Any:
    params = variables["params"]
    for i in range(_LAYERS):
        p = params[f"block_{i}"]
        x = x + _attention(p["attn"], _layer_norm(p["ln1"], x))
        y = _layer_norm(p["ln2"], x)
        y = jax.nn.gelu(y @ p["mlp_in"]["kernel"] + p["mlp_in"]["bias"])
        x = x + (y @ p["mlp_out"]["kernel"] + p["mlp_out"]["bias"])
    return _layer_norm(params["ln_out"], x)


def _jax_transformer_init(key: Any, x: Any) -> dict:
    head = _D // _HEADS

    def ln(path):
        return {"scale": _ones(_key(key, *path, 1), (_D,)),
                "bias": _zeros(_key(key, *path, 2), (_D,))}

    def dense(path, fin, fout, shape=None, bias_shape=None):
        kernel = _lecun(_key(key, *path, 1), (fin, fout))  # DenseGeneral: flat, then reshape
        return {"kernel": kernel.reshape(shape or (fin, fout)),
                "bias": _zeros(_key(key, *path, 2), bias_shape or (fout,))}

    params: dict = {}
    for i in range(_LAYERS):
        b = f"block_{i}"
        attn = {n: dense((b, "attn", n), _D, _D, (_D, _HEADS, head), (_HEADS, head))
                for n in ("query", "key", "value")}
        attn["out"] = dense((b, "attn", "out"), _D, _D, (_HEADS, head, _D))
        params[b] = {"ln1": ln((b, "ln1")), "attn": attn, "ln2": ln((b, "ln2")),
                     "mlp_in": dense((b, "mlp_in"), _D, _MLP),
                     "mlp_out": dense((b, "mlp_out"), _MLP, _D)}
    params["ln_out"] = ln(("ln_out",))
    variables = {"params": params}
    _jax_transformer_apply(variables, x)
    return variables


# --------------------------------------------------------------------------- cases
def _frameworks() -> dict[str, Any]:
    import flaxen.linen as fnn

    out = {"flaxen": fnn}
    if have_flax():
        import flax.linen as nn

        out["flax"] = nn
    return out


def _model_cases(label: str, models: dict, x: Any, jax_init: Any, jax_apply: Any,
                 rounds: int, extra_init: dict | None = None) -> list[Result]:
    """Traced init, eager apply and jit apply of ``models`` (by framework) and pure JAX."""
    key = jax.random.PRNGKey(0)
    variables = {name: m.init(key, x) for name, m in models.items()}
    jax_vars = jax_init(key, x)
    _check_same(f"{label} init", variables["flaxen"], jax_vars)
    _check_same(f"{label} apply", models["flaxen"].apply(variables["flaxen"], x),
                jax_apply(jax_vars, x))

    results = []
    impls = {name: (lambda m=m: jax.eval_shape(m.init, key, x)) for name, m in models.items()}
    # a fresh function each call, so eval_shape traces it again (as it does for model.init)
    impls["jax"] = lambda: jax.eval_shape(lambda k, v: jax_init(k, v), key, x)
    for name, fn in (extra_init or {}).items():
        impls[name] = lambda fn=fn: jax.eval_shape(lambda k, v: fn(k, v), key, x)
    results.append(compare("linen", f"{label} init traced", impls, rounds=rounds))

    impls = {name: (lambda m=m, v=variables[name]: m.apply(v, x)) for name, m in models.items()}
    impls["jax"] = lambda: jax_apply(jax_vars, x)
    results.append(compare("linen", f"{label} eager apply", impls, rounds=rounds))

    jitted = {name: jax.jit(m.apply) for name, m in models.items()}
    impls = {name: (lambda f=f, v=variables[name]: f(v, x)) for name, f in jitted.items()}
    jax_jit = jax.jit(jax_apply)
    impls["jax"] = lambda: jax_jit(jax_vars, x)
    # steady-state calls are short and noisy on a shared machine: more rounds
    results.append(compare("linen", f"{label} jit apply", impls, rounds=3 * rounds))
    return results


def run(quick: bool) -> list[Result]:
    results = []
    width = 8
    key = jax.random.PRNGKey(0)
    x = jnp.ones((2, width))
    rounds = 5 if quick else 7
    frameworks = _frameworks()
    mlp_models = {name: _make_mlp(nn) for name, nn in frameworks.items()}
    for depth in (2, 100):
        mlps = {name: m[1](depth=depth, width=width) for name, m in mlp_models.items()}
        results += _model_cases(
            f"MLP-{depth}", mlps, x,
            lambda k, v, d=depth: _jax_mlp_init(k, v, d, width),
            lambda vs, v, d=depth: _jax_mlp_apply(vs, v, d), rounds,
            extra_init={"jax_initonly": lambda k, v, d=depth: _jax_mlp_init_only(k, v, d, width)})

    res_width = 16
    img = jax.random.normal(jax.random.PRNGKey(1), (2, 32, 32, 3))
    resnets = {name: _make_resnet(nn)(res_width) for name, nn in frameworks.items()}
    # inference mode (train=False) is the Linen default here: pass it through apply/init
    resnets = {name: _TrainFalse(m) for name, m in resnets.items()}
    results += _model_cases(
        f"ResNet-50 (2x32x32, width {res_width})", resnets, img,
        lambda k, v: _jax_resnet_init(k, v, res_width), _jax_resnet_apply, rounds)

    seq = jax.random.normal(jax.random.PRNGKey(2), (2, 16, _D))
    encoders = {name: _make_transformer(nn)() for name, nn in frameworks.items()}
    results += _model_cases(
        f"Transformer-{_LAYERS} (d={_D}, seq 16)", encoders, seq,
        _jax_transformer_init, _jax_transformer_apply, rounds)

    small = {name: m[1](depth=2, width=width) for name, m in mlp_models.items()}
    small_vars = {name: mlp.init(key, x) for name, mlp in small.items()}
    impls = {name: (lambda d=m[0]: d(4)) for name, m in mlp_models.items()}
    results.append(compare("linen", "construct Dense (per module)", impls, rounds=rounds,
                           baseline="flax"))
    impls = {name: (lambda m=mlp, v=small_vars[name]: m.bind(v)) for name, mlp in small.items()}
    results.append(compare("linen", "bind MLP-2", impls, rounds=rounds, baseline="flax"))
    impls = {name: (lambda m=mlp: m.clone()) for name, mlp in small.items()}
    results.append(compare("linen", "clone MLP-2", impls, rounds=rounds, baseline="flax"))
    return results


class _TrainFalse:
    """``model.init`` / ``model.apply`` with ``train=False`` bound, as plain methods."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def init(self, key: Any, x: Any) -> Any:
        return self.model.init(key, x, train=False)

    def apply(self, variables: Any, x: Any) -> Any:
        return self.model.apply(variables, x, train=False)

