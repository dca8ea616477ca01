"""Layout rules: how one torch layer's tensors become one flaxen layer's arrays.

Each rule takes the torch unit's arrays (numpy, torch layout, by local name) and the target
unit, and returns ``{target relative name: array}`` plus the torch names it used. Results may
be views of the inputs (no copy is made here); shapes are not checked here: the caller
compares every produced array with the target's shape and reports all mismatches at once.

Layouts (torch -> flaxen):

- Linear ``weight (out, in)`` -> Dense ``kernel (in, out)``.
- ConvNd ``weight (out, in/groups, *k)`` -> Conv ``kernel (*k, in/groups, out)``;
  ConvTransposeNd ``weight (in, out, *k)`` -> ConvTranspose(transpose_kernel=True)
  ``kernel (*k, out, in)`` (the same axis permutation), or with ``transpose_kernel=False``
  ``kernel (*k, in, out)`` with the spatial axes flipped (only when the torch module is given
  and the shape tells the two apart).
- BatchNorm ``weight, bias, running_mean, running_var`` -> ``scale, bias`` (params) and
  ``mean, var`` (batch_stats); ``num_batches_tracked`` is dropped.
- LayerNorm / GroupNorm ``weight, bias`` -> ``scale, bias``.  Embedding ``weight`` ->
  ``embedding``.  PReLU ``weight (1,)`` -> ``negative_slope ()``.
- MultiheadAttention: the packed ``in_proj_weight (3E, E)`` is split into query/key/value
  ``kernel (E, heads, head_dim)``; ``out_proj.weight`` -> out ``kernel (heads, head_dim, E)``.
- LSTM gates ``i, f, g, o`` and GRU gates ``r, z, n`` are cut from the stacked
  ``weight_ih``/``weight_hh``; the two torch biases of a gate are added into the one flaxen
  bias where flaxen has one (GRU's ``n`` gate keeps both, as its math needs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from flaxen.interop._target import TargetUnit
from flaxen.interop._torch_units import TorchUnit, shape_of

Arrays = dict[str, np.ndarray]
Result = tuple[dict[str, np.ndarray], set[str], list[str]]


def _t(w: np.ndarray) -> np.ndarray:
    return w.T  # a view: the one copy happens when the result is placed on the device


def dense(src: TorchUnit, get: Callable[[str], np.ndarray], tgt: TargetUnit) -> Result:
    out, used = {}, set()
    if "weight" in src.leaves:
        out["kernel"] = _t(get("weight"))
        used.add("weight")
    if "bias" in src.leaves:
        out["bias"] = get("bias")
        used.add("bias")
    return out, used, []


def conv(src: TorchUnit, get: Callable[[str], np.ndarray], tgt: TargetUnit) -> Result:
    out, used = {}, set()
    if "weight" in src.leaves:
        w = get("weight")
        n = w.ndim - 2
        perm = tuple(range(2, 2 + n)) + (1, 0)
        kernel = np.transpose(w, perm)
        want = tgt.leaves["kernel"].shape if "kernel" in tgt.leaves else None
        transposed = (src.module_type or "").startswith("ConvTranspose")
        if transposed and want is not None and tuple(kernel.shape) != want:
            alt = np.transpose(w, tuple(range(2, 2 + n)) + (0, 1))
            if tuple(alt.shape) == want:  # ConvTranspose(transpose_kernel=False)
                kernel = np.flip(alt, axis=tuple(range(n)))
        out["kernel"] = kernel
        used.add("weight")
    if "bias" in src.leaves:
        out["bias"] = get("bias")
        used.add("bias")
    return out, used, []


def _rename(mapping: dict[str, str]):
    def rule(src: TorchUnit, get: Callable[[str], np.ndarray], tgt: TargetUnit) -> Result:
        out, used = {}, set()
        for t_name, f_name in mapping.items():
            if t_name in src.leaves:
                out[f_name] = get(t_name)
                used.add(t_name)
        return out, used, []

    return rule


norm = _rename({"weight": "scale", "bias": "bias"})
bn = _rename({"weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var"})
embed = _rename({"weight": "embedding"})


def prelu(src: TorchUnit, get: Callable[[str], np.ndarray], tgt: TargetUnit) -> Result:
    if "weight" not in src.leaves:
        return {}, set(), []
    w = get("weight")
    want = tgt.leaves["negative_slope"].shape if "negative_slope" in tgt.leaves else w.shape
    if w.size == int(np.prod(want, dtype=int)):
        w = w.reshape(want)
    return {"negative_slope": w}, {"weight"}, []


def _heads(tgt: TargetUnit, part: str) -> tuple[int, int] | None:
    leaf = tgt.leaves.get(f"{part}/kernel")
    if leaf is None:
        return None
    if part == "out":
        return (leaf.shape[0], leaf.shape[1]) if len(leaf.shape) == 3 else None
    return (leaf.shape[1], leaf.shape[2]) if len(leaf.shape) == 3 else None


def mha(src: TorchUnit, get: Callable[[str], np.ndarray], tgt: TargetUnit) -> Result:
    out, used, problems = {}, set(), []
    heads = _heads(tgt, "query") or _heads(tgt, "out")
    if heads is None:
        return {}, set(), [f"target {tgt.name}: attention kernels are not (in, heads, head_dim)"]
    h, d = heads
    if "in_proj_weight" in src.leaves:
        w = get("in_proj_weight")
        e = w.shape[0] // 3
        ws = {"query": w[:e], "key": w[e:2 * e], "value": w[2 * e:]}
        used.add("in_proj_weight")
    else:
        ws = {}
        for part, name in (("query", "q_proj_weight"), ("key", "k_proj_weight"),
                           ("value", "v_proj_weight")):
            if name in src.leaves:
                ws[part] = get(name)
                used.add(name)
    for part, w in ws.items():
        out[f"{part}/kernel"] = _t(w).reshape(w.shape[1], h, d) if w.shape[0] == h * d \
            else _t(w)
    if "in_proj_bias" in src.leaves:
        b = get("in_proj_bias")
        e = b.shape[0] // 3
        for i, part in enumerate(("query", "key", "value")):
            piece = b[i * e:(i + 1) * e]
            out[f"{part}/bias"] = piece.reshape(h, d) if piece.size == h * d else piece
        used.add("in_proj_bias")
    if "out_proj.weight" in src.leaves:
        w = get("out_proj.weight")
        out["out/kernel"] = _t(w).reshape(h, d, w.shape[0]) if w.shape[1] == h * d else _t(w)
        used.add("out_proj.weight")
    if "out_proj.bias" in src.leaves:
        out["out/bias"] = get("out_proj.bias")
        used.add("out_proj.bias")
    for name in ("bias_k", "bias_v"):
        if name in src.leaves:
            problems.append(
                f"torch key {src.keys[name]!r} {shape_of(src.leaves[name])}: add_bias_kv has "
                "no flaxen equivalent (build the torch layer with add_bias_kv=False, or map it "
                "with a rule)")
            used.add(name)
    return out, used, problems


def _recurrent(gates: str, x_names: tuple[str, ...], h_names: tuple[str, ...],
               split_bias: frozenset[str] = frozenset()):
    """A rule for a cell whose torch weights stack ``gates`` along the first axis."""

    def rule(src: TorchUnit, get: Callable[[str], np.ndarray], tgt: TargetUnit) -> Result:
        out, used, problems = {}, set(), []
        n = len(gates)
        if "weight_hr" in src.leaves:
            problems.append(
                f"torch key {src.keys['weight_hr']!r}: LSTM proj_size has no flaxen cell "
                "equivalent (use proj_size=0, or add a Dense after the cell)")
            used.add("weight_hr")
        w_ih = get("weight_ih") if "weight_ih" in src.leaves else None
        w_hh = get("weight_hh") if "weight_hh" in src.leaves else None
        b_ih = get("bias_ih") if "bias_ih" in src.leaves else None
        b_hh = get("bias_hh") if "bias_hh" in src.leaves else None
        used.update(k for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh") if k in src.leaves)
        hidden = (w_hh.shape[1] if w_hh is not None else
                  w_ih.shape[0] // n if w_ih is not None else 0)
        for j, (gate, xn, hn) in enumerate(zip(gates, x_names, h_names)):
            sl = slice(j * hidden, (j + 1) * hidden)
            if w_ih is not None:
                out[f"{xn}/kernel"] = _t(w_ih[sl])
            if w_hh is not None:
                out[f"{hn}/kernel"] = _t(w_hh[sl])
            bx = b_ih[sl] if b_ih is not None else None
            bh = b_hh[sl] if b_hh is not None else None
            has_x, has_h = f"{xn}/bias" in tgt.leaves, f"{hn}/bias" in tgt.leaves
            if gate in split_bias or (has_x and has_h):
                for name, b in ((xn, bx), (hn, bh)):
                    if b is not None:
                        out[f"{name}/bias"] = b
                    elif f"{name}/bias" in tgt.leaves:
                        out[f"{name}/bias"] = np.zeros((hidden,), _dtype(w_ih, w_hh))
                continue
            total = _add(bx, bh)
            side = xn if has_x else hn if has_h else None
            if side is None:
                if total is not None:
                    problems.append(
                        f"torch {src.name}: gate {gate!r} has biases but target {tgt.name} "
                        f"has neither {xn}/bias nor {hn}/bias (build the torch layer with "
                        "bias=False, or give the flaxen cell biases)")
                continue
            out[f"{side}/bias"] = total if total is not None else np.zeros(
                (hidden,), _dtype(w_ih, w_hh))
        return out, used, problems

    return rule


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _dtype(*arrays: Any) -> Any:
    for a in arrays:
        if a is not None:
            return a.dtype
    return np.float32


lstm = _recurrent("ifgo", ("ii", "if", "ig", "io"), ("hi", "hf", "hg", "ho"))
gru = _recurrent("rzn", ("ir", "iz", "in"), ("hr", "hz", "hn"), split_bias=frozenset("n"))
rnn = _recurrent("x", ("i",), ("h",))


def raw(src: TorchUnit, get: Callable[[str], np.ndarray], tgt: TargetUnit) -> Result:
    """Parameters held directly by a module: copied to target leaves of the same name."""
    out, used = {}, set()
    for name in src.leaves:
        if name in tgt.leaves:
            out[name] = get(name)
            used.add(name)
    return out, used, []


RULES = {"dense": dense, "conv": conv, "norm": norm, "bn": bn, "embed": embed,
         "prelu": prelu, "mha": mha, "lstm": lstm, "gru": gru, "rnn": rnn, "raw": raw}

DROPPED = frozenset({"num_batches_tracked"})
