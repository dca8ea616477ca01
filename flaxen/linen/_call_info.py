"""Call records of Module methods, for summaries (Flax's ``_CallInfo`` / ``_tabulate_context``).

Inside :func:`_tabulate_context` every method call of a bound Module (``setup`` excepted) is
recorded as a :class:`_CallInfo` in ``context.call_info_stack[-1].calls``: its index in call
order (taken when the call starts, so a parent sorts before its children), the Module's path,
an unbound copy of the Module, its RNG streams and mutable filter, the method name, and the
arguments and outputs with every array replaced by a ``jax.ShapeDtypeStruct``. ``tabulate``
builds its rows from these records, and so can code written for Flax, which reaches for
``flax.linen.module._tabulate_context`` and ``_context.call_info_stack`` to list calls or count
FLOPs (``flax.linen.summary._get_call_flops``).

The records come from a method interceptor (:mod:`flaxen.linen._interception`), so Module
calls pay nothing outside the context.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> with _tabulate_context():
...     _ = nn.Dense(2).init(jax.random.key(0), jnp.ones((1, 3)))
...     calls = context.call_info_stack[-1].calls
>>> [(c.index, c.path, c.method, c.outputs.shape) for c in calls]
[(0, (), '__call__', (1, 2))]
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax

from flaxen.core._rng import LazyRng
from flaxen.linen._interception import intercept_methods
from flaxen.linen._state import InterceptorContext, context


@dataclasses.dataclass
class _CallInfo:
    """One recorded Module method call (fields as in Flax)."""

    index: int
    path: tuple[str, ...]
    module: Any
    rngs: dict[str, Any] | None
    mutable: Any
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: Any


@dataclasses.dataclass
class _CallInfoContext(threading.local):
    """The calls recorded by one :func:`_tabulate_context` and the next call index."""

    index: int
    calls: list[_CallInfo]

    def get_call_index(self) -> int:
        index = self.index
        self.index += 1
        return index


def abstract_tree(tree: Any) -> Any:
    """``tree`` with every array-like leaf (anything with ``shape`` and ``dtype``) replaced by
    a ``jax.ShapeDtypeStruct``; other leaves are kept as they are.

    Records hold no arrays and no tracers: they outlive the ``init`` trace they come from.
    """

    def leaf(x: Any) -> Any:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x

    return jax.tree_util.tree_map(leaf, tree)


def _abstract_rngs(rngs: dict[str, Any]) -> dict[str, Any]:
    # Keep each stream's LazyRng (its name suffix) but with the key abstract, so a record
    # made inside eval_shape carries no tracer out of it.
    return {name: LazyRng(abstract_tree(r.rng), r.suffix) if isinstance(r, LazyRng)
            else abstract_tree(r) for name, r in rngs.items()}


def _record_call(next_fun: Callable[..., Any], args: tuple, kwargs: dict,
                 ctx: InterceptorContext) -> Any:
    module = ctx.module
    stack = context.call_info_stack
    if not stack or ctx.method_name == "setup" or module.scope is None:
        return next_fun(*args, **kwargs)
    frame = stack[-1]
    index = frame.get_call_index()  # before the call: parents sort before their children
    out = next_fun(*args, **kwargs)
    scope = module.scope
    in_args, in_kwargs, outputs = abstract_tree((args, kwargs, out))
    frame.calls.append(_CallInfo(
        index, tuple(scope.path), module.clone(parent=None), _abstract_rngs(scope.rngs),
        scope.mutable, ctx.method_name, in_args, in_kwargs, outputs))
    return out


@contextlib.contextmanager
def _tabulate_context() -> Iterator[None]:
    """Records Module method calls made inside the ``with`` block (see the module docstring).

    Contexts nest: calls go to the innermost one only.
    """
    stack = context.call_info_stack
    outermost = not stack
    stack.append(_CallInfoContext(0, []))
    try:
        if outermost:  # one interceptor serves every nested context
            with intercept_methods(_record_call):
                yield
        else:
            yield
    finally:
        stack.pop()

