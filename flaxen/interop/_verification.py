"""Run a torch model and its flaxen conversion side by side and say where they part.

:func:`verify` feeds both models the same inputs (converted to channels-last for flaxen
where the torch model starts with a convolution), records every layer's output on both
sides (torch forward hooks; Linen ``capture_intermediates``; for NNX, a recording
``__call__`` on each layer for the duration of the run), lines the outputs up by the same
layer pairing that :func:`~flaxen.interop.torch.convert` uses, and returns a
:class:`VerifyReport`: the first layer whose output diverges and the likely causes, drawn
from a known list (epsilon, GELU approximation, padding, flatten order, mask polarity, ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
from typing import Any

import numpy as np

from flaxen.interop._conversion import plan
from flaxen.interop._torch_units import to_numpy


@dataclasses.dataclass
class Row:
    """One compared layer: names on both sides, shape and the largest differences."""

    torch_name: str
    torch_type: str
    flaxen_path: str
    shape: tuple[int, ...] | None
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""


@dataclasses.dataclass
class VerifyReport:
    """What :func:`verify` found; ``report.ok`` says whether every output matched.

    Printing the report (``print(report)`` or ``rich.print(report)``) shows one line per
    compared layer, the first diverging one, and the likely causes.
    """

    rows: list[Row]
    output: Row
    rtol: float
    atol: float
    first_divergence: Row | None = None
    causes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.output.ok and self.first_divergence is None

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"torch vs flaxen (rtol={self.rtol:g}, atol={self.atol:g})")
        for col in ("torch layer", "type", "flaxen layer", "shape", "max |diff|", ""):
            table.add_column(col)
        for row in [*self.rows, self.output]:
            mark = "[green]ok[/]" if row.ok else "[red]DIVERGES[/]"
            table.add_row(row.torch_name, row.torch_type, row.flaxen_path,
                          str(row.shape) if row.shape is not None else "-",
                          f"{row.max_abs:.3g}", mark + (f" {row.note}" if row.note else ""))
        parts: list[Any] = [table]
        if self.ok:
            parts.append(Text("All compared outputs match.", style="green"))
        else:
            where = self.first_divergence or self.output
            parts.append(Text(f"First divergence: {where.torch_name} -> {where.flaxen_path} "
                              f"(max |diff| {where.max_abs:.3g})", style="bold red"))
            for cause in self.causes:
                parts.append(Text(f"  likely cause: {cause}"))
        return Group(*parts)

    def __str__(self) -> str:
        from rich.console import Console

        console = Console(width=120, record=True, file=io.StringIO(), color_system=None)
        console.print(self)
        return console.export_text()

    def show(self) -> None:
        """Prints the report with rich."""
        import rich

        rich.print(self)



def _first_array(x: Any) -> Any:
    while isinstance(x, (tuple, list)) and x:
        x = x[0]
    return x


def _np(x: Any) -> np.ndarray | None:
    x = _first_array(x)
    if x is None:
        return None
    try:
        return np.asarray(to_numpy(x), dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _align(t: np.ndarray, f: np.ndarray, channels_first: bool = False
           ) -> tuple[np.ndarray | None, str]:
    """``t`` (torch layout) brought to ``f``'s layout, and how.

    ``channels_first`` says the torch layer writes (N, C, ...) for sure (convolutions,
    batch norms), which settles the case where C happens to equal a spatial size.
    """
    if channels_first and t.ndim >= 3:
        moved = np.moveaxis(t, 1, -1)
        if moved.shape == f.shape:
            return moved, "channels-last"
    if t.shape == f.shape:
        return t, ""
    if t.ndim >= 3:
        moved = np.moveaxis(t, 1, -1)
        if moved.shape == f.shape:
            return moved, "channels-last"
    if t.ndim >= 2:
        swapped = np.swapaxes(t, 0, 1)
        if swapped.shape == f.shape:
            return swapped, "batch-first"
    return None, ""


def _compare(t: Any, f: Any, rtol: float, atol: float, channels_first: bool = False
             ) -> tuple[tuple | None, float, float, bool, str]:
    ta, fa = _np(t), _np(f)
    if ta is None or fa is None:
        return None, float("nan"), float("nan"), True, "not comparable"
    aligned, how = _align(ta, fa, channels_first)
    if aligned is None:
        return fa.shape, float("inf"), float("inf"), False, f"shape {ta.shape} vs {fa.shape}"
    diff = np.abs(aligned - fa)
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff / (np.abs(aligned) + 1e-12)).max()) if diff.size else 0.0
    ok = bool(np.allclose(fa, aligned, rtol=rtol, atol=atol))
    return fa.shape, max_abs, max_rel, ok, how


def _to_torch(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x
    return torch.as_tensor(np.asarray(x))


_CHANNELS_FIRST = ("Conv", "BatchNorm", "MaxPool", "AvgPool", "InstanceNorm", "GroupNorm")


def _channels_first_model(module: Any) -> bool:
    for m in module.modules():
        name = type(m).__name__
        if name.startswith(("Conv", "BatchNorm", "MaxPool", "AvgPool", "InstanceNorm")):
            return True
        if name in ("Linear", "Embedding", "MultiheadAttention", "LSTM", "GRU", "RNN",
                    "TransformerEncoderLayer", "TransformerEncoder", "LayerNorm"):
            return False
    return False


def _flaxen_input(x: Any, channels_first: bool) -> Any:
    arr = to_numpy(x) if not isinstance(x, np.ndarray) else x
    if channels_first and arr.ndim >= 3 and np.issubdtype(arr.dtype, np.floating):
        return np.ascontiguousarray(np.moveaxis(arr, 1, -1))
    return arr


@contextlib.contextmanager
def _nnx_recorder(module: Any, record: dict):
    """Records each NNX sub-layer's output by path while the block runs."""
    from flaxen.nnx.graph import iter_graph
    from flaxen.nnx.module import Module

    swapped: list[tuple[Any, Any]] = []
    try:
        for path, node in list(iter_graph(module)):
            if not isinstance(node, Module) or not path or not callable(node):
                continue
            cls: Any = type(node)
            key = "/".join(str(p) for p in path)

            def call(self, *a, _cls=cls, _key=key, **k):
                out = _cls.__call__(self, *a, **k)
                record.setdefault(_key, out)
                return out

            try:
                node.__class__ = type(cls.__name__, (cls,), {"__call__": call})
            except TypeError:
                continue
            swapped.append((node, cls))
        yield
    finally:
        for node, cls in swapped:
            node.__class__ = cls


def _linen_record(intermediates: Any, prefix: tuple = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in intermediates.items():
        if k == "__call__":
            out["/".join(prefix)] = v[0] if isinstance(v, tuple) and len(v) == 1 else v
        elif hasattr(v, "items"):
            out.update(_linen_record(v, prefix + (str(k),)))
    return out


def _pair_paths(pairs: list, record: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """torch module name -> (flaxen path whose output to compare, kind).

    A torch RNN's output is its last layer's (both directions concatenated when it is
    bidirectional). Where the flaxen cell sits under its wrapper (``.../cell``) the wrapper
    is that path; where the cell was built in the parent (``LSTMCell_0`` beside ``RNN_0``),
    the wrappers are taken in call order (``RNN_*``, or ``Bidirectional_*``).
    """
    out: dict[str, tuple[str, str]] = {}
    wrappers = {kind: [k for k in record if k.rpartition("/")[2].startswith(kind)]
                for kind in ("RNN", "Bidirectional")}
    used = {"RNN": 0, "Bidirectional": 0}
    recurrent: dict[str, list] = {}
    for s, t in pairs:
        if s.kinds[0] in ("lstm", "gru", "rnn"):
            recurrent.setdefault(s.prefix.rpartition(".")[0], []).append((s, t))
        else:
            out.setdefault(s.prefix, ("/".join(map(str, t.path)), t.kind))
    for tname, group in recurrent.items():
        s, t = group[-1]
        bidir = bool(getattr(s.module, "bidirectional", False)) or any(
            u.prefix.endswith("_reverse") for u, _ in group)
        layers = len({u.prefix.rpartition(".")[2].split("_")[0] for u, _ in group})
        path = list(map(str, t.path))
        if path and path[-1] == "cell":
            path = path[:-1][:-1] if bidir else path[:-1]
            out[tname] = ("/".join(path), t.kind)
            continue
        kind = "Bidirectional" if bidir else "RNN"
        idx = used[kind] + layers - 1
        used[kind] += layers
        if bidir:
            used["RNN"] += 2 * layers
        if idx < len(wrappers[kind]):
            out[tname] = (wrappers[kind][idx], t.kind)
    return out


def causes_for(kind: str, module: Any, between: list[tuple[str, Any]], first: bool,
               after_spatial: bool = False, max_abs: float = float("inf")) -> list[str]:
    """Known reasons a layer of ``kind`` diverges, given the torch modules run before it."""
    causes = []
    types = {type(m).__name__: m for _, m in between}
    if first:
        causes.append("input layout: flaxen takes channels-last images (N, H, W, C) and "
                      "batch-first sequences; check the inputs given to each side")
    for _, m in between:
        fn = getattr(m, "activation", None)
        if type(m).__name__ == "GELU" or getattr(fn, "__name__", "") == "gelu":
            causes.append(f"GELU approximation: torch GELU(approximate="
                          f"{getattr(m, 'approximate', 'none')!r}) is exact by default; "
                          "flaxen nn.gelu defaults to approximate=True: call "
                          "nn.gelu(x, approximate=False)")
            break
    if kind in ("norm", "bn"):
        eps = getattr(module, "eps", None)
        causes.append(f"epsilon: torch {type(module).__name__} uses eps={eps}; flaxen "
                      "LayerNorm/GroupNorm default to epsilon=1e-6 and BatchNorm to 1e-5: pass "
                      f"epsilon={eps}")
        if kind == "bn":
            causes.append("batch statistics: run flaxen BatchNorm with "
                          "use_running_average=True (torch eval mode) and pass the converted "
                          "batch_stats")
        if type(module).__name__ == "GroupNorm":
            causes.append(f"groups: torch GroupNorm(num_groups={module.num_groups}); pass "
                          f"num_groups={module.num_groups} to flaxen GroupNorm")
    if kind == "conv":
        pad = getattr(module, "padding", None)
        mode = getattr(module, "padding_mode", "zeros")
        causes.append(f"padding: torch {type(module).__name__}(padding={pad!r}, "
                      f"padding_mode={mode!r}, stride={getattr(module, 'stride', None)}, "
                      f"dilation={getattr(module, 'dilation', None)}, "
                      f"groups={getattr(module, 'groups', None)}); flaxen Conv defaults to "
                      "padding='SAME': pass explicit pairs, e.g. padding=[(p, p), (p, p)], and "
                      "the same strides/kernel_dilation/feature_group_count")
        if type(module).__name__.startswith("ConvTranspose"):
            causes.append("transposed convolution: use ConvTranspose(transpose_kernel=True) "
                          "with padding (d*(k-1)-p, d*(k-1)-p+output_padding) per axis")
    if kind == "dense" and (after_spatial or "Flatten" in types):
        causes.append("flatten order: torch flattens (C, H, W) but flaxen (H, W, C); convert "
                      "with rules={'<linear>.weight': channels_first_flatten(C)}")
    if kind == "mha":
        causes.append("mask polarity: torch key_padding_mask/attn_mask True means 'masked "
                      "out', flaxen mask True means 'attend': pass mask=~key_padding_mask"
                      "[:, None, None, :]; also check batch_first (flaxen is batch-first)")
    if kind in ("lstm", "gru", "rnn"):
        causes.append("carry order: torch LSTM state is (h, c), flaxen LSTMCell carry is "
                      "(c, h); and torch batch_first defaults to False")
    if max_abs < 1e-3:
        causes.append("numerics: the difference is small; loosen rtol/atol (float32 sums in "
                      "another order differ by ~1e-6 relative)")
    return causes


def verify(torch_module: Any, flaxen_module: Any, variables: Any, inputs: Any, rtol: float,
           atol: float, *, flaxen_inputs: Any = None, torch_kwargs: dict | None = None,
           flaxen_kwargs: dict | None = None, rules: Any = None) -> VerifyReport:
    """Implementation of :func:`flaxen.interop.torch.verify` (see there)."""
    import torch

    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    nnx_module = sys.modules.get("flaxen.nnx.module")
    is_nnx = nnx_module is not None and isinstance(flaxen_module, nnx_module.Module)
    target = flaxen_module if is_nnx else variables
    the_plan, _, _ = plan(torch_module, target, rules)

    # torch side: eval mode, hooks on every submodule, grad enabled so that torch's fused
    # inference fast paths (which skip the submodules) stay off.
    order: list[tuple[str, Any, Any]] = []
    hooks = []
    for name, m in torch_module.named_modules():
        if name:
            hooks.append(m.register_forward_hook(
                lambda mod, args, out, _n=name: order.append((_n, mod, out))))
    was_training = torch_module.training
    torch_module.eval()
    try:
        with torch.enable_grad():
            t_out = torch_module(*[_to_torch(x) for x in inputs], **(torch_kwargs or {}))
    finally:
        for h in hooks:
            h.remove()
        torch_module.train(was_training)

    if flaxen_inputs is None:
        cf = _channels_first_model(torch_module)
        flaxen_inputs = tuple(_flaxen_input(x, cf) for x in inputs)
    elif not isinstance(flaxen_inputs, tuple):
        flaxen_inputs = (flaxen_inputs,)
    record: dict[str, Any] = {}
    if is_nnx:
        if variables is not None:
            from flaxen.nnx.graph import update

            update(flaxen_module, variables)
        with _nnx_recorder(flaxen_module, record):
            f_out = flaxen_module(*flaxen_inputs, **(flaxen_kwargs or {}))
    else:
        f_out, state = flaxen_module.apply(variables, *flaxen_inputs, capture_intermediates=True,
                                           mutable=["intermediates"], **(flaxen_kwargs or {}))
        record = _linen_record(state.get("intermediates", {}))

    pair_of = _pair_paths(the_plan.pairs, record)

    rows: list[Row] = []
    first, causes = None, []
    last_ok = -1
    seen: set[str] = set()
    for i, (name, mod, out) in enumerate(order):
        if name not in pair_of or name in seen:
            continue
        seen.add(name)
        fpath, kind = pair_of[name]
        if fpath not in record:
            continue
        cf = kind in ("conv", "bn") or type(mod).__name__.startswith(_CHANNELS_FIRST)
        shape, max_abs, max_rel, ok, note = _compare(out, record[fpath], rtol, atol, cf)
        row = Row(name, type(mod).__name__, fpath or "<root>", shape, max_abs, max_rel, ok, note)
        rows.append(row)
        if not ok and first is None:
            first = row
            between = [(n, m) for n, m, _ in order[last_ok + 1:i + 1]] + [
                (n, m) for n, m in torch_module.named_modules()
                if n and name.startswith(n + ".")] + [("", torch_module)]
            prev = [r for r in rows if r.ok]
            spatial = bool(prev) and prev[-1].shape is not None and len(prev[-1].shape) >= 3
            causes = causes_for(kind, mod, between, first=not prev, after_spatial=spatial,
                                max_abs=max_abs)
        elif ok and first is None:
            last_ok = i
    last = rows[-1] if rows else None
    shape, max_abs, max_rel, ok, note = _compare(
        t_out, f_out, rtol, atol, last is not None and last.note == "channels-last")
    output = Row("<output>", type(torch_module).__name__, "<output>", shape, max_abs, max_rel,
                 ok, note)
    if not ok and first is None:
        between = [(n, m) for n, m, _ in order[last_ok + 1:]] + [("", torch_module)]
        root_kind = pair_of.get("", ("", ""))[1]  # a single-layer torch model
        causes = causes_for(root_kind, torch_module, between, first=not rows, max_abs=max_abs)
    return VerifyReport(rows, output, rtol, atol, first, causes)
