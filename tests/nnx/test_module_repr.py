"""A Module's repr opens with how many values its Variables hold, by kind and in all."""

from __future__ import annotations

import re

import numpy as np

from flaxen import nnx


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(4, 6, rngs=rngs)
        self.bn = nnx.BatchNorm(6, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)
        self.again = self.linear  # shared: counted once


def test_first_line_counts_each_kind_once():
    block = Block(nnx.Rngs(0))
    head = repr(block).splitlines()[0]
    leaves = nnx.to_flat_state(nnx.state(block)).leaves
    params = sum(int(np.prod(x.shape)) for x in leaves if isinstance(x, nnx.Param))
    stats = sum(int(np.prod(x.shape)) for x in leaves if isinstance(x, nnx.BatchStat))
    assert params == 4 * 6 + 6 + 2 * 6
    assert head.startswith("Block( # ")
    assert f"Param: {params}" in head and f"BatchStat: {stats}" in head
    total = int(re.search(r"Total: ([\d,]+)", head).group(1).replace(",", ""))
    assert total == sum(int(np.prod(x.shape)) for x in leaves)
    assert "KB" in head or " B)" in head


def test_nested_modules_and_variables_have_summaries_empty_modules_none():
    class Empty(nnx.Module):
        pass

    text = repr(Block(nnx.Rngs(0)))
    # as in Flax 0.12.8: every module and Variable line has one (13 here); the shared
    # `again` is shown as `Linear(...)` without one
    assert sum("# " in line for line in text.splitlines()) == 13
    assert "  again=Linear(...)" in text.splitlines()
    assert repr(Empty()) == "Empty()"


def test_view_info_lists_typed_arguments_with_their_docstring_text():
    class Scaled(nnx.Module):
        def set_view(self, factor: float | None = None, *, loud: bool = False, **rest) -> dict:
            """Switches modes.

            Args:
              factor: how much to scale.
                Applies to every call.
              loud: whether to print.

            Returns:
              the unused keywords.
            """
            return rest

    info = nnx.view_info(Scaled())
    assert info.splitlines() == [
        f"{Scaled.__qualname__}:",
        "  factor: float | None = None",
        "    how much to scale.",
        "    Applies to every call.",
        "  loud: bool = False",
        "    whether to print.",
    ]
