"""``Module`` as Flax 0.8.3's NNX had it (``flax.experimental.nnx.Module``).

Today's :class:`flaxen.nnx.Module` is a JAX pytree that checks which attributes are data; the
0.8.3 one is not a pytree (unless declared with ``experimental_pytree=True``), accepts any
attribute, runs ``setup`` after a dataclass ``__init__`` and has ``split``,
``iter_modules`` and ``set_attributes`` methods. It subclasses today's Module, so every
engine function and transform treats it as a Module.

>>> from flaxen.experimental import nnx
>>> class Block(nnx.Module):
...     def __init__(self, rngs):
...         self.layers = [nnx.Linear(2, 2, rngs=rngs)]  # a plain list: no data check
>>> graphdef, state = Block(nnx.Rngs(0)).split()
>>> sorted(dict(state.flat_state()))[0]
('layers', 0, 'bias')
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.errors import SetAttributesNotFoundError
from flaxen.experimental.nnx import filterlib as _filters
from flaxen.experimental.nnx.graph import merge, split
from flaxen.nnx import filterlib
from flaxen.nnx import module as _today
from flaxen.nnx._graph_ops import iter_graph
from flaxen.nnx.module import Module

__all__ = ["Dict", "LegacyModule", "List", "Sequential"]


class LegacyModule(Module, pytree=False):
    """``Module`` as Flax 0.8.3 had it (the ``flaxen.experimental.nnx`` face): not a JAX
    pytree unless declared with ``experimental_pytree=True``, no data/static checks, and a
    ``split`` method."""

    _nnx_base_module = True  # capture wraps methods of subclasses only
    _nnx_lenient_trace = True  # 0.8.3: mutable under jax.grad / jax.vmap of its own level

    def __init_subclass__(cls, experimental_pytree: bool = False, **kwargs: tp.Any) -> None:
        kwargs.setdefault("pytree", False)
        super().__init_subclass__(**kwargs)
        if experimental_pytree:
            jax.tree_util.register_pytree_with_keys(
                cls, _module_flatten_with_keys,
                _module_unflatten,  # type: ignore[arg-type]  # jax passes children as a tuple
                flatten_func=_module_flatten)

    def __post_init__(self) -> None:
        # a dataclass Module runs ``setup`` (when it defines one) after its generated __init__
        setup = getattr(self, "setup", None)
        if callable(setup):
            setup()

    def split(self, *filters: filterlib.Filter) -> tuple:
        """``nnx.split(self, *filters)`` (the spec's method form)."""
        return split(self, *filters)

    def iter_modules(self) -> tp.Iterator[tuple[tuple, Module]]:
        """``(path, module)`` for every Module reachable from this one (itself first)."""
        for path, obj in iter_graph(self):
            if isinstance(obj, Module):
                yield path, obj

    def set_attributes(self, *filters: filterlib.Filter, raise_if_not_found: bool = True,
                       **attributes: tp.Any) -> None:
        """Sets ``attributes`` on every submodule (matching ``filters``) that has them."""
        preds = [_filters.to_predicate(f) for f in filters]
        remaining = set(attributes)
        for path, module in self.iter_modules():
            if preds and not any(p(path, module) for p in preds):
                continue
            for name, value in attributes.items():
                if name in module.__dict__:
                    setattr(module, name, value)
                    remaining.discard(name)
        if remaining and raise_if_not_found:
            raise SetAttributesNotFoundError(
                "", f"set_attributes on {type(self).__name__}: Could not find at least one "
                f"instance of the following attributes: {remaining}")


def _module_flatten(m: Module) -> tuple[tuple, tp.Any]:
    gd, st = split(m)
    return (st,), gd


def _module_flatten_with_keys(m: Module) -> tuple[tuple, tp.Any]:
    gd, st = split(m)
    return ((jax.tree_util.GetAttrKey("state"), st),), gd


def _module_unflatten(gd: tp.Any, children: tp.Sequence[tp.Any]) -> Module:
    return merge(gd, children[0])


# The 0.8.3 containers: today's, with 0.8.3's trace rule (see GraphNode._nnx_lenient_trace)
# and its iter_modules method (itself first, no deprecation: today's is an alias that warns).
class Dict(_today.Dict):
    _nnx_lenient_trace = True
    iter_modules = LegacyModule.iter_modules


class List(_today.List):
    _nnx_lenient_trace = True
    iter_modules = LegacyModule.iter_modules


class Sequential(_today.Sequential):
    _nnx_lenient_trace = True
    iter_modules = LegacyModule.iter_modules
