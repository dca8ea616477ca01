"""Small helpers the NNX layers share: read an optional Variable, mark ``None`` attributes as
data (today's ``nnx.data``), turn a ``*_metadata`` mapping into Variable keywords, and
create a layer's (optional) parameter from its initializer.

>>> _value(None) is None
True
"""

from __future__ import annotations

import typing as tp

from flaxen.nnx.variablelib import Param

_data_marker: tp.Callable[..., tp.Any] | None
try:  # today's Pytree marks data attributes explicitly; older engines need no marker
    from flaxen.nnx.pytreelib import data as _data_marker  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the engine version
    _data_marker = None


def data(value: tp.Any) -> tp.Any:
    """``nnx.data(value)`` when the engine has it, else ``value`` unchanged."""
    return value if _data_marker is None else _data_marker(value)


def _value(v: tp.Any) -> tp.Any:
    """The array held by Variable ``v`` (``None`` stays ``None``)."""
    return None if v is None else v.value


def metadata(layer: str, name: str, meta: tp.Mapping[str, tp.Any] | None) -> dict:
    """Checks a ``<name>_metadata`` argument and returns it as Variable keywords."""
    if meta is None:
        return {}
    if not isinstance(meta, tp.Mapping):
        raise TypeError(
            f"{layer}: {name}_metadata must be a mapping of Variable metadata (for example "
            f"{{'out_sharding': ('din', 'dout')}}), got {type(meta).__name__}."
        )
    return dict(meta)


def new_param(
    layer: str, name: str, init: tp.Callable[..., tp.Any], rngs: tp.Any, shape: tp.Any,
    dtype: tp.Any, meta: tp.Mapping[str, tp.Any] | None, *, use: bool = True,
    kind: tp.Callable[..., tp.Any] = Param,
) -> tp.Any:
    """``kind(init(rngs.params(), shape, dtype))`` with the checked ``<name>_metadata``
    (``layer`` names the layer in its error); ``None`` data, drawing no key, when not ``use``.

    >>> from flaxen import nnx
    >>> new_param("Demo", "bias", nnx.initializers.zeros, nnx.Rngs(0), (2,), None, {}).shape
    (2,)
    """
    if not use:
        return data(None)
    return kind(init(rngs.params(), shape, dtype), **metadata(layer, name, meta))
