"""The source side of a torch import: a ``state_dict`` cut into layers ("units").

Keys are grouped by module prefix (``encoder.layers.0.linear1.weight`` belongs to the
unit ``encoder.layers.0.linear1``). A unit's *kind* comes from the module's class when a
``torch.nn.Module`` is given, and otherwise from its key names and shapes; where a bare
state dict is ambiguous (a 2-D ``weight`` with no bias is a bias-free ``Linear`` or an
``Embedding``), the unit lists every kind it may be and the target decides.

Recurrent layers are split per layer and direction (``lstm`` with ``num_layers=2,
bidirectional=True`` gives four units), as flaxen stacks one ``nn.RNN`` per layer.
Tensors stay as they are here; :func:`to_numpy` turns one into numpy (without a copy
where torch allows) at the moment it is converted.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

_RNN_KEY = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$")

_TYPE_KINDS = {
    "Linear": ("dense",), "LazyLinear": ("dense",), "NonDynamicallyQuantizableLinear": ("dense",),
    "Conv1d": ("conv",), "Conv2d": ("conv",), "Conv3d": ("conv",),
    "ConvTranspose1d": ("conv",), "ConvTranspose2d": ("conv",), "ConvTranspose3d": ("conv",),
    "BatchNorm1d": ("bn",), "BatchNorm2d": ("bn",), "BatchNorm3d": ("bn",),
    "SyncBatchNorm": ("bn",),
    "LayerNorm": ("norm",), "GroupNorm": ("norm",), "RMSNorm": ("norm",),
    "InstanceNorm1d": ("norm",), "InstanceNorm2d": ("norm",), "InstanceNorm3d": ("norm",),
    "Embedding": ("embed",),
    "MultiheadAttention": ("mha",),
    "LSTM": ("lstm",), "GRU": ("gru",), "RNN": ("rnn",),
    "PReLU": ("prelu",),
}


@dataclasses.dataclass
class TorchUnit:
    """One torch layer (or one layer/direction of a recurrent layer)."""

    prefix: str  # module path, e.g. 'encoder.layers.0.self_attn' or 'lstm.l1_reverse'
    kinds: tuple[str, ...]  # kinds it may be, most likely first
    leaves: dict[str, Any]  # local name -> tensor
    keys: dict[str, str]  # local name -> full state-dict key (for messages)
    module: Any = None  # the torch module, when one was given
    module_type: str | None = None

    @property
    def name(self) -> str:
        return self.prefix or "<root>"


def to_numpy(value: Any) -> np.ndarray:
    """A torch tensor (any device, bfloat16 included) or array-like as a numpy array."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        import torch

        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            import ml_dtypes

            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    return np.asarray(value)


def is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        hasattr(value, "detach") and hasattr(value, "shape") and hasattr(value, "dtype"))


def shape_of(value: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in value.shape)


def read_source(source: Any, skip: Any = None) -> tuple[list[TorchUnit], list[str], Any]:
    """``(units, problems, module)`` for a state dict or a ``torch.nn.Module``.

    Keys for which ``skip(key)`` is true are left out (the user's drop rules).
    """
    module = None
    if hasattr(source, "state_dict") and hasattr(source, "named_modules"):
        module = source
        state = source.state_dict()
    elif isinstance(source, Mapping):
        state = source
    else:
        raise TypeError(
            f"convert: the source must be a torch state_dict (a mapping of names to tensors) "
            f"or a torch.nn.Module; got {type(source).__name__}. Pass model.state_dict() or "
            "the model itself.")
    problems = []
    groups: dict[str, dict[str, Any]] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            problems.append(f"state-dict key {key!r} is a {type(key).__name__}, not a string")
            continue
        if skip is not None and skip(key):
            continue
        if not is_array(value):
            problems.append(
                f"torch key {key!r} holds a {type(value).__name__}, not a tensor "
                "(drop it with rules={%r: None})" % key)
            continue
        prefix, _, local = key.rpartition(".")
        groups.setdefault(prefix, {})[local] = value
    modules = dict(module.named_modules()) if module is not None else {}
    units: list[TorchUnit] = []
    absorbed: set[str] = set()
    for prefix, leaves in groups.items():
        if prefix in absorbed:
            continue
        mod = modules.get(prefix)
        mtype = type(mod).__name__ if mod is not None else None
        keys = {name: _join(prefix, name) for name in leaves}
        if "in_proj_weight" in leaves or "q_proj_weight" in leaves:
            out = _join(prefix, "out_proj")
            leaves = dict(leaves)
            for name, value in groups.get(out, {}).items():
                leaves[f"out_proj.{name}"] = value
                keys[f"out_proj.{name}"] = _join(out, name)
            absorbed.add(out)
            units.append(TorchUnit(prefix, ("mha",), leaves, keys, mod, mtype))
            continue
        if any(_RNN_KEY.match(name) for name in leaves):
            units.extend(_split_rnn(prefix, leaves, mod, mtype))
            continue
        kinds = _TYPE_KINDS.get(mtype) if mtype else None
        if kinds == ("bn",) and "running_mean" not in leaves:
            kinds = ("norm",)
        units.append(TorchUnit(prefix, kinds or _guess(leaves), leaves, keys, mod, mtype))
    return units, problems, module


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _split_rnn(prefix: str, leaves: dict, mod: Any, mtype: str | None) -> list[TorchUnit]:
    per: dict[tuple[int, bool], dict[str, Any]] = {}
    keys: dict[tuple[int, bool], dict[str, str]] = {}
    other: dict[str, Any] = {}
    for name, value in leaves.items():
        m = _RNN_KEY.match(name)
        if not m:
            other[name] = value
            continue
        k = (int(m.group(2)), bool(m.group(3)))
        per.setdefault(k, {})[m.group(1)] = value
        keys.setdefault(k, {})[m.group(1)] = _join(prefix, name)
    units = []
    for (layer, reverse), sub in sorted(per.items()):
        kind = _rnn_kind(sub, mtype)
        tag = f"l{layer}" + ("_reverse" if reverse else "")
        units.append(TorchUnit(_join(prefix, tag), kind, sub, keys[(layer, reverse)], mod,
                               mtype))
    if other:
        units.append(TorchUnit(prefix, ("raw",), other,
                               {n: _join(prefix, n) for n in other}, mod, mtype))
    return units


def _rnn_kind(sub: dict, mtype: str | None) -> tuple[str, ...]:
    if mtype in ("LSTM", "GRU", "RNN"):
        return ({"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"}[mtype],)
    w_ih, w_hh = sub.get("weight_ih"), sub.get("weight_hh")
    if w_ih is None or w_hh is None:
        return ("raw",)
    hidden = shape_of(w_hh)[1]
    gates = shape_of(w_ih)[0] // max(hidden, 1)
    return {4: ("lstm",), 3: ("gru",), 1: ("rnn",)}.get(gates, ("raw",))


def _guess(leaves: dict) -> tuple[str, ...]:
    """Kinds a bare state-dict group may be, from its names and shapes."""
    names = set(leaves)
    if "running_mean" in names or "running_var" in names:
        return ("bn",)
    w = leaves.get("weight")
    if w is None or not names <= {"weight", "bias"}:
        return ("raw",)
    rank = len(shape_of(w))
    if rank >= 3:
        return ("conv",)
    if rank == 2:
        return ("dense",) if "bias" in names else ("dense", "embed")
    if rank == 1:
        return ("norm",) if "bias" in names else ("norm", "prelu")
    return ("raw",)


def normalize(path: Any) -> str:
    """A name both sides can agree on: ``layers.0.fc`` and ``layers_0/fc`` -> ``layers_0/fc``."""
    if isinstance(path, tuple):
        tokens = [str(p) for p in path]
    else:
        tokens = [t for t in re.split(r"[./]", str(path)) if t]
    out: list[str] = []
    for tok in tokens:
        if tok.isdigit():
            if out:
                out[-1] = f"{out[-1]}_{tok}"
            else:
                out.append(f"layers_{tok}")
        else:
            out.append(tok)
    return "/".join(out).lower()
