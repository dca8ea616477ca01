"""Public type aliases (``flaxen.typing``), importable where Flax code uses ``flax.typing``.

These are names for annotations: most are plain ``typing`` aliases, so they cost nothing at
runtime. ``In``/``Out`` (the input-only / output-only axis markers of lifted transforms) are
real classes and are the same objects :mod:`flaxen.core.lift` uses.

This module sits at the bottom of the package (it imports nothing from flaxen at import time),
so every layer of flaxen may import it.

>>> from flaxen.typing import Dtype, PrecisionLike, Shape
>>> import jax.numpy as jnp
>>> def zeros(shape: Shape, dtype: Dtype = jnp.float32):
...     return jnp.zeros(shape, dtype)
>>> zeros((2,)).shape
(2,)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import jax
import jax.numpy as jnp

__all__ = [
    "Array",
    "ArrayPytree",
    "Axes",
    "Axis",
    "AxisName",
    "Collection",
    "ConvGeneralDilatedT",
    "DotGeneralT",
    "Dtype",
    "FrozenVariableDict",  # noqa: F822 - resolved lazily by __getattr__
    "In",
    "InOutAxis",
    "InOutScanAxis",
    "Initializer",
    "Key",
    "LaxPadding",
    "Leaf",
    "LogicalNames",
    "LogicalPartitionSpec",
    "LogicalPartitionSpecPytree",
    "LogicalRules",
    "MutableCollection",
    "MutableVariableDict",
    "Out",
    "PRNGFoldable",
    "PRNGKey",
    "PaddingLike",
    "PartitionSpecPytree",
    "Path",
    "PathParts",
    "PrecisionLike",
    "RNGSequences",
    "ScanAxis",
    "Shape",
    "Shardable",
    "Sharding",
    "VariableDict",
]

T = TypeVar("T")
K = TypeVar("K")

# --- arrays, keys, dtypes, shapes -------------------------------------------------------------
Array = jax.Array | Any  # a JAX array, or anything array-like a layer accepts
PRNGKey = jax.Array  # a key from jax.random.key / jax.random.PRNGKey
RNGSequences = dict[str, PRNGKey]  # {"params": key, "dropout": key, ...}
Dtype = jnp.dtype | type | str | Any  # anything jnp.dtype(...) understands
Shape = Sequence[int]


# --- paths into nested containers -------------------------------------------------------------
class Key(Hashable, Protocol):
    """A key of a nested container: hashable and orderable (``str``, ``int``, ...)."""

    def __lt__(self: K, value: K, /) -> bool: ...


Path = str  # a "/"-joined path, e.g. "params/Dense_0/kernel"
PathParts = tuple[Key, ...]  # the same path as a tuple of keys
Leaf = Any

# --- layer arguments ----------------------------------------------------------------------------
PrecisionLike = (
    None | str | jax.lax.Precision | tuple[str, str] | tuple[jax.lax.Precision, jax.lax.Precision]
)
DotGeneralT = Callable[..., Array]  # signature of jax.lax.dot_general
ConvGeneralDilatedT = Callable[..., Array]  # signature of jax.lax.conv_general_dilated
PaddingLike = str | int | Sequence[int | tuple[int, int]]  # what a layer accepts
LaxPadding = str | Sequence[tuple[int, int]]  # what jax.lax accepts
Initializer = Callable[..., Any]  # init(key, shape, dtype=...) -> array

# --- variable collections -----------------------------------------------------------------------
Collection = Mapping[str, Any]
MutableCollection = dict[str, Any]
VariableDict = Mapping[str, Collection]
MutableVariableDict = dict[str, MutableCollection]
PRNGFoldable = int | str


# --- axes of lifted transforms ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class In(Generic[T]):
    """Marks a ``variable_axes`` entry of a lifted transform that applies to inputs only."""

    axis: T


@dataclasses.dataclass(frozen=True)
class Out(Generic[T]):
    """Marks a ``variable_axes`` entry of a lifted transform that applies to outputs only."""

    axis: T


Axis = int | None
Axes = int | Sequence[int]
InOutAxis = Axis | In[Axis] | Out[Axis]
ScanAxis = int
InOutScanAxis = ScanAxis | In[ScanAxis] | Out[ScanAxis]

# --- sharding -----------------------------------------------------------------------------------
AxisName = str | None
LogicalNames = tuple[str | None, ...]  # one logical axis name (or None) per array axis
LogicalRules = Sequence[tuple[str, str | tuple[str, ...] | None]]  # logical -> mesh axes
Sharding = tuple[AxisName, ...]  # one mesh axis name (or None) per array axis
Shardable = Any  # something carrying sharding names (an array, a boxed param, a Variable)
ArrayPytree = Any
LogicalPartitionSpec = Any
LogicalPartitionSpecPytree = Any
PartitionSpecPytree = Any


def __getattr__(name: str) -> Any:
    # FrozenVariableDict names FrozenDict, which lives in flaxen.core; resolving it lazily keeps
    # this module free of imports from the layers above it.
    if name == "FrozenVariableDict":
        from flaxen.core.frozen_dict import FrozenDict

        return FrozenDict[str, Collection]
    raise AttributeError(f"module 'flaxen.typing' has no attribute {name!r}")
