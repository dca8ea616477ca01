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

from flaxen.core._rng import LazyRng
from flaxen.core.frozen_dict import unfreeze
from flaxen.linen import _summary_render as _text
from flaxen.linen._binding import INIT_MUTABLE, check_instance, resolve_method
from flaxen.linen._call_info import _CallInfo, _tabulate_context, abstract_tree
from flaxen.linen._state import context

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
_PLAIN_METHODS = ("__call__", "<lambda>")  # not named in the module column


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


def _record_calls(module: Any, rngs: Any, args: tuple, kwargs: dict, method: Any,
                  mutable: Any) -> tuple[list[_CallInfo], Any]:
    def run(rngs: Any, *a: Any) -> Any:
        return module.init(rngs, *a, method=method, mutable=mutable, **kwargs)

    with _tabulate_context():
        variables = jax.eval_shape(run, rngs, *args)
        calls = context.call_info_stack[-1].calls
    # records are appended as calls return; their index orders them as they started,
    # so rows follow call order with parents first
    return sorted(calls, key=lambda c: c.index), variables


# --- rows ----------------------------------------------------------------------------------


def _get_path_variables(path: tuple[str, ...], variables: Mapping) -> dict[str, Any]:
    """``{collection: subtree at path}`` (as plain nested dicts) for the collections that have
    ``path``; Flax's private helper, with its signature.

    >>> _get_path_variables(('a',), {'params': {'a': {'w': 1}}, 'stats': {'b': {}}})
    {'params': {'w': 1}}
    """
    out = {}
    for col, node in variables.items():
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                break
            node = node[part]
        else:
            out[col] = unfreeze(node)  # a copy: callers pop submodules out of it
    return out


def _get_module_variables(path: tuple[str, ...], variables: Mapping,
                          all_paths: set[tuple[str, ...]]
                          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(own, submodules)``: the variables at ``path`` split into the Module's own and those
    of its called submodules (the keys ``k`` with ``path + (k,)`` in ``all_paths``), both per
    collection; Flax's private helper, with its signature.

    >>> _get_module_variables((), {'params': {'w': 1, 'Dense_0': {'k': 2}}}, {('Dense_0',)})
    ({'params': {'w': 1}}, {'params': {'Dense_0': {'k': 2}}})
    """
    own = _get_path_variables(path, variables)
    submodules: dict[str, Any] = {col: {} for col in own}
    for col, node in own.items():
        if not isinstance(node, dict):
            continue  # a variable (not a dict of them) sits at the path itself
        for key in [k for k in node if path + (k,) in all_paths]:
            submodules[col][key] = node.pop(key)
    return own, submodules


def _rows(calls: list[_CallInfo], variables: Mapping, depth: int | None,
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
            own, _ = _get_module_variables(c.path, variables, called)
            # at the depth limit a row counts everything below it, so rows add up to the total
            folded = depth is not None and len(c.path) == depth
            counted = _get_path_variables(c.path, variables) if folded else own
        if depth is not None and len(c.path) > depth:
            continue  # a repeated call below the depth limit
        seen.add(c.path)
        rows.append(Row(c.path, c.module, c.method, _process_inputs(c.args, c.kwargs),
                        c.outputs, own, counted, _call=c))
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


def _call_flops(c: _CallInfo, rngs: Any, mutable: Any, fwd: bool, vjp: bool
                ) -> tuple[int | None, int | None]:
    """The forward / VJP FLOPs of re-running the call ``c`` (``None`` where not asked for).

    Each is XLA's cost analysis of the lowered ``Module.apply`` of ``c.module`` (on abstract
    variables from ``init``), the call's ``jax.ShapeDtypeStruct`` arguments as the inputs and
    every other argument fixed.
    """
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
    variables = jax.eval_shape(init, rngs, arrays)
    return (_cost(apply, variables, rngs, arrays) if fwd else None,
            _cost(apply_vjp, variables, rngs, arrays) if vjp else None)


def _add_flops(row: Row, rngs: Any, mutable: Any, fwd: bool, vjp: bool) -> None:
    """Sets ``row.flops`` / ``row.vjp_flops``; ``'-'`` where the call cannot be re-run."""
    try:
        row.flops, row.vjp_flops = _call_flops(row._call, rngs, mutable, fwd, vjp)
    except Exception:  # noqa: BLE001 - a cost we cannot compute is shown as '-'
        row.flops = row.vjp_flops = "-"


def _get_call_flops(c: _CallInfo, compute_flops: bool, compute_vjp_flops: bool
                    ) -> tuple[int, int]:
    """``(flops, vjp_flops)`` of the recorded call ``c``, ``-1`` for each not asked for.

    Flax's private helper, with its signature, for code that lists calls itself with
    ``flax.linen.module._tabulate_context``. The call runs again on the RNG streams and
    mutable filter it was recorded with; nothing is computed, only lowered.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> from flaxen.linen import module as module_lib
    >>> with module_lib._tabulate_context():
    ...     _ = jax.eval_shape(nn.Dense(4).init, jax.random.key(0), jnp.ones((2, 3)))
    ...     call, = module_lib._context.call_info_stack[-1].calls
    >>> _get_call_flops(call, True, False)
    (56, -1)
    """
    if not compute_flops and not compute_vjp_flops:
        return -1, -1
    # Flax's records hold each stream as a LazyRng; init only needs the key under it.
    keys = jax.tree_util.tree_map(lambda r: r.rng, c.rngs,
                                  is_leaf=lambda r: isinstance(r, LazyRng))
    # Arrays in a hand-made record become abstract inputs like recorded ones.
    call = dataclasses.replace(c, args=abstract_tree(c.args), kwargs=abstract_tree(c.kwargs))
    flops, vjp_flops = _call_flops(call, abstract_tree(keys), c.mutable, compute_flops,
                                   compute_vjp_flops)
    return (-1 if flops is None else flops), (-1 if vjp_flops is None else vjp_flops)


# --- the table -----------------------------------------------------------------------------


def _stats(tree: Any) -> tuple[int, int]:
    leaves = [x for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "size")]
    return (sum(int(x.size) for x in leaves),
            sum(int(x.size) * x.dtype.itemsize for x in leaves))


def _process_inputs(args: tuple, kwargs: dict) -> Any:
    """The inputs cell's value: the lone argument, the argument tuple, the keyword dict, or
    the arguments followed by the keyword dict (Flax's private name and signature).

    >>> _process_inputs((1,), {}), _process_inputs((1, 2), {'k': 3}), _process_inputs((), {})
    (1, (1, 2, {'k': 3}), ())
    """
    if args and kwargs:
        return (*args, kwargs)
    if args:
        return args[0] if len(args) == 1 else args
    return kwargs or ()


# Flax's private name for the size text of the table, e.g. ``'4.1 KB'``; code written for
# Flax formats byte counts with it.
_bytes_repr = _text.bytes_text


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
        streams = abstract_tree(rngs if isinstance(rngs, Mapping) else {"params": rngs})
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
from flaxen.core import DenyList, meta  # noqa: E402, F401
from flaxen.core.scope import FrozenVariableDict  # noqa: E402, F401
from flaxen.linen import module as module_lib  # noqa: E402, F401
from flaxen.typing import (  # noqa: E402, F401
    Array,
    LogicalNames,
    MutableVariableDict,
    PRNGKey,
    RNGSequences,
)
