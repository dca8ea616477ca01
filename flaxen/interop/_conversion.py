"""Matching torch layers to flaxen layers, applying the layout rules, collecting problems.

Matching is driven by the target. Each torch unit is paired with one target unit:

1. pinned by a user rule (``rules={'encoder.proj': 'params/Dense_3'}``);
2. by name, where both sides spell the layer the same way (``layers.0.fc`` is
   ``layers_0/fc``), when the kinds agree;
3. by order within a kind: the k-th flaxen dense layer whose shapes fit takes the first
   torch linear layer not yet taken whose converted shapes fit, and so on for every kind
   (so torch's registration order and flaxen's call order may differ across kinds);
4. whatever is left is paired by kind alone, so that a shape that does not fit is
   reported as such instead of as one missing and one unused tensor.

Every problem found on the way (unused torch keys, unfilled target leaves, shapes that do
not fit, non-tensors) is collected, and :class:`flaxen.errors.TorchConversionError` lists
them all in one message.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from flaxen.errors import TorchConversionError
from flaxen.interop import _rules
from flaxen.interop._placement import place
from flaxen.interop._target import Target, TargetLeaf, TargetUnit, read_target
from flaxen.interop._torch_units import TorchUnit, normalize, read_source, shape_of, to_numpy


@dataclasses.dataclass
class Plan:
    """What :func:`plan` decided: the unit pairs and every leaf's source."""

    target: Target
    pairs: list[tuple[TorchUnit, TargetUnit]]
    module: Any  # the torch module, when one was given


def _leaf_path_str(leaf: TargetLeaf) -> str:
    return "/".join(str(p) for p in leaf.path)


def _parse_rules(rules: Mapping[str, Any] | None, keys: set[str], prefixes: set[str]):
    drops, pre, leaf_pins, unit_pins = [], {}, {}, {}
    problems = []
    for pattern, value in (rules or {}).items():
        if value is None:
            drops.append(pattern)
        elif isinstance(value, str):
            if pattern in keys:
                leaf_pins[pattern] = (value, None)
            else:
                unit_pins[pattern] = value
        elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            leaf_pins[pattern] = value
        elif callable(value):
            pre[pattern] = value
        else:
            problems.append(
                f"rule {pattern!r}: {type(value).__name__} is not a rule (use a target path "
                "string, None to drop, a function to transform, or (path, function))")
    for pattern in list(leaf_pins) + list(pre):
        if pattern not in keys:
            problems.append(f"rule {pattern!r} names no torch key (keys look like "
                            f"{sorted(keys)[:3]})")
    for pattern in unit_pins:
        if pattern not in prefixes:
            problems.append(f"rule {pattern!r} names no torch key or module (modules look like "
                            f"{sorted(p for p in prefixes if p)[:3]})")
    return drops, pre, leaf_pins, unit_pins, problems


def _dropped(key: str, drops: list[str]) -> bool:
    return any(key == d or key.startswith(d + ".") or fnmatch.fnmatchcase(key, d) for d in drops)


def _zero_view(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An array of ``shape`` that takes no memory: for checking shapes without converting."""
    return np.lib.stride_tricks.as_strided(np.zeros((), dtype), shape, (0,) * len(shape))


class _Getter:
    """Torch arrays of one unit, as numpy, after the user's pre-transform rules."""

    def __init__(self, unit: TorchUnit, pre: dict[str, Callable], dry: bool) -> None:
        self.unit, self.pre, self.dry = unit, pre, dry

    def __call__(self, name: str) -> np.ndarray:
        value = self.unit.leaves[name]
        key = self.unit.keys[name]
        fn = self.pre.get(key)
        if self.dry and fn is None:
            dtype = value.dtype if isinstance(value, np.ndarray) else _np_dtype(value)
            return _zero_view(shape_of(value), dtype)
        arr = to_numpy(value)
        return np.asarray(fn(arr)) if fn is not None else arr


def _np_dtype(value: Any) -> Any:
    import ml_dtypes

    name = str(value.dtype).replace("torch.", "")
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def _run(kind: str, src: TorchUnit, tgt: TargetUnit, pre: dict, dry: bool):
    rule = _rules.RULES.get(kind, _rules.raw)
    return rule(src, _Getter(src, pre, dry), tgt)


def _fits(kind: str, src: TorchUnit, tgt: TargetUnit, pre: dict) -> bool:
    try:
        out, used, problems = _run(kind, src, tgt, pre, dry=True)
    except Exception:
        return False
    if problems or set(out) != set(tgt.leaves):
        return False
    if set(src.leaves) - used - _rules.DROPPED:
        return False
    return all(tuple(v.shape) == tgt.leaves[k].shape for k, v in out.items())


def _target_names(unit: TargetUnit) -> set[str]:
    full = normalize(unit.path)
    names = {full}
    if unit.kind in ("lstm", "gru", "rnn") and unit.path and str(unit.path[-1]) == "cell":
        names.add(normalize(unit.path[:-1]))
    return names


def _source_names(unit: TorchUnit) -> set[str]:
    names = {normalize(unit.prefix)}
    if unit.kinds[0] in ("lstm", "gru", "rnn") and unit.prefix.endswith(".l0"):
        names.add(normalize(unit.prefix[: -len(".l0")]))
    return names


def plan(source: Any, target: Any, rules: Mapping[str, Any] | None = None
         ) -> tuple[Plan, dict[tuple, np.ndarray], list[str]]:
    """Pairs the units and converts them; returns the plan, the arrays and the problems."""
    drop_patterns = [k for k, v in (rules or {}).items() if v is None]
    units, problems, module = read_source(source, lambda key: _dropped(key, drop_patterns))
    tgt = read_target(target)
    keys = {k for u in units for k in u.keys.values()}
    prefixes = {u.prefix for u in units} | {""}
    if module is not None:
        prefixes |= {name for name, _ in module.named_modules()}
    drops, pre, leaf_pins, unit_pins, rule_problems = _parse_rules(rules, keys, prefixes)
    problems += rule_problems

    # Drops and leaf pins take torch keys out of their units before matching.
    leaf_by_path = {_leaf_path_str(leaf): (unit, rel)
                    for unit in tgt.units for rel, leaf in unit.leaves.items()}
    filled: dict[tuple, np.ndarray] = {}
    for unit in units:
        for name in list(unit.leaves):
            key = unit.keys[name]
            if key in leaf_pins:
                path, fn = leaf_pins[key]
                hit = leaf_by_path.get(path.strip("/"))
                if hit is None:
                    problems.append(f"rule {key!r} -> {path!r}: the target has no leaf there "
                                    f"(leaves look like {sorted(leaf_by_path)[:3]})")
                else:
                    tunit, rel = hit
                    arr = to_numpy(unit.leaves[name])
                    arr = np.asarray(fn(arr)) if fn is not None else arr
                    _place(filled, tunit.leaves[rel], arr, f"torch key {key!r}", problems)
                    del tunit.leaves[rel]
                del unit.leaves[name]
            elif _dropped(key, drops) or name in _rules.DROPPED:
                del unit.leaves[name]
    units = [u for u in units if u.leaves]
    t_units = [u for u in tgt.units if u.leaves]

    pairs: list[tuple[TorchUnit, TargetUnit]] = []
    free_t, free_u = list(units), list(t_units)

    free_ids = {id(u) for u in units}

    def take(s: TorchUnit, t: TargetUnit) -> None:
        pairs.append((s, t))
        free_t.remove(s)
        free_u.remove(t)
        free_ids.discard(id(s))

    by_name = {u.name: u for u in t_units}
    for prefix, path in unit_pins.items():
        s = next((u for u in free_t if u.prefix == prefix), None)
        t = by_name.get(path.strip("/")) or next(
            (u for u in free_u if "/".join(["params", u.name]) == path.strip("/")), None)
        if s is None or t is None:
            problems.append(f"rule {prefix!r} -> {path!r}: no free "
                            f"{'torch module' if s is None else 'target layer'} there")
            continue
        take(s, t)
    # by name: an index from each torch unit's names to the units (in source order), so
    # that matching stays linear in the number of layers
    order = {id(u): i for i, u in enumerate(units)}
    by_source_name: dict[str, list[TorchUnit]] = {}
    for u in units:
        for name in _source_names(u):
            by_source_name.setdefault(name, []).append(u)
    for t in list(free_u):
        found = [u for name in _target_names(t) for u in by_source_name.get(name, ())
                 if id(u) in free_ids and t.kind in u.kinds]
        if found:
            take(min(found, key=lambda u: order[id(u)]), t)
    for t in list(free_u):  # by order within a kind, shapes fitting
        s = next((u for u in free_t if t.kind in u.kinds and _fits(t.kind, u, t, pre)), None)
        if s is not None:
            take(s, t)
    for t in list(free_u):  # by kind alone: shape problems get reported as such
        s = next((u for u in free_t if t.kind in u.kinds), None)
        if s is not None:
            take(s, t)

    for s, t in pairs:
        out, used, rule_problems = _run(t.kind, s, t, pre, dry=False)
        problems += rule_problems
        for rel, arr in out.items():
            leaf = t.leaves.get(rel)
            if leaf is None:
                src_key = _source_key(s, rel)
                problems.append(f"torch {src_key} {tuple(arr.shape)} maps to {t.name}/{rel}, "
                                f"which the target does not have")
                continue
            _place(filled, leaf, arr, f"torch {_source_key(s, rel)}", problems)
        for name in set(s.leaves) - used:
            problems.append(f"torch key {s.keys[name]!r} {shape_of(s.leaves[name])} maps "
                            f"nowhere in target layer {t.name}")
    for s in free_t:
        for name, value in s.leaves.items():
            problems.append(f"torch key {s.keys[name]!r} {shape_of(value)} maps nowhere "
                            "(no flaxen layer of its kind is left)")
    for t in t_units:
        for leaf in t.leaves.values():
            if leaf.path not in filled:
                problems.append(f"target leaf {_leaf_path_str(leaf)} {leaf.shape} is not "
                                "filled by any torch key")
    return Plan(tgt, pairs, module), filled, problems


_ORIGIN = {"kernel": "weight", "scale": "weight", "embedding": "weight",
           "negative_slope": "weight", "mean": "running_mean", "var": "running_var",
           "bias": "bias", "out/kernel": "out_proj.weight", "out/bias": "out_proj.bias"}


def _source_key(s: TorchUnit, rel: str) -> str:
    local = _ORIGIN.get(rel)
    if local in s.keys:
        return f"key {s.keys[local]!r} {shape_of(s.leaves[local])}"
    return f"layer {s.name!r}"


def _place(filled: dict, leaf: TargetLeaf, arr: np.ndarray, what: str, problems: list) -> None:
    if tuple(arr.shape) != leaf.shape:
        problems.append(f"{what}: converted shape {tuple(arr.shape)} does not fit target "
                        f"{_leaf_path_str(leaf)} {leaf.shape}")
        filled[leaf.path] = None  # reported already: not "unfilled" as well
        return
    filled[leaf.path] = (arr, leaf.dtype)


def convert(source: Any, target: Any, rules: Mapping[str, Any] | None = None,
            *, return_plan: bool = False) -> Any:
    """Implementation of :func:`flaxen.interop.torch.convert` (see there)."""
    import jax

    the_plan, filled, problems = plan(source, target, rules)
    if problems:
        raise TorchConversionError(problems)
    on_device = DEVICE_LAYOUT if DEVICE_LAYOUT is not None else jax.default_backend() != "cpu"
    placed = place(filled, on_device)
    from flaxen.interop._target import write_target

    out = write_target(the_plan.target, placed)
    return (out, the_plan) if return_plan else out


# Where permuted views get laid out: None = on the accelerator when there is one (the
# contiguous torch buffer is sent as is and transposed there, nearly free), else on the host.
DEVICE_LAYOUT: bool | None = None
