"""Linen collection name <-> NNX Variable type: ``nnx.register_variable_name`` and lookups.

Today's Flax names collections after Variable types: ``Param`` <-> ``'params'``,
``BatchStat`` <-> ``'batch_stats'``, ``Cache`` <-> ``'cache'``, ``Intermediate`` <->
``'intermediates'``; any other type's collection is its class name. The bridge (``ToNNX``,
``ToLinen``, ``bridge.Module``) uses these to move variables between the two worlds.

>>> from flaxen import nnx
>>> from flaxen.nnx import _variable_names as names
>>> names.variable_name_from_type(nnx.BatchStat)
'batch_stats'
>>> @nnx.register_variable_name('example_counts')  # a registry for the whole process
... class ExampleCount(nnx.Variable):
...     pass
>>> names.variable_type_from_name('example_counts') is ExampleCount
True
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx.variablelib import Variable, VariableTypeCache

T = tp.TypeVar("T", bound=type)

# Flax's name for the registry is variablelib.VariableTypeCache: this is that dict
_NAME_TO_TYPE: dict[str, type] = VariableTypeCache
_TYPE_TO_NAME: dict[type, str] = {t: n for n, t in _NAME_TO_TYPE.items()}


def register_variable_name(name: str, typ: type | None = None, *,
                           overwrite: bool = False) -> tp.Any:
    """Ties collection ``name`` to Variable type ``typ``; without ``typ`` a class decorator."""
    if typ is None:
        def register(cls: T) -> T:
            register_variable_name(name, cls, overwrite=overwrite)
            return cls

        return register
    if not overwrite and _NAME_TO_TYPE.get(name, typ) is not typ:
        raise ValueError(
            f"Collection name {name!r} is already registered to "
            f"{_NAME_TO_TYPE[name].__name__}; pass overwrite=True to register "
            f"{typ.__name__} under it instead.")
    _NAME_TO_TYPE[name] = typ
    _TYPE_TO_NAME[typ] = name
    return typ


def variable_name_from_type(typ: type, *, allow_register: bool = False) -> str:
    """The collection of Variable type ``typ``: registered name, else its class name."""
    name = _TYPE_TO_NAME.get(typ)
    if name is not None:
        return name
    name = typ.__name__
    if allow_register:
        register_variable_name(name, typ, overwrite=True)
    return name


def variable_type_from_name(name: str, *, base: type = Variable,
                            allow_register: bool = False) -> type:
    """The Variable type of collection ``name``; with ``allow_register`` a new subclass of
    ``base`` named ``name`` is made (once) for an unknown collection."""
    typ = _NAME_TO_TYPE.get(name)
    if typ is not None:
        return typ
    if not allow_register:
        raise ValueError(
            f"No Variable type is registered for the collection {name!r}; register one with "
            f"@nnx.register_variable_name({name!r}) on a Variable subclass.")
    typ = type(name, (base,), {"__module__": __name__,
                               "__doc__": f"Variables of the Linen collection {name!r}."})
    register_variable_name(name, typ)
    return typ
