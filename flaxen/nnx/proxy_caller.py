"""Recorded attribute/item paths and proxies that call a function with them.

``DelayedAccessor`` remembers a chain of ``.name`` and ``[key]`` lookups and replays it on an
object later; ``CallableProxy`` builds such a chain as you write ``proxy.a.b[0](...)`` and
then calls its function with the chain and the arguments. ``GraphDef.apply`` and
``nnx.call`` return this kind of object (``ApplyCaller`` is its static type).

>>> from flaxen.nnx.proxy_caller import CallableProxy, DelayedAccessor
>>> class Model:
...     config = {"depth": 3}
>>> DelayedAccessor().config["depth"](Model())
3
>>> proxy = CallableProxy(lambda accessor, *args: (accessor.actions, args))
>>> proxy.encoder.layers[1]("x")[1]
('x',)
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax

A = tp.TypeVar("A", covariant=True)


@dataclasses.dataclass(frozen=True)
class GetItem:
    """One ``obj[key]`` step of a :class:`DelayedAccessor`.

    >>> GetItem(0).key
    0
    """

    key: tp.Any


@dataclasses.dataclass(frozen=True)
class GetAttr:
    """One ``obj.name`` step of a :class:`DelayedAccessor`.

    >>> GetAttr("weight").name
    'weight'
    """

    name: str


@dataclasses.dataclass(frozen=True)
class DelayedAccessor:
    """A chain of attribute and item lookups, replayed on an object by calling it.

    Every ``.name`` or ``[key]`` on an accessor returns a longer one (accessors are frozen and
    hashable, and static under JAX transforms: no leaves).

    >>> acc = DelayedAccessor().layers[0]
    >>> acc.actions
    (GetAttr(name='layers'), GetItem(key=0))
    >>> acc(type("M", (), {"layers": ["first"]})())
    'first'
    """

    actions: tuple[GetItem | GetAttr, ...] = ()

    def __call__(self, x: tp.Any) -> tp.Any:
        for step in self.actions:
            x = x[step.key] if isinstance(step, GetItem) else getattr(x, step.name)
        return x

    def __getattr__(self, name: str) -> DelayedAccessor:
        if name.startswith("__"):
            # dunder probes (copy, pickle, dataclasses) must not grow the chain
            raise AttributeError(name)
        return DelayedAccessor((*self.actions, GetAttr(name)))

    def __getitem__(self, key: tp.Any) -> DelayedAccessor:
        return DelayedAccessor((*self.actions, GetItem(key)))


jax.tree_util.register_static(DelayedAccessor)


class _AccessorCall(tp.Protocol):
    def __call__(self, accessor: DelayedAccessor, /, *args: tp.Any, **kwargs: tp.Any
                 ) -> tp.Any: ...


class CallableProxy:
    """Collects ``.name`` / ``[key]`` steps, then calls ``callable(accessor, *args, **kw)``.

    >>> seen = CallableProxy(lambda acc, x: [type(s).__name__ for s in acc.actions] + [x])
    >>> seen.block["mlp"](1)
    ['GetAttr', 'GetItem', 1]
    """

    def __init__(self, callable: _AccessorCall, accessor: DelayedAccessor | None = None):  # noqa: A002
        self._callable = callable
        self._accessor = DelayedAccessor() if accessor is None else accessor

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return self._callable(self._accessor, *args, **kwargs)

    def __getattr__(self, name: str) -> CallableProxy:
        if name.startswith("__"):
            raise AttributeError(name)
        return CallableProxy(self._callable, getattr(self._accessor, name))

    def __getitem__(self, key: tp.Any) -> CallableProxy:
        return CallableProxy(self._callable, self._accessor[key])


class ApplyCaller(tp.Protocol, tp.Generic[A]):
    """The static type of a proxy whose calls return ``(output, new_state)``.

    >>> from flaxen import nnx
    >>> caller: ApplyCaller[nnx.State]  # annotations only
    """

    def __getattr__(self, name: str, /) -> ApplyCaller[A]: ...

    def __getitem__(self, name: tp.Any, /) -> ApplyCaller[A]: ...

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tuple[tp.Any, A]: ...


__all__ = ["ApplyCaller", "CallableProxy", "DelayedAccessor", "GetAttr", "GetItem"]
