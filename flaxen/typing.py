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

import abc
import dataclasses
import functools
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from functools import partial  # noqa: F401 - importable from here in Flax
from typing import Any, Generic, Optional, Protocol, TypeGuard, TypeVar, Union  # noqa: F401

import jax
import jax.numpy as jnp
import jax.tree_util as jtu  # noqa: F401 - importable from here in Flax
import numpy as np

__all__ = [
    "A",
    "Array",
    "ArrayPytree",
    "Axes",
    "Axis",
    "AxisName",
    "BaseConfigContext",
    "Collection",
    "ConvGeneralDilatedT",
    "DotGeneralT",
    "Dtype",
    "EinsumT",
    "F",
    "FrozenVariableDict",  # noqa: F822 - resolved lazily by __getattr__
    "HA",
    "HB",
    "HashableMapping",
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
    "MISSING",
    "Missing",
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
    "PromoteDtypeFn",
    "PytreeDeque",
    "RNGSequences",
    "ScanAxis",
    "Shape",
    "ShapeDtype",
    "Shardable",
    "Sharding",
    "SizeBytes",
    "TupleArg",
    "VariableDict",
    "has_shape_dtype",
    "is_key_like",
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


def is_key_like(x: Any) -> TypeGuard[Key]:
    """Whether ``x`` can be a :class:`Key`: it has ``__hash__`` and ``__lt__``.

    >>> is_key_like("kernel"), is_key_like(3), is_key_like([])
    (True, True, True)

    (``list`` defines ``__hash__`` as ``None``; like Flax, only the attribute is checked.)
    """
    return hasattr(x, "__hash__") and hasattr(x, "__lt__")


Path = str  # a "/"-joined path, e.g. "params/Dense_0/kernel"
PathParts = tuple[Key, ...]  # the same path as a tuple of keys
Leaf = Any

# --- layer arguments ----------------------------------------------------------------------------
PrecisionLike = (
    None | str | jax.lax.Precision | tuple[str, str] | tuple[jax.lax.Precision, jax.lax.Precision]
)
DotGeneralT = Callable[..., Array]  # signature of jax.lax.dot_general
ConvGeneralDilatedT = Callable[..., Array]  # signature of jax.lax.conv_general_dilated
EinsumT = Callable[..., Array]  # signature of jnp.einsum
PaddingLike = str | int | Sequence[int | tuple[int, int]]  # what a layer accepts
LaxPadding = str | Sequence[tuple[int, int]]  # what jax.lax accepts
# init(key, shape, dtype=...) -> array: JAX's initializer protocol or any callable like it
Initializer = Union[jax.nn.initializers.Initializer, Callable[..., Any]]  # noqa: UP007

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
AxisName = str | tuple[str, ...] | None  # a mesh axis, several mesh axes, or unsharded
LogicalNames = tuple[str | None, ...]  # one logical axis name (or None) per array axis
LogicalRules = Sequence[tuple[str, AxisName]]  # logical -> mesh axes
Sharding = tuple[AxisName, ...]  # one mesh axis name (or None) per array axis
Shardable = Any  # something carrying sharding names (an array, a boxed param, a Variable)
ArrayPytree = Any
LogicalPartitionSpec = Any
LogicalPartitionSpecPytree = Any
PartitionSpecPytree = Any


# --- generic helpers shared by Linen and NNX ----------------------------------------------------
A = TypeVar("A")
HA = TypeVar("HA", bound=Hashable)
HB = TypeVar("HB")
F = TypeVar("F", bound=Callable[..., Any])
TupleArg = TypeVar("TupleArg", bound=tuple)


class PytreeDeque(deque[A]):
    """A ``collections.deque`` that JAX treats as a pytree node (its items are the children).

    >>> jax.tree.map(lambda x: x * 2, PytreeDeque([1, 2]))
    PytreeDeque([2, 4])
    """


def _deque_children(xs: PytreeDeque, *, keyed: bool) -> tuple[Any, tuple[()]]:
    if keyed:
        return tuple((jax.tree_util.SequenceKey(i), x) for i, x in enumerate(xs)), ()
    return tuple(xs), ()


jax.tree_util.register_pytree_with_keys(
    PytreeDeque,
    functools.partial(_deque_children, keyed=True),
    lambda _, children: PytreeDeque(children),
    flatten_func=functools.partial(_deque_children, keyed=False),
)


class Missing:
    """The type of :data:`MISSING`, a sentinel for "no value given" where ``None`` is a value."""


MISSING = Missing()


class ShapeDtype(Protocol):
    """Anything with a ``shape`` and a ``dtype`` (an array, a ``jax.ShapeDtypeStruct``, ...)."""

    shape: Shape
    dtype: Dtype


def has_shape_dtype(x: Any) -> TypeGuard[ShapeDtype]:
    """Whether ``x`` has both ``shape`` and ``dtype`` attributes.

    >>> has_shape_dtype(jnp.ones(2)), has_shape_dtype(2.0)
    (True, False)
    """
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _human_bytes(n: int) -> str:
    for limit, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if n > limit:
            return f"{n / limit:,.1f} {unit}"
    return f"{n:,} B"


@dataclasses.dataclass(frozen=True, slots=True)
class SizeBytes:
    """An element count and its size in bytes; adds up, and prints as ``'1,024 (4.1 KB)'``.

    >>> SizeBytes.from_any({"w": jnp.zeros((2, 3)), "b": jnp.zeros(3, jnp.int8), "n": None})
    9 (27 B)
    """

    size: int
    bytes: int

    @classmethod
    def from_array(cls, x: ShapeDtype) -> SizeBytes:
        """The element count and bytes of one array-like with ``shape`` and ``dtype``."""
        size = int(np.prod(x.shape))
        # a dtype given as a string needs jnp.dtype; extended dtypes (PRNG keys) must not go
        # through it, they carry their own itemsize
        dtype: Any = jnp.dtype(x.dtype) if isinstance(x.dtype, str) else x.dtype
        return cls(size, size * dtype.itemsize)

    @classmethod
    def from_any(cls, x: Any) -> SizeBytes:
        """The totals over every leaf of the pytree ``x`` that has a shape and dtype."""
        total = cls(0, 0)
        for leaf in jax.tree.leaves(x):
            if has_shape_dtype(leaf):
                total += cls.from_array(leaf)
        return total

    def __add__(self, other: SizeBytes) -> SizeBytes:
        return type(self)(self.size + other.size, self.bytes + other.bytes)

    def __bool__(self) -> bool:
        return bool(self.size)

    def __repr__(self) -> str:
        return f"{self.size:,} ({_human_bytes(self.bytes)})"


class PromoteDtypeFn(Protocol):
    """The signature of a dtype-promotion function: ``fn(args, /, *, dtype=None, inexact=True)``.

    It takes a tuple of arrays and returns a tuple of the same length, cast to one dtype (the
    layers' ``promote_dtype`` arguments accept any such callable).
    """

    def __call__(self, args: TupleArg, /, *, dtype: Any = None, inexact: bool = True) -> TupleArg:
        ...


class HashableMapping(Mapping[HA, HB], Hashable):
    """A read-only mapping that hashes by its items (usable as a static ``jit`` argument).

    >>> m = HashableMapping({"a": 1, "b": 2})
    >>> hash(m) == hash(HashableMapping({"b": 2, "a": 1})), m["a"], len(m)
    (True, 1, 2)
    >>> m.update({"a": 3})
    {'a': 3, 'b': 2}
    """

    _mapping: dict[HA, HB] | Mapping[HA, HB]

    def __init__(self, mapping: Mapping[HA, HB], copy: bool = True):
        # copy=False trusts the caller not to mutate `mapping` afterwards (no defensive copy)
        self._mapping = dict(mapping) if copy else mapping

    def __contains__(self, key: object) -> bool:
        return key in self._mapping

    def __getitem__(self, key: HA) -> HB:
        return self._mapping[key]

    def __iter__(self) -> Iterator[HA]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __hash__(self) -> int:
        # a frozenset of items hashes independently of insertion order and of key types
        return hash(frozenset(self._mapping.items()))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, HashableMapping) and self._mapping == other._mapping

    def __repr__(self) -> str:
        return repr(self._mapping)

    def update(self, other: Mapping[HA, HB]) -> HashableMapping[HA, HB]:
        """A new mapping with the items of ``other`` added (this one is unchanged)."""
        return HashableMapping({**self._mapping, **other}, copy=False)


class BaseConfigContext(abc.ABC):
    """A value held on a per-class stack: set it with ``with Ctx(v):`` or ``@Ctx(v)``.

    Subclasses give the stack (``get_stack``) and the value when it is empty (``get_default``).
    Constructing one sets the value at once (so ``Ctx(v)`` alone changes the current value until
    it is used as a context manager or decorator); entering it keeps the value until exit, and
    decorating a function sets it only while the function runs.

    >>> class Precision(BaseConfigContext):
    ...     _stack: list = []
    ...     @classmethod
    ...     def get_default(cls):
    ...         return "float32"
    ...     @classmethod
    ...     def get_stack(cls):
    ...         return cls._stack
    >>> with Precision("bfloat16"):
    ...     print(Precision.current_value())
    bfloat16
    >>> Precision.current_value()
    'float32'
    """

    @classmethod
    @abc.abstractmethod
    def get_default(cls) -> Any:
        """The value when nothing is set."""

    @classmethod
    @abc.abstractmethod
    def get_stack(cls) -> list:
        """The list that holds the values set, innermost last."""

    def __init__(self, value: Any, /):
        stack = self.get_stack()
        # The value takes effect on construction; the previous top is remembered so that
        # __enter__/__call__ can restore the stack shape they expect.
        self.prev_value = stack[-1] if stack else None
        if stack:
            stack[-1] = value
        else:
            stack.append(value)
        self.new_value = value

    @classmethod
    def current_value(cls) -> Any:
        """The innermost value set, else :meth:`get_default`."""
        stack = cls.get_stack()
        return stack[-1] if stack else cls.get_default()

    def __enter__(self) -> None:
        if self.prev_value is not None:
            self.get_stack().insert(-1, self.prev_value)

    def __exit__(self, *exc_info: Any) -> None:
        self.get_stack().pop()

    def __call__(self, f: F) -> F:
        # used as a decorator: undo the construction-time change, apply it per call instead
        stack = self.get_stack()
        stack.pop()
        if self.prev_value is not None:
            stack.append(self.prev_value)

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            stack.append(self.new_value)
            try:
                return f(*args, **kwargs)
            finally:
                stack.pop()

        return wrapper  # type: ignore[return-value]


def __getattr__(name: str) -> Any:
    # FrozenVariableDict names FrozenDict, which lives in flaxen.core; resolving it lazily keeps
    # this module free of imports from the layers above it.
    if name in ("FrozenVariableDict", "FrozenDict"):
        from flaxen.core.frozen_dict import FrozenDict

        return FrozenDict[str, Collection] if name == "FrozenVariableDict" else FrozenDict
    raise AttributeError(f"module 'flaxen.typing' has no attribute {name!r}")
