"""Frozen dataclasses that are JAX pytrees: ``flax.struct.dataclass``, ``field``, ``PyTreeNode``.

Fields are pytree children (leaves for ``jit``/``vmap``/``grad``) unless
declared with ``field(pytree_node=False)``, which makes them static: kept in the
tree definition, never traced. Instances are immutable; ``.replace(**changes)``
returns an updated copy. Each class is also registered for
:mod:`flaxen.serialization`, whose state dict holds only the pytree fields.

>>> import jax
>>> from flaxen import struct
>>> @struct.dataclass
... class Model:
...     weight: float
...     name: str = struct.field(pytree_node=False, default='m')
>>> m = jax.tree_util.tree_map(lambda w: w * 2, Model(1.5))
>>> m.weight, m.name, m.replace(weight=0.0).weight
(3.0, 'm', 0.0)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar, overload

import jax
from typing_extensions import dataclass_transform

from flaxen import serialization

__all__ = ["PyTreeNode", "dataclass", "field"]

_T = TypeVar("_T")
TNode = TypeVar("TNode", bound="PyTreeNode")


def field(pytree_node: bool = True, *, metadata: dict | None = None, **kwargs: Any) -> Any:
    """A ``dataclasses.field`` that also says whether the field is a pytree child.

    ``pytree_node=False`` makes the field static (part of the tree definition,
    untouched by JAX transforms and left out of state dicts). Other keyword
    arguments (``default``, ``default_factory``, ``kw_only``, ...) go to
    ``dataclasses.field``.

    >>> field(pytree_node=False, default=0).metadata['pytree_node']
    False
    """
    return dataclasses.field(metadata={**(metadata or {}), "pytree_node": pytree_node}, **kwargs)


def _replace(self: Any, **updates: Any) -> Any:
    """Returns a copy with the given fields replaced (the instance itself is frozen)."""
    return dataclasses.replace(self, **updates)


@overload
def dataclass(clz: _T, **kwargs: Any) -> _T: ...


@overload
def dataclass(clz: None = None, **kwargs: Any) -> Callable[[_T], _T]: ...


@dataclass_transform(field_specifiers=(field,))  # type: ignore[literal-required]
def dataclass(clz: _T | None = None, **kwargs: Any) -> _T | Callable[[_T], _T]:
    """Turns ``clz`` into a frozen dataclass registered as a JAX pytree with keys.

    Keyword arguments (``kw_only``, ``eq``, ``order``, ``frozen``, ...) go to
    ``dataclasses.dataclass``; ``frozen`` defaults to True (``frozen=False`` gives a
    mutable class that is still a pytree). Use it bare
    (``@dataclass``) or with arguments (``@dataclass(kw_only=True)``). Applying it
    to a class that already is a struct dataclass returns the class unchanged.

    Constructor arguments must map 1:1 onto fields, because JAX rebuilds
    instances by calling the constructor; put "smart constructors" in a
    ``create`` classmethod.

    >>> @dataclass(kw_only=True)
    ... class Point:
    ...     x: float = 0.0
    ...     y: float
    >>> Point(y=2.0)
    Point(x=0.0, y=2.0)
    """
    if clz is None:
        return functools.partial(dataclass, **kwargs)  # type: ignore[return-value]
    if "_flax_dataclass" in clz.__dict__:
        return clz

    kwargs.setdefault("frozen", True)
    target: Any = clz
    data_clz: Any = dataclasses.dataclass(**kwargs)(target)

    data_fields: list[str] = []
    meta_fields: list[str] = []
    for f in dataclasses.fields(data_clz):
        if not f.init:
            # Recomputed by the constructor (e.g. in __post_init__) on unflatten.
            continue
        if f.metadata.get("pytree_node", True):
            data_fields.append(f.name)
        else:
            meta_fields.append(f.name)

    data_clz.replace = _replace
    jax.tree_util.register_dataclass(data_clz, data_fields, meta_fields)

    def to_state_dict(x: Any) -> dict[str, Any]:
        return {name: serialization.to_state_dict(getattr(x, name)) for name in data_fields}

    def from_state_dict(x: Any, state: dict[str, Any]) -> Any:
        if not isinstance(state, dict):
            raise ValueError(
                f"Cannot restore an instance of {data_clz.__name__} at path "
                f"{serialization._display_path()}: expected a state dict with fields "
                f"{data_fields}, got {type(state).__name__}. The saved data has another structure."
            )
        updates = {}
        for name in data_fields:
            if name not in state:
                raise ValueError(
                    f"Missing field {name} in state dict while restoring an instance of "
                    f"{data_clz.__name__}, at path {serialization._display_path()}. The state has "
                    f"fields {sorted(state)}; restore into a target of the class that was saved."
                )
            updates[name] = serialization.from_state_dict(getattr(x, name), state[name], name=name)
        unknown = set(state) - set(data_fields)
        if unknown:
            raise ValueError(
                f'Unknown field(s) "{", ".join(sorted(map(str, unknown)))}" in state dict while '
                f"restoring an instance of {data_clz.__name__} at path "
                f"{serialization._display_path()}. Expected fields {data_fields}."
            )
        return x.replace(**updates)

    serialization.register_serialization_state(
        data_clz, to_state_dict, from_state_dict, override=True)
    data_clz._flax_dataclass = True
    return data_clz


@dataclass_transform(field_specifiers=(field,))  # type: ignore[literal-required]
class PyTreeNode:
    """Base class whose subclasses become struct dataclasses automatically.

    Equivalent to decorating each subclass with :func:`dataclass`; class keyword
    arguments are forwarded (``class P(PyTreeNode, kw_only=True)``).

    >>> import jax
    >>> class Layer(PyTreeNode):
    ...     w: float
    ...     act: str = field(pytree_node=False, default='relu')
    >>> jax.tree_util.tree_leaves(Layer(2.0))
    [2.0]
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # the parents' hooks run first: Generic's sets __parameters__, so that
        # `class C(PyTreeNode, Generic[T])` gives a subscriptable `C[int]`
        super().__init_subclass__()
        dataclass(cls, **kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Replaced by the dataclass __init__ in every subclass.
        raise TypeError("PyTreeNode itself cannot be instantiated; subclass it with fields.")

    def replace(self: TNode, **overrides: Any) -> TNode:
        """Returns a copy with the given fields replaced."""
        return dataclasses.replace(self, **overrides)  # type: ignore[type-var]
