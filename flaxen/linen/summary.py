"""Module summaries: ``nn.tabulate`` / ``Module.tabulate`` and ``Module.module_paths``.

Both run ``Module.init`` under ``jax.eval_shape`` (no FLOPs spent, no memory allocated)
with a method interceptor that records every Module call: its path, class, inputs and
outputs. The table has one row per call (the first call of each Module unless
``show_repeated``), the Module's own variables per collection with their count and byte
size, a ``Total`` footer and a ``Total Parameters`` caption, rendered with ``rich`` (the
cell text is built in :mod:`flaxen.linen._summary_render`).

FLOPs are XLA's cost analysis of the *lowered* (unoptimised) computation of one call:
``Module.apply`` of a fresh copy of the Module on its own abstract variables, with the
call's array arguments and the tabulated RNG streams as inputs and every other argument
(``train=False``, sizes, ...) fixed, and for ``vjp_flops`` that of ``jax.vjp`` of it
pulled back with its own output.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

import jax

from flaxen.linen import _summary_render as _text
from flaxen.linen._binding import INIT_MUTABLE, check_instance, resolve_method
from flaxen.linen._interception import intercept_methods

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
_PLAIN_METHODS = ("__call__", "<lambda>")  # not named in the module column


@dataclasses.dataclass
class _Call:
    path: tuple[str, ...]
    module: Any
    method: str
    args: Any
    kwargs: Any
    outputs: Any = None


@dataclasses.dataclass
class Row:
    """One row of a summary :class:`Table`: one call of one Module.

    ``inputs``/``outputs`` hold ``jax.ShapeDtypeStruct`` s in place of arrays (the lone
    argument, the argument tuple, or the arguments followed by the keyword dict);
    ``module_variables`` are the Module's own variables per collection (submodules left
    out) and ``counted_variables`` what the row counts: the same, or, at the ``depth``
    limit, everything below it. ``flops``/``vjp_flops`` are ``None`` unless asked for.
    """

    path: tuple[str, ...]
    module_copy: Any
    method: str
    inputs: Any
    outputs: Any
    module_variables: dict[str, Any]
    counted_variables: dict[str, Any]
    flops: Any = None
    vjp_flops: Any = None
    _call: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def module_type(self) -> type:
        return type(self.module_copy)

    def size_and_bytes(self, collections: list[str]) -> dict[str, tuple[int, int]]:
        """``{collection: (parameter count, bytes)}`` of what this row counts."""
        return {col: _stats(self.counted_variables.get(col, {})) for col in collections}


class Table(list):
    """The rows of a summary, in call order, with the ``module`` and its ``collections``."""

    def __init__(self, module: Any, collections: list[str], rows: list[Row]) -> None:
        super().__init__(rows)
        self.module = module
        self.collections = collections


@dataclasses.dataclass
class _ObjectRepresentation:
    """Wraps a non-array value in a row's inputs/outputs (kept for Flax compatibility)."""

    obj: Any


def _abstract(tree: Any) -> Any:
    def leaf(x: Any) -> Any:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x

    return jax.tree_util.tree_map(leaf, tree)


def _record_calls(module: Any, rngs: Any, args: tuple, kwargs: dict, method: Any,
                  mutable: Any) -> tuple[list[_Call], Any]:
    calls: list[_Call] = []

    def recorder(next_fun, a, k, context):
        mod = context.module
        if context.method_name == "setup" or mod.scope is None:
            return next_fun(*a, **k)
        call = _Call(tuple(mod.scope.path), mod.clone(parent=None), context.method_name,
                     _abstract(a), _abstract(k))
        calls.append(call)  # before running: rows follow call order, parents first
        out = next_fun(*a, **k)
        call.outputs = _abstract(out)
        return out

    def run(rngs: Any, *a: Any) -> Any:
        with intercept_methods(recorder):
            return module.init(rngs, *a, method=method, mutable=mutable, **kwargs)

    variables = jax.eval_shape(run, rngs, *args)
    return calls, variables


# --- rows ----------------------------------------------------------------------------------


def _at_path(variables: Mapping, path: tuple[str, ...]) -> dict[str, Any]:
    """``{collection: subtree at path}`` for the collections that have ``path``."""
    out = {}
    for col, node in variables.items():
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                break
            node = node[part]
        else:
            out[col] = dict(node) if isinstance(node, Mapping) else node
    return out


def _rows(calls: list[_Call], variables: Mapping, depth: int | None,
          show_repeated: bool) -> list[Row]:
    called = {c.path for c in calls}
    seen: set[tuple[str, ...]] = set()
    rows = []
    for c in calls:
        if c.path in seen or not hasattr(c.module, c.method):
            if not show_repeated:
                continue
            own, counted = {}, {}  # type: ignore[var-annotated] # repeated calls: none shown
        elif depth is not None and len(c.path) > depth:
            continue
        else:
            own = {col: {k: v for k, v in node.items() if c.path + (k,) not in called}
                   for col, node in _at_path(variables, c.path).items()}
            # at the depth limit a row counts everything below it, so rows add up to the total
            folded = depth is not None and len(c.path) == depth
            counted = _at_path(variables, c.path) if folded else own
        if depth is not None and len(c.path) > depth:
            continue  # a repeated call below the depth limit
        seen.add(c.path)
        rows.append(Row(c.path, c.module, c.method, _inputs(c.args, c.kwargs), c.outputs,
                        own, counted, _call=c))
    return rows


def module_paths(module: Any, rngs: Any, *args: Any, show_repeated: bool = False,
                 mutable: Any = INIT_MUTABLE, method: Any = None, **kwargs: Any
                 ) -> dict[str, Any]:
    """``{'path/to/module': module}`` for every Module called during ``init``."""
    check_instance(module)
    calls, variables = _record_calls(module, rngs, args, kwargs, method, mutable)
    return {"/".join(r.path): r.module_copy
            for r in _rows(calls, variables, None, show_repeated)}


# --- FLOPs ---------------------------------------------------------------------------------


def _cost(fn: Callable, *args: Any) -> int:
    cost = jax.jit(fn).lower(*args).cost_analysis()
    if isinstance(cost, list):
        cost = cost[0] if cost else None
    return int(cost["flops"]) if cost and "flops" in cost else 0


def _add_flops(row: Row, rngs: Any, mutable: Any, fwd: bool, vjp: bool) -> None:
    """Sets ``row.flops`` / ``row.vjp_flops``; ``'-'`` where the call cannot be re-run."""
    c = row._call
    leaves, treedef = jax.tree_util.tree_flatten((c.args, c.kwargs))
    dynamic = [i for i, x in enumerate(leaves) if isinstance(x, jax.ShapeDtypeStruct)]

    def inputs(arrays: list) -> tuple[tuple, dict]:
        filled = list(leaves)
        for i, x in zip(dynamic, arrays):
            filled[i] = x
        return treedef.unflatten(filled)  # type: ignore[attr-defined]

    def init(rngs: Any, arrays: list) -> Any:
        a, k = inputs(arrays)
        return c.module.init(rngs, *a, method=c.method, mutable=mutable, **k)

    def apply(variables: Any, rngs: Any, arrays: list) -> Any:
        a, k = inputs(arrays)
        return c.module.apply(variables, *a, rngs=rngs, method=c.method, mutable=mutable, **k)

    def apply_vjp(variables: Any, rngs: Any, arrays: list) -> Any:
        out, pullback = jax.vjp(apply, variables, rngs, arrays)
        return pullback(out)

    arrays = [leaves[i] for i in dynamic]
    try:
        variables = jax.eval_shape(init, rngs, arrays)
        row.flops = _cost(apply, variables, rngs, arrays) if fwd else None
        row.vjp_flops = _cost(apply_vjp, variables, rngs, arrays) if vjp else None
    except Exception:  # noqa: BLE001 - a cost we cannot compute is shown as '-'
        row.flops = row.vjp_flops = "-"


# --- the table -----------------------------------------------------------------------------


def _stats(tree: Any) -> tuple[int, int]:
    leaves = [x for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "size")]
    return (sum(int(x.size) for x in leaves),
            sum(int(x.size) * x.dtype.itemsize for x in leaves))


def _inputs(args: tuple, kwargs: dict) -> Any:
    """The inputs cell's value: the lone argument, the argument tuple, the keyword dict, or
    the arguments followed by the keyword dict."""
    if args and kwargs:
        return (*args, kwargs)
    if args:
        return args[0] if len(args) == 1 else args
    return kwargs or ()


def _collections(variables: Mapping) -> list[str]:
    """``params`` first, then the other collections in the variables' order."""
    return sorted(variables, key=lambda col: col != "params")


def _table(table: Table, flop_cols: list[str], console_kwargs: Mapping | None,
           table_kwargs: Mapping, column_kwargs: Mapping) -> str:
    collections = table.collections
    totals = {col: [0, 0] for col in collections}
    cells = []
    for r in table:
        name = type(r.module_copy).__name__
        if r.method not in _PLAIN_METHODS:
            name += f" [dim]({r.method})[/dim]"
        line = ["/".join(r.path), name, _text.value_markup(r.inputs),
                _text.value_markup(r.outputs)]
        line += [_text.value_markup(getattr(r, col)) for col in flop_cols]
        for col in collections:
            count, size = _stats(r.counted_variables.get(col, {}))
            totals[col][0] += count
            totals[col][1] += size
            own = (_text.value_markup(r.module_variables[col])
                   if col in r.module_variables else "")
            count_cell = f"[bold]{_text.count_markup(count, size)}[/bold]"
            line.append(f"{own}\n\n{count_cell}" if own else count_cell)
        cells.append(line)
    columns = ["path", "module", "inputs", "outputs", *flop_cols]
    footers: list[Any] = [""] * (len(columns) - 1) + [_text.right_text("Total")]
    footers += [_text.count_markup(*totals[col]) for col in collections]
    grand = [sum(t[i] for t in totals.values()) for i in (0, 1)]
    return _text.render(f"{type(table.module).__name__} Summary", columns + collections, cells,
                        footers, f"\nTotal Parameters: {_text.count_markup(*grand)}",
                        console_kwargs, table_kwargs, column_kwargs)


def _module_table(module: Any, rngs: Any, args: tuple, kwargs: dict, method: Any,
                  mutable: Any, depth: int | None, show_repeated: bool, compute_flops: bool,
                  compute_vjp_flops: bool) -> Table:
    calls, variables = _record_calls(module, rngs, args, kwargs, method, mutable)
    rows = _rows(calls, variables, depth, show_repeated)
    if compute_flops or compute_vjp_flops:
        streams = _abstract(rngs if isinstance(rngs, Mapping) else {"params": rngs})
        for r in rows:
            _add_flops(r, streams, mutable, compute_flops, compute_vjp_flops)
    return Table(module, _collections(variables), rows)


def _get_module_table(module: Any, depth: int | None, show_repeated: bool,
                      compute_flops: bool = False,
                      compute_vjp_flops: bool = False) -> Callable[..., Table]:
    """A function taking ``Module.init``'s arguments (``rngs, *args, method=, mutable=,
    **kwargs``) and returning the summary :class:`Table` (what :func:`tabulate` renders)."""
    check_instance(module)

    def get_table(rngs: Any, *args: Any, method: Any = None, mutable: Any = INIT_MUTABLE,
                  **kwargs: Any) -> Table:
        if method is not None:
            resolve_method(module, method)
        return _module_table(module, rngs, args, kwargs, method, mutable, depth,
                             show_repeated, compute_flops, compute_vjp_flops)

    return get_table


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
    ``console_kwargs`` go to ``rich.console.Console``, ``table_kwargs`` to
    ``rich.table.Table`` and ``column_kwargs`` to ``Table.add_column``;
    ``compute_flops`` / ``compute_vjp_flops`` add columns with each call's estimated
    forward / backward FLOPs. Collections are listed ``params`` first.

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
        table = _module_table(module, rngs, args, {**kwargs, **call_kwargs}, method, mutable,
                              depth, show_repeated, compute_flops, compute_vjp_flops)
        flop_cols = ["flops"] * compute_flops + ["vjp_flops"] * compute_vjp_flops
        return _table(table, flop_cols, console_kwargs, table_kwargs, column_kwargs)

    return summarize

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen.core import DenyList, meta, unfreeze  # noqa: E402, F401
from flaxen.core._rng import LazyRng  # noqa: E402, F401
from flaxen.core.scope import FrozenVariableDict  # noqa: E402, F401
from flaxen.linen import module as module_lib  # noqa: E402, F401
