"""Module summaries: ``nn.tabulate`` / ``Module.tabulate`` and ``Module.module_paths``.

Both run ``Module.init`` under ``jax.eval_shape`` (no FLOPs spent, no memory allocated)
with a method interceptor that records every Module call: its path, class, inputs and
outputs. The table has one row per call (the first call of each Module unless
``show_repeated``), the Module's own variables per collection with their count and byte
size, a ``Total`` row and a ``Total Parameters`` footer, rendered with ``rich``.
"""

from __future__ import annotations

import dataclasses
import io
import types
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from flaxen.linen._binding import INIT_MUTABLE, check_instance, resolve_method
from flaxen.linen._interception import intercept_methods

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


@dataclasses.dataclass
class _Call:
    path: tuple[str, ...]
    module: Any
    method: str
    args: Any
    kwargs: Any
    outputs: Any
    flops: Any = None
    vjp_flops: Any = None


def _abstract(tree: Any) -> Any:
    def leaf(x: Any) -> Any:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype)
        return x

    return jax.tree_util.tree_map(leaf, tree)


def _record_calls(module: Any, rngs: Any, args: tuple, kwargs: dict, method: Any,
                  mutable: Any) -> tuple[list[_Call], Any]:
    calls: list[_Call] = []

    def recorder(next_fun, a, k, context):
        mod = context.module
        if context.method_name == "setup" or mod.scope is None:
            return next_fun(*a, **k)
        call = _Call(tuple(mod.scope.path), mod, context.method_name, _abstract(a),
                     _abstract(k), None)
        calls.append(call)  # before running: rows follow call order, parents first
        out = next_fun(*a, **k)
        call.outputs = _abstract(out)
        return out

    def run(rngs: Any, *a: Any) -> Any:
        with intercept_methods(recorder):
            return module.init(rngs, *a, method=method, mutable=mutable, **kwargs)

    variables = jax.eval_shape(run, rngs, *args)
    return calls, variables


def _select(calls: list[_Call], show_repeated: bool) -> list[_Call]:
    if show_repeated:
        return calls
    seen, out = set(), []
    for c in calls:
        if c.path not in seen:
            seen.add(c.path)
            out.append(c)
    return out


def module_paths(module: Any, rngs: Any, *args: Any, show_repeated: bool = False,
                 mutable: Any = INIT_MUTABLE, method: Any = None, **kwargs: Any
                 ) -> dict[str, Any]:
    """``{'path/to/module': module}`` for every Module called during ``init``."""
    check_instance(module)
    calls, _ = _record_calls(module, rngs, args, kwargs, method, mutable)
    out: dict[str, Any] = {}
    for c in _select(calls, show_repeated):
        key = "/".join(c.path)
        if key not in out or show_repeated:
            out[key] = c.module.clone(parent=None)
    return out


# --- formatting ----------------------------------------------------------------------------


def _size_text(num_bytes: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if num_bytes < 1000 or unit == "TB":
            return f"{num_bytes} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    raise AssertionError("unreachable")


def _count_text(count: int, num_bytes: int) -> str:
    return f"{count:,} ({_size_text(num_bytes)})"


def _leaf_text(x: Any) -> str:
    if isinstance(x, jax.ShapeDtypeStruct) or (hasattr(x, "shape") and hasattr(x, "dtype")):
        return f"{np.dtype(x.dtype).name}[{','.join(str(d) for d in x.shape)}]"
    return repr(x)


def _value_text(value: Any) -> str:
    """Inputs/outputs: one leaf as ``float32[2,3]``, containers as ``- key: ...`` lines."""
    leaves = jax.tree_util.tree_leaves_with_path(value)
    if len(leaves) == 1 and not leaves[0][0]:
        return _leaf_text(leaves[0][1])
    if isinstance(value, tuple) and len(value) == 1:
        return _value_text(value[0])
    lines = []
    for path, leaf in leaves:
        keys = [str(getattr(k, "key", getattr(k, "name", ""))) for k in path
                if not isinstance(k, jax.tree_util.SequenceKey)]
        prefix = f"{'/'.join(keys)}: " if keys else ""
        lines.append(f"- {prefix}{_leaf_text(leaf)}")
    return "\n".join(lines)


def _subtree(variables: Mapping, col: str, path: tuple[str, ...]) -> Mapping | None:
    node = variables.get(col)
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, Mapping) else None


def _own_vars(variables: Mapping, col: str, path: tuple[str, ...]) -> dict[str, Any]:
    node = _subtree(variables, col, path)
    if node is None:
        return {}
    # Sub-dicts are submodules; the Module's own variables are the rest.
    return {k: v for k, v in node.items() if not isinstance(v, Mapping)}


def _stats(tree: Any) -> tuple[int, int]:
    leaves = jax.tree_util.tree_leaves(tree)
    count = sum(int(np.prod(np.shape(x))) for x in leaves)
    size = sum(int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize for x in leaves
               if hasattr(x, "dtype"))
    return count, size


def _flops(fn: Callable, *args: Any) -> Any:
    try:
        cost = jax.jit(fn).lower(*args).compile().cost_analysis()
        if isinstance(cost, list):
            cost = cost[0] if cost else {}
        return int(cost.get("flops", 0))
    except Exception:  # noqa: BLE001 - a cost we cannot compute is shown as '-'
        return "-"


def _add_flops(call: _Call, variables: Any, vjp: bool) -> None:
    module = call.module.clone(parent=None)
    path = call.path
    sub = {col: node for col in variables
           if (node := _subtree(variables, col, path)) is not None}

    def fwd(v: Any, args: Any, kwargs: Any) -> Any:
        return module.apply(v, *args, method=call.method, mutable=True,
                            rngs={"params": jax.random.PRNGKey(0),
                                  "dropout": jax.random.PRNGKey(0)}, **kwargs)

    call.flops = _flops(fwd, sub, call.args, call.kwargs)
    if vjp:
        def back(v: Any, args: Any, kwargs: Any) -> Any:
            out, pull = jax.vjp(lambda vv, aa: fwd(vv, aa, kwargs), v, args)
            return pull(out)

        call.vjp_flops = _flops(back, sub, call.args, call.kwargs)


def _render(module: Any, rows: list[dict], collections: list[str], totals: dict,
            flop_cols: list[str], console_kwargs: Mapping | None,
            table_kwargs: Mapping, column_kwargs: Mapping) -> str:
    import rich.console
    import rich.table
    import rich.text

    grand = (sum(c for c, _ in totals.values()), sum(b for _, b in totals.values()))
    table = rich.table.Table(
        show_header=True, show_lines=True, show_footer=False,
        title=f"{type(module).__name__} Summary",
        caption=f"\nTotal Parameters: {_count_text(*grand)}",
        caption_justify="center", **dict(table_kwargs))
    base_cols = ["path", "module", "inputs", "outputs", *flop_cols]
    for name in base_cols + collections:
        table.add_column(name, overflow="ellipsis", **dict(column_kwargs))
    for row in rows:
        table.add_row(*[row.get(c, "") for c in base_cols + collections])
    total_row = [""] * len(base_cols)
    total_row[-1] = rich.text.Text("Total", justify="right")
    total_row += [_count_text(*totals[c]) if totals[c][0] else "" for c in collections]
    table.add_row(*total_row)
    kwargs = {"force_terminal": True, "force_jupyter": False, **dict(console_kwargs or {})}
    kwargs["file"] = io.StringIO()
    console = rich.console.Console(**kwargs)
    console.print(table)
    return "\n" + console.file.getvalue()


def tabulate(module: Any, rngs: Any, depth: int | None = None, show_repeated: bool = False,
             mutable: Any = INIT_MUTABLE, console_kwargs: Mapping[str, Any] | None = None,
             table_kwargs: Mapping[str, Any] = _EMPTY,
             column_kwargs: Mapping[str, Any] = _EMPTY, compute_flops: bool = False,
             compute_vjp_flops: bool = False, **kwargs: Any) -> Callable[..., str]:
    """A function ``(*args, **kwargs) -> str`` printing a summary table of ``module``.

    ``kwargs`` given here go to ``Module.init`` (e.g. ``method=``); the returned function's
    arguments go to the forward method. ``depth`` limits how deep submodules are listed
    (hidden submodules' counts go to their first shown ancestor, so rows still sum to the
    total); ``show_repeated`` lists every call, not only the first per Module;
    ``console_kwargs`` go to ``rich.console.Console``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         return x * self.param('w', nn.initializers.ones, (3,))
    >>> text = nn.tabulate(Foo(), jax.random.PRNGKey(0),
    ...                    console_kwargs={'force_terminal': False})(jnp.ones((2, 3)))
    >>> 'Total Parameters: 3 (12 B)' in text
    True
    """
    check_instance(module)
    method = kwargs.pop("method", None)
    if method is not None:
        resolve_method(module, method)  # fail early on a bad method

    def summarize(*args: Any, **call_kwargs: Any) -> str:
        calls, variables = _record_calls(module, rngs, args, {**kwargs, **call_kwargs},
                                         method, mutable)
        calls = _select(calls, show_repeated)
        collections = sorted(variables)
        shown = [c for c in calls if depth is None or len(c.path) <= depth]
        if compute_flops or compute_vjp_flops:
            for c in shown:
                _add_flops(c, variables, compute_vjp_flops)
        flop_cols = (["flops"] if compute_flops else []) + (
            ["vjp_flops"] if compute_vjp_flops else [])
        totals = {col: _stats(variables[col]) for col in collections}
        rows = []
        shown_paths = {c.path for c in shown}
        for c in shown:
            row = {
                "path": "/".join(c.path),
                "module": type(c.module).__name__ if c.method == "__call__"
                else f"{type(c.module).__name__}.{c.method}",
                "inputs": _value_text(c.args if c.args else c.kwargs),
                "outputs": _value_text(c.outputs),
            }
            if compute_flops:
                row["flops"] = str(c.flops)
            if compute_vjp_flops:
                row["vjp_flops"] = str(c.vjp_flops)
            first_of_path = all(o.path != c.path for o in shown[:shown.index(c)])
            for col in collections:
                own = _own_vars(variables, col, c.path)
                if not first_of_path:
                    continue
                count, size = _stats(own)
                if depth is not None and len(c.path) == depth:
                    node = _subtree(variables, col, c.path) or {}
                    count, size = _stats(node)  # hidden descendants fold in here
                elif depth is not None:
                    hidden = {k: v for k, v in (_subtree(variables, col, c.path) or {}).items()
                              if isinstance(v, Mapping) and c.path + (k,) not in shown_paths}
                    hc, hs = _stats(hidden)
                    count, size = count + hc, size + hs
                if count == 0:
                    continue
                lines = [f"{k}: {_leaf_text(v)}" for k, v in sorted(own.items())]
                row[col] = "\n".join([*lines, "", _count_text(count, size)])
            rows.append(row)
        return _render(module, rows, collections, totals, flop_cols, console_kwargs,
                       table_kwargs, column_kwargs)

    return summarize
