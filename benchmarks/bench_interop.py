"""torch state dict -> flaxen tree: ``interop.torch.convert`` vs copying the tensors to numpy.

The state dict mimics a 100M-parameter model (10M with ``quick``): a stack of blocks, each
with four Linear layers (the ones convert must transpose), a LayerNorm, a Conv2d and a
BatchNorm2d, in float32. The target is abstract (``jax.ShapeDtypeStruct`` leaves), the way a
user who has not initialised the flaxen model passes it.

The baseline ("numpy") is the issue's yardstick: one ``tensor.numpy().copy()`` per tensor,
no transposes, no device placement. The issue's limits: convert at most 1.5x that time, and
peak memory at most 2x the weights (the torch weights themselves plus the converted copy).
"floor_torch" and "floor_xla" are the least any correct conversion must do: the same
copies, but with Linear and Conv weights transposed on the way, by torch's blocked copy or by
XLA's transpose (read in place, spread over the cores); ``flaxen/fastest floor`` is then what
the matching, checking and placement add on top of the unavoidable work.

Memory is the process's peak resident set (``VmHWM``, reset through ``/proc/self/
clear_refs`` before each step), since torch and XLA buffers are invisible to tracemalloc;
the note reports the peak *extra* memory during a step as a multiple of the weights, and the
total (torch weights + extra) the same way.
"""

from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from benchmarks._harness import Result, compare


def _state_dict(n_params: int):
    import torch

    d = 1024
    linears = [(d, d), (d, d), (d, d // 2), (d // 2, 2 * d)]
    per_block = sum(i * o + o for i, o in linears) + 2 * d + 64 * 64 * 9 + 64 + 4 * 64
    blocks = max(1, round(n_params / per_block))
    sd = {}
    target: dict = {"params": {}, "batch_stats": {}}
    sds = _sds
    g = torch.Generator().manual_seed(0)
    for b in range(blocks):
        p = target["params"][f"Block_{b}"] = {}
        s = target["batch_stats"][f"Block_{b}"] = {}
        for i, (fin, fout) in enumerate(linears):
            sd[f"blocks.{b}.fc{i}.weight"] = torch.randn(fout, fin, generator=g)
            sd[f"blocks.{b}.fc{i}.bias"] = torch.randn(fout, generator=g)
            p[f"Dense_{i}"] = {"kernel": sds((fin, fout)), "bias": sds((fout,))}
        sd[f"blocks.{b}.norm.weight"] = torch.randn(d, generator=g)
        sd[f"blocks.{b}.norm.bias"] = torch.randn(d, generator=g)
        p["LayerNorm_0"] = {"scale": sds((d,)), "bias": sds((d,))}
        sd[f"blocks.{b}.conv.weight"] = torch.randn(64, 64, 3, 3, generator=g)
        sd[f"blocks.{b}.conv.bias"] = torch.randn(64, generator=g)
        p["Conv_0"] = {"kernel": sds((3, 3, 64, 64)), "bias": sds((64,))}
        for name in ("weight", "bias", "running_mean", "running_var"):
            sd[f"blocks.{b}.bn.{name}"] = torch.rand(64, generator=g)
        sd[f"blocks.{b}.bn.num_batches_tracked"] = torch.tensor(0)
        p["BatchNorm_0"] = {"scale": sds((64,)), "bias": sds((64,))}
        s["BatchNorm_0"] = {"mean": sds((64,)), "var": sds((64,))}
    n = sum(t.numel() for k, t in sd.items() if not k.endswith("num_batches_tracked"))
    return sd, target, n


def _sds(shape):
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _copy_to_numpy(sd):
    return {k: v.numpy().copy() for k, v in sd.items()}


def _layout_floor(sd):
    """The least a correct conversion must do: copy each tensor, transposing Linear weights
    (torch's blocked transpose, the fastest one here), with no matching or device placement."""
    out = {}
    for k, v in sd.items():
        if v.ndim == 2:
            out[k] = v.t().contiguous().numpy()
        elif v.ndim == 4:
            out[k] = v.permute(2, 3, 1, 0).contiguous().numpy()
        else:
            out[k] = v.numpy().copy()
    return out


def _layout_floor_xla(sd):
    """The same least work with XLA's transposes (tiled, spread over the cores; the fastest
    kernel on these machines): each permuted tensor read in place, the rest copied."""
    import jax
    import jax.numpy as jnp

    out = {}
    for k, v in sd.items():
        if v.ndim == 2:
            out[k] = jnp.transpose(jax.device_put(v.numpy()))
        elif v.ndim == 4:
            out[k] = jnp.transpose(jax.device_put(v.numpy()), (2, 3, 1, 0))
        else:
            out[k] = v.numpy().copy()
    return jax.block_until_ready(out)


def _rss_peak(fn) -> float:
    """Peak extra resident bytes while ``fn`` runs, in this (fresh) process."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return float("nan")
    before = _status("VmRSS")
    out = fn()
    peak = _status("VmHWM")
    del out
    return peak - before


def _child(what: str, n_params: int) -> None:
    """Run in a fresh process: prints the peak extra memory of one step, in bytes."""
    import jax

    from flaxen.interop import torch as fxt

    sd, target, _ = _state_dict(n_params)
    jax.block_until_ready(jax.device_put(np.zeros(8)))  # start the runtime outside the peak
    if os.environ.get("FLAXEN_BENCH_COLD_COMPILER") != "1":
        # and XLA's compiler (~40 MB, once per process: any program that has initialised or
        # trained a model has paid it); FLAXEN_BENCH_COLD_COMPILER=1 counts it as well
        jax.block_until_ready(jax.jit(lambda a: a + 1)(np.zeros(8)))
    if what == "convert":
        fn = lambda: jax.block_until_ready(fxt.convert(sd, target))  # noqa: E731
    else:
        fn = lambda: _copy_to_numpy(sd)  # noqa: E731
    print(json.dumps({"extra": _rss_peak(fn)}))


def _peak_in_subprocess(what: str, n_params: int) -> float:
    """Each measurement in its own process: freed memory kept by malloc would hide peaks."""
    root = pathlib.Path(__file__).resolve().parent.parent
    code = f"import benchmarks.bench_interop as b; b._child({what!r}, {n_params})"
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["extra"]


def _status(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1]) * 1024
    return float("nan")


def run(quick: bool) -> list[Result]:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench_interop: torch is not installed (pip install 'flaxen[interop]'); skipped")
        return []
    import jax

    from flaxen.interop import torch as fxt

    size = 10_000_000 if quick else 100_000_000
    sd, target, n = _state_dict(size)
    nbytes = 4 * n

    def convert():
        out = fxt.convert(sd, target)
        jax.block_until_ready(out)
        return out

    check = convert()  # warm-up, and a correctness spot check
    np.testing.assert_array_equal(np.asarray(check["params"]["Block_0"]["Dense_0"]["kernel"]),
                                  sd["blocks.0.fc0.weight"].numpy().T)
    del check
    extra_convert = _peak_in_subprocess("convert", size)
    extra_copy = _peak_in_subprocess("numpy", size)
    note = (f"{n / 1e6:.0f}M params; peak extra memory / weights: convert "
            f"{extra_convert / nbytes:.2f}x (total with the torch weights "
            f"{1 + extra_convert / nbytes:.2f}x), numpy copy {extra_copy / nbytes:.2f}x")
    result = compare("interop", f"torch state dict -> flaxen ({n / 1e6:.0f}M params)", {
        "flaxen": convert,
        "floor_torch": lambda: _layout_floor(sd),
        "floor_xla": lambda: _layout_floor_xla(sd),
        "numpy": lambda: _copy_to_numpy(sd),
    }, rounds=3, number=1, baseline="numpy", note=note, warmup=1)
    floor = min(result.medians["floor_torch"], result.medians["floor_xla"])
    result.note = f"flaxen/fastest floor={result.medians['flaxen'] / floor:.2f}; " + result.note
    return [result]
