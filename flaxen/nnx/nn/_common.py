"""Small helpers the NNX layers share: read an optional Variable, mark ``None`` attributes as
data (today's ``nnx.data``), turn a ``*_metadata`` mapping into Variable keywords, create a
layer's (optional) parameter from its initializer, and check an input's feature sizes.

>>> _value(None) is None
True
"""

from __future__ import annotations

import typing as tp

from flaxen.layer_math.errors import LayerShapeError
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


class _InputFeaturesError(LayerShapeError, TypeError):
    # TypeError as well: Flax's layers let dot_general / conv raise it for this mistake.
    pass


def check_features(
    layer: str, inputs: tp.Any, axes: tp.Sequence[int], expected: tp.Sequence[int],
    kernel_shape: tp.Sequence[int], argument: str,
) -> None:
    """Raises the layer shape error when ``inputs``' sizes along ``axes`` are not ``expected``.

    Reads static shapes only, so under ``jax.jit`` it runs once, at trace time, and the
    compiled call pays nothing. ``argument`` names the constructor argument to change.

    >>> import numpy as np
    >>> check_features("Linear", np.ones((2, 3)), (-1,), (3,), (3, 4), "in_features")
    """
    shape = tuple(inputs.shape)
    found = tuple(shape[a] for a in axes)
    if found == tuple(expected):
        return
    want = expected[0] if len(expected) == 1 else tuple(expected)
    got = found[0] if len(found) == 1 else found
    where = "last axis" if tuple(axes) == (-1,) else f"axes {tuple(axes)}"
    raise _InputFeaturesError(
        f"{layer}: the input of shape {shape} has {got} features on its {where}, but the "
        f"layer was built for {argument}={want} (its kernel has shape "
        f"{tuple(kernel_shape)}). Pass inputs with {want} features there, or build the layer "
        f"with {argument}={got}."
    )
