"""Text of the ``tabulate`` table: cell values as rich markup and the rich table itself.

Every cell is a rich *markup* string. Arrays show as ``float32[2,3]`` with the dtype dimmed;
Python scalars and other objects as their ``repr``. Containers are written by PyYAML in
block style (sorted mapping keys, ``- item`` sequence entries), with quotes dropped, as Flax
prints them.
"""

from __future__ import annotations

import dataclasses
import enum
import io
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from flaxen.core import meta

# --- leaves and structure ------------------------------------------------------------------


def array_markup(shape: Sequence[int], dtype: Any) -> str:
    return f"[dim]{dtype}[/dim][{','.join(str(d) for d in shape)}]"


def _leaf_markup(x: Any) -> str:
    if x is None or isinstance(x, (bool, int, float)):
        return repr(x)
    if isinstance(x, meta.Partitioned):
        return f"{_leaf_markup(x.value)} [dim]P[/dim]{x.names}"
    try:
        return array_markup(jnp.shape(x), jnp.result_type(x))
    except Exception:  # noqa: BLE001 - not array-like: show the object itself
        return repr(x)


def _is_leaf(x: Any) -> bool:
    return x is None or isinstance(x, meta.Partitioned)


def _normalize(tree: Any) -> Any:
    """Leaves -> markup strings; mappings and dataclasses -> key-sorted dicts; sequences ->
    tuples (the shapes the YAML writer knows)."""
    tree = jax.tree_util.tree_map(_leaf_markup, tree, is_leaf=_is_leaf)

    def norm(x: Any) -> Any:
        if isinstance(x, enum.Enum):  # before str: a str-valued enum prints as its value
            return norm(x.value)
        if isinstance(x, str):
            return x
        if isinstance(x, (tuple, list)):
            return tuple(norm(v) for v in x)
        if isinstance(x, Mapping):
            items = {norm(k): norm(v) for k, v in x.items()}
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            items = {f.name: norm(getattr(x, f.name)) for f in dataclasses.fields(x)}
        else:
            return repr(x)
        try:
            return dict(sorted(items.items()))
        except TypeError:  # keys of mixed types keep their order
            return items

    return norm(tree)


# --- YAML block layout ---------------------------------------------------------------------


def layout(node: Any) -> str:
    """Strings, key-sorted dicts and tuples of them as PyYAML's block style, quotes dropped.

    >>> print(layout({'a': ('x', 'y'), 'b': 'z'}))
    a:
    - x
    - y
    b: z
    """
    if node is None or (hasattr(node, "__len__") and len(node) == 0):
        return ""
    import yaml

    text = yaml.safe_dump(node, default_flow_style=False, indent=2, sort_keys=False)
    return text.replace("\n...", "").replace("'", "").strip()


def value_markup(tree: Any) -> str:
    """One cell: inputs, outputs, flops or a Module's variables of one collection."""
    return layout(_normalize(tree))


# --- sizes ---------------------------------------------------------------------------------


def bytes_text(num_bytes: int) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if num_bytes > scale:
            return f"{num_bytes / scale:,.1f} {unit}"
    return f"{num_bytes:,} B"


def count_markup(count: int, num_bytes: int) -> str:
    """``'1,234 (4.9 KB)'`` with the size dimmed; ``''`` for nothing."""
    return f"{count:,} [dim]({bytes_text(num_bytes)})[/dim]" if count else ""


# --- the table -----------------------------------------------------------------------------


def render(title: str, columns: list[str], rows: list[list[str]], footers: list[Any],
           caption: str, console_kwargs: Mapping[str, Any] | None,
           table_kwargs: Mapping[str, Any], column_kwargs: Mapping[str, Any]) -> str:
    """The table as ``rich`` prints it; cells, footers and the caption are markup (or rich
    renderables), the caption bold."""
    import rich.console
    import rich.table

    table = rich.table.Table(show_header=True, show_lines=True, show_footer=True, title=title,
                             **dict(table_kwargs))
    for name, footer in zip(columns, footers):
        table.add_column(name, **dict(column_kwargs))
        table.columns[-1].footer = footer
    for row in rows:
        table.add_row(*row)
    table.caption_style = "bold"
    table.caption = caption
    out = io.StringIO()
    console = rich.console.Console(
        file=out, **{"force_terminal": True, "force_jupyter": False,
                     **dict(console_kwargs or {})})
    console.print(table)
    return "\n" + out.getvalue() + "\n"


def right_text(markup: str) -> Any:
    import rich.text

    return rich.text.Text.from_markup(markup, justify="right")
