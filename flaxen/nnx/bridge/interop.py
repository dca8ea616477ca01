"""Pure NNX modules and Linen modules as submodules of a ``bridge.Module``.

``nnx_in_bridge_mdl(lambda rngs: Layer(..., rngs=rngs))`` builds the NNX module from the bound
parent's ``Rngs``; ``linen_in_bridge_mdl(linen_module)`` wraps a Linen module in ``ToNNX``.
Inside ``@compact`` either is attached to the parent (named ``name`` or ``<Class>_<n>``); in
``setup`` assign the result to an attribute yourself. In ``apply`` the stored variables are
loaded into the new submodule when it is attached.
"""

from __future__ import annotations

import typing as tp

from flaxen import linen
from flaxen.nnx.bridge import module as bridge_module
from flaxen.nnx.bridge import wrappers
from flaxen.nnx.module import Module
from flaxen.nnx.rnglib import Rngs


def _parent() -> tuple[bridge_module.ModuleStackEntry, bridge_module.Module,
                       bridge_module.Scope]:
    ctx = bridge_module.current_context()
    scope = None if ctx is None else ctx.module.scope
    if ctx is None or scope is None:
        raise ValueError(
            "nnx_in_bridge_mdl() / linen_in_bridge_mdl() are only used inside a bound "
            "bridge.Module (in setup or a @compact method during init/apply).")
    return ctx, ctx.module, scope


def _attach(ctx: bridge_module.ModuleStackEntry, parent: bridge_module.Module, module: Module,
            name: str | None, typ: type) -> None:
    if ctx.in_compact:
        if name is None:
            index = ctx.type_counter[typ]
            ctx.type_counter[typ] += 1
            name = f"{typ.__name__}_{index}"
        setattr(parent, name, module)


def nnx_in_bridge_mdl(factory: tp.Callable[[Rngs], Module], name: str | None = None) -> Module:
    """The NNX module ``factory(rngs)``, made a submodule of the running bridge module."""
    ctx, parent, scope = _parent()
    rngs = scope.rngs
    if not parent.is_initializing() and not list(wrappers._stream_names(rngs)):
        rngs = Rngs(0)  # apply without RNGs: the stored variables replace what this draws
    module = factory(rngs)
    _attach(ctx, parent, module, name, type(module))
    return module


def linen_in_bridge_mdl(linen_module: linen.Module, name: str | None = None) -> Module:
    """``ToNNX(linen_module)``, made a submodule of the running bridge module."""
    ctx, parent, scope = _parent()
    module = wrappers.ToNNX(linen_module, scope.rngs)
    _attach(ctx, parent, module, name, type(linen_module))
    return module
