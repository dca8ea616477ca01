"""Module summaries: ``nn.tabulate`` / ``Module.tabulate`` and ``Module.module_paths``."""

from __future__ import annotations

from typing import Any


def tabulate(module: Any, rngs: Any, **kwargs: Any) -> Any:
    raise NotImplementedError


def module_paths(module: Any, rngs: Any, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError
