"""``nnx.Pytree``: graph nodes that are also JAX pytrees, with data and static attributes.

Every attribute of a :class:`Pytree` is either *data* (a pytree child: arrays, Variables,
other Pytrees and Modules, values of a type passed to :func:`register_data_type`, or
anything assigned through :func:`data`) or *static* (part of the tree structure: ints,
strings, functions, configuration, anything assigned through :func:`static`). The status
is decided when the attribute is first assigned and kept afterwards, unless an explicit
``nnx.data(...)`` / ``nnx.static(...)`` assignment changes it. A static attribute may not
hold data (a plain list of arrays, say): use :class:`~flaxen.nnx.List` / ``nnx.Dict``, or
wrap the value in ``nnx.data``.

``class Foo(nnx.Pytree, pytree=False)`` keeps the graph-node behaviour without the pytree
registration and without the checks (``nnx.Object`` is such a class).

>>> import jax
>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> class Foo(nnx.Pytree):
...     def __init__(self):
...         self.w = jnp.ones(2)       # data: an array
...         self.n = nnx.data(3)       # data: explicit
...         self.name = 'foo'          # static
>>> [x.tolist() if hasattr(x, 'tolist') else x for x in jax.tree.leaves(Foo())]
[3, [1.0, 1.0]]
"""

from __future__ import annotations

import dataclasses
import inspect
import typing as tp
from abc import ABCMeta

import jax
import numpy as np

from flaxen.configurations import config
from flaxen.nnx import _trace, visualization
from flaxen.nnx import reprlib as _reprlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx.variablelib import Variable, is_array_ref, variable_repr_items

A = tp.TypeVar("A")
T = tp.TypeVar("T", bound=type)

_DATA_TAG = "__data__"
_STATIC_TAG = "__static__"
Data = tp.Annotated[A, _DATA_TAG]
Static = tp.Annotated[A, _STATIC_TAG]

DATA_REGISTRY: set[type] = set()
_ARRAY_TYPES: tuple = (jax.Array, np.ndarray)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING = _Missing()


def _tagged(value: tp.Any, kwargs: dict, static: bool, fn: str) -> tp.Any:
    if value is not _MISSING and kwargs:
        raise TypeError(
            f"nnx.{fn}() takes either one positional value or dataclass field keyword "
            "arguments, not both; pass the value alone when assigning an attribute.")
    metadata = dict(kwargs.pop("metadata", None) or {})
    if "static" in metadata:
        raise ValueError(
            f"nnx.{fn}(metadata=...) may not contain the key 'static': nnx.{fn} sets it. "
            "Rename that metadata entry.")
    metadata["nnx_value"] = value
    metadata["static"] = static
    return dataclasses.field(**kwargs, metadata=metadata)


def data(value: tp.Any = _MISSING, /, **kwargs: tp.Any) -> tp.Any:
    """Marks the attribute it is assigned to as pytree data (``self.x = nnx.data(1)``), or,
    with dataclass field arguments, declares a data field of an ``nnx.dataclass``.

    >>> import jax
    >>> from flaxen import nnx
    >>> class Foo(nnx.Pytree):
    ...     def __init__(self):
    ...         self.a = nnx.data(42)
    ...         self.b = 'hello'
    >>> jax.tree.leaves(Foo())
    [42]
    """
    return _tagged(value, kwargs, False, "data")


def static(value: tp.Any = _MISSING, /, **kwargs: tp.Any) -> tp.Any:
    """Marks the attribute it is assigned to as static (part of the tree structure).

    >>> import jax
    >>> from flaxen import nnx
    >>> class Foo(nnx.Pytree):
    ...     def __init__(self):
    ...         self.a = nnx.static(1)
    ...         self.b = nnx.data(2)
    >>> jax.tree.leaves(Foo())
    [2]
    """
    return _tagged(value, kwargs, True, "static")


def _is_tag(x: tp.Any) -> bool:
    return isinstance(x, dataclasses.Field) and "nnx_value" in x.metadata


@tp.dataclass_transform(field_specifiers=(dataclasses.field, data, static))
def dataclass(cls: tp.Any = None, /, **kwargs: tp.Any) -> tp.Any:
    """``dataclasses.dataclass`` for Pytrees (``repr`` stays the Pytree's own).

    >>> import jax
    >>> from flaxen import nnx
    >>> @nnx.dataclass
    ... class Pair(nnx.Pytree):
    ...     a: int = nnx.data()
    ...     b: int = nnx.static()
    >>> jax.tree.leaves(Pair(1, 2))
    [1]
    """
    kwargs["repr"] = False
    if cls is None:
        return lambda c: dataclasses.dataclass(c, **kwargs)
    return dataclasses.dataclass(cls, **kwargs)


def register_data_type(type_: T, /) -> T:
    """Makes values of ``type_`` count as data when assigned to a Pytree attribute.

    >>> from flaxen import nnx
    >>> @nnx.register_data_type
    ... class Box:
    ...     pass
    >>> nnx.is_data(Box())
    True
    """
    DATA_REGISTRY.add(type_)
    return type_


def is_data(value: tp.Any, /) -> bool:
    """True for values that are data on their own: arrays, Variables, graph nodes (Pytrees,
    Modules, Rngs) and registered data types. Containers are not: ``is_data([x]) is False``.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> nnx.is_data(jnp.zeros(1)), nnx.is_data(nnx.Param(1)), nnx.is_data([jnp.zeros(1)])
    (True, True, False)
    """
    return (isinstance(value, (Variable, GraphNode, *_ARRAY_TYPES))
            or type(value) in DATA_REGISTRY or _is_ref(value))


def _is_ref(value: tp.Any) -> bool:
    ref = getattr(jax, "Ref", None)
    return ref is not None and isinstance(value, ref)


def has_data(value: tp.Any, /) -> list[tp.Any]:
    """The data values (see :func:`is_data`) found inside ``value``."""
    return [x for x in _leaves(value) if is_data(x)]


def _leaves(value: tp.Any) -> list:
    seen: set[int] = set()

    def stop(x: tp.Any) -> bool:
        if id(x) in seen:
            return True
        seen.add(id(x))
        return is_data(x) or _is_tag(x)

    return jax.tree_util.tree_leaves(value, is_leaf=stop)


class PytreeState(_reprlib.Representable):
    """Facts about a Pytree: whether it is being initialized / set up, and its trace.

    Built on its own it holds the two flags given; a Pytree's ``_pytree__state`` is one
    that reads them (and the trace it was created under) from the Pytree when asked.

    >>> from flaxen.nnx.pytreelib import PytreeState
    >>> state = PytreeState(initializing=True)
    >>> state.initializing, state.is_setup
    (True, False)
    """

    __slots__ = ("_initializing", "_is_setup", "_node")

    def __init__(self, initializing: bool = False, is_setup: bool = False) -> None:
        self._initializing = initializing
        self._is_setup = is_setup
        self._node: GraphNode | None = None

    @classmethod
    def _of(cls, node: GraphNode) -> PytreeState:
        state = cls()
        state._node = node
        return state

    @property
    def trace_state(self) -> object:
        if self._node is None:
            return _trace.current_trace()
        return self._node._nnx_trace

    @property
    def initializing(self) -> bool:
        if self._node is None:
            return self._initializing
        # upward: Module subclasses Pytree; looked up when a Pytree needs it
        from flaxen.nnx import module

        return module._INITIALIZING[0]

    @property
    def is_setup(self) -> bool:
        return self._is_setup

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type=type(self))
        yield _reprlib.Attr("initializing", self.initializing)
        yield _reprlib.Attr("is_setup", self.is_setup)


# -- bookkeeping slots -------------------------------------------------------------------
# A Pytree keeps its trace (``_nnx_trace``) and data/static status (``_pytree__status``) in
# slots. Generated merge code builds a hundred objects in a few C-level loops; writing both
# slots would be a third of its time, so it leaves them unset where ``Pytree.__getattr__``
# answers the value it would have written: the trace outside every transform
# (``_trace.TOP``), and the status the class recorded for merges (``record_merge_status``).
BOOKKEEPING = frozenset({"_pytree__status", "_nnx_trace"})


def chains_bookkeeping(fn: tp.Callable) -> tp.Callable:
    """Marks a Pytree subclass's ``__getattr__`` that hands the names in :data:`BOOKKEEPING`
    on to ``super().__getattr__``: its objects may be built with those slots unset."""
    fn._nnx_chains_bookkeeping = True  # type: ignore[attr-defined]
    return fn


def lazy_bookkeeping(typ: type) -> bool:
    """True when objects of ``typ`` may be built with their bookkeeping slots unset: a
    Pytree whose attribute lookup reaches ``Pytree.__getattr__`` for those names (a
    subclass's own ``__getattr__`` must be marked with :func:`chains_bookkeeping`)."""
    return (isinstance(typ, type) and issubclass(typ, Pytree)
            and typ.__getattribute__ is object.__getattribute__
            and getattr(typ.__getattr__, "_nnx_chains_bookkeeping", False))


def record_merge_status(typ: type, status: tp.Any) -> bool:
    """Whether an object of ``typ`` built with its status slot unset reads ``status``. The
    first status a class is asked about becomes the one such objects read."""
    if "_pytree__merge_status" not in typ.__dict__:
        typ._pytree__merge_status = status  # type: ignore[attr-defined]
    return bool(typ.__dict__["_pytree__merge_status"] == status)


class _Status(dict):
    """``name -> is data`` of one Pytree's attributes; hashable (graph definition metadata),
    shared between objects until one of them changes."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def with_(self, name: str, is_data_: bool) -> _Status:
        new = _Status(self)
        new[name] = is_data_
        return new

    def without(self, name: str) -> _Status:
        new = _Status(self)
        new.pop(name, None)
        return new


class PytreeMeta(ABCMeta):
    """Runs the Pytree checks once ``__init__`` returns (attributes set any way)."""

    if tp.TYPE_CHECKING:  # declared on Pytree, the classes this metaclass makes
        _pytree__is_pytree: bool

    @property
    def __signature__(cls) -> inspect.Signature:
        # This metaclass's __call__ would otherwise hide __init__'s parameters from
        # inspect.signature (help(), IDEs, tools reading defaults).
        sig = inspect.signature(cls.__init__)  # type: ignore[misc]  # cls is the class
        return sig.replace(parameters=list(sig.parameters.values())[1:])

    def __call__(cls, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        obj = super().__call__(*args, **kwargs)
        if cls._pytree__is_pytree and isinstance(obj, cls):
            _finish_init(obj)
        return obj


def _finish_init(obj: Pytree) -> None:
    status = obj._pytree__status
    missing = {k: is_data(v) for k, v in obj.__dict__.items() if k not in status}
    if missing:
        status = _Status(status)
        status.update(missing)
        object.__setattr__(obj, "_pytree__status", status)
    for name, value in obj.__dict__.items():
        obj._check_value(name, value, None)


def _class_status(cls: type) -> _Status:
    status: dict[str, bool] = {}
    for base in reversed(cls.__mro__[1:]):
        status.update(getattr(base, "_pytree__class_status", {}))
    try:
        hints = tp.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - forward references that cannot be resolved
        hints = dict(getattr(cls, "__annotations__", {}))
    for name, hint in hints.items():
        tags = getattr(hint, "__metadata__", ())
        if isinstance(hint, str):
            if hint.startswith(("nnx.Data", "Data[")):
                status[name] = True
            elif hint.startswith(("nnx.Static", "Static[")):
                status[name] = False
        elif _DATA_TAG in tags:
            status[name] = True
        elif _STATIC_TAG in tags:
            status[name] = False
    for name, value in vars(cls).items():
        if isinstance(value, dataclasses.Field) and "static" in value.metadata:
            flag = value.metadata["static"]
            if not isinstance(flag, bool):
                raise ValueError(
                    f"{cls.__name__}.{name}: the field's 'static' metadata must be a bool, "
                    f"got a {type(flag).__name__}; use nnx.data() or nnx.static().")
            status[name] = not flag
    return _Status(status)


class Pytree(GraphNode, _reprlib.Representable, metaclass=PytreeMeta):
    """Base of NNX objects: a graph node whose data attributes are its pytree children.

    See the module docstring for the data/static rules. ``pytree=False`` in the class
    statement turns the pytree registration (and the checks) off.
    """

    __slots__ = ("_pytree__status",)
    _pytree__is_pytree: tp.ClassVar[bool] = True
    _pytree__class_status: tp.ClassVar[_Status] = _Status()

    def __init_subclass__(cls, *, pytree: bool = config.flax_pytree_module, **kwargs: tp.Any
                          ) -> None:
        super().__init_subclass__(**kwargs)
        slots = cls.__dict__.get("__slots__", ())
        if slots:
            raise TypeError(
                f"'{cls.__name__}' defines __slots__={slots!r}; nnx.Pytree subclasses keep "
                "their attributes in __dict__. Remove __slots__.")
        cls._pytree__is_pytree = pytree
        cls._pytree__class_status = _class_status(cls)
        if pytree:
            jax.tree_util.register_pytree_with_keys(
                cls, _flatten_with_keys, cls._pytree__unflatten, flatten_func=_flatten)

    def __new__(cls, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        obj = object.__new__(cls)
        object.__setattr__(obj, "_nnx_trace", _trace.current_trace())
        object.__setattr__(obj, "_pytree__status", cls._pytree__class_status)
        return obj

    # -- status ----------------------------------------------------------------------------
    @property
    def _pytree__nodes(self) -> _Status:
        return self._pytree__status

    @property
    def _pytree__state(self) -> PytreeState:
        return PytreeState._of(self)

    @chains_bookkeeping
    def __getattr__(self, name: str) -> tp.Any:
        # Only reached for a slot left unset by a build without __init__ (see
        # lazy_bookkeeping): answer what that build would have written, and keep it.
        if name == "_pytree__status":
            cls = type(self)
            status = cls.__dict__.get("_pytree__merge_status", cls._pytree__class_status)
            object.__setattr__(self, "_pytree__status", status)
            return status
        if name == "_nnx_trace" and _trace.TOP is not None:
            object.__setattr__(self, "_nnx_trace", _trace.TOP)
            return _trace.TOP
        raise AttributeError(
            f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: tp.Any) -> None:
        if self._nnx_trace is not _trace.current_trace() and not self._lenient_trace_ok():
            self._raise_trace(f"set attribute {name!r} of")
        if type(self)._pytree__is_pytree:
            value = self._pytree__assign(name, value)
        elif _is_tag(value):
            value = value.metadata["nnx_value"]
        object.__setattr__(self, name, value)
        _trace._EPOCH[0] += 1

    def _pytree__assign(self, name: str, value: tp.Any) -> tp.Any:
        explicit = _is_tag(value)
        if explicit:
            new_data = not value.metadata["static"]
            value = value.metadata["nnx_value"]
        else:
            new_data = is_data(value)
        self._check_value(name, value, (new_data, explicit))
        status = self._pytree__status
        if name not in status or (explicit and status[name] != new_data):
            object.__setattr__(self, "_pytree__status", status.with_(name, new_data))
        return value

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        status = self._pytree__status
        if name in status and name not in type(self)._pytree__class_status:
            object.__setattr__(self, "_pytree__status", status.without(name))

    def _check_value(self, name: str, value: tp.Any, new: tuple[bool, bool] | None) -> None:
        status = self._pytree__status
        current_data = status.get(name, False)
        owner = type(self).__name__
        if (new is not None and new[0] and not new[1] and not current_data
                and name in self.__dict__):
            raise ValueError(
                f"Cannot assign data value of type '{type(value).__name__}' to static "
                f"attribute '{name}' of Pytree type '{owner}'. To make it data, assign it "
                f"as `self.{name} = nnx.data(value)`.")
        leaves = _leaves(value)
        found = [x for x in leaves if is_data(x)]
        if found and new is not None and new[1] and not new[0]:
            kinds = ", ".join(sorted({type(x).__name__ for x in found}))
            raise ValueError(
                f"Found data in value of type '{type(value).__name__}' annotated with "
                f"nnx.static(...) for attribute '{name}' of Pytree type '{owner}' (it "
                f"holds {kinds}); static attributes cannot hold data. Drop nnx.static "
                "or remove the arrays/Variables from the value.")
        if found and not current_data:
            kinds = ", ".join(sorted({type(x).__name__ for x in found}))
            if new is None:
                raise ValueError(
                    f"Found unexpected data on value of type '{type(value).__name__}' in "
                    f"static attribute '{name}' of Pytree type '{owner}' (it holds {kinds}). "
                    f"Assign it as `self.{name} = nnx.data(value)`, use nnx.List/nnx.Dict "
                    f"for containers, or declare the class with pytree=False.")
            is_new_data, explicit = new
            if explicit and not is_new_data:
                raise ValueError(
                    f"Found data in value of type '{type(value).__name__}' annotated with "
                    f"nnx.static(...) for attribute '{name}' of Pytree type '{owner}' (it "
                    f"holds {kinds}); static attributes cannot hold data. Drop nnx.static "
                    "or remove the arrays/Variables from the value.")
            if not is_new_data:
                raise ValueError(
                    f"Found data on value of type '{type(value).__name__}' assigned to "
                    f"static attribute '{name}' of Pytree type '{owner}' (it holds "
                    f"{kinds}). Either remove those values, assign "
                    f"`self.{name} = nnx.data(value)`, annotate the class attribute with "
                    f"`{name}: ... = nnx.data()`, use nnx.List(...) / nnx.Dict(...) for a "
                    f"list or dict, or declare `class {owner}(..., pytree=False)`.")
        tags = {"static" if x.metadata["static"] else "data" for x in leaves if _is_tag(x)}
        if tags:
            raise ValueError(
                f"Found unexpected tags {tags} inside the value assigned to "
                f"'{owner}.{name}': nnx.data(...)/nnx.static(...) must be assigned to a "
                "Pytree attribute directly, not nested inside another structure.")

    # -- copying ---------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict | None = None) -> tp.Any:
        from flaxen.nnx import _graph_ops as graph

        return graph.clone(self)  # Variables copied, arrays (immutable) shared

    def __getstate__(self) -> dict:
        # the data/static status travels with the attributes (as in Flax, whose status sits
        # in __dict__): a copy.copy or an unpickled object keeps its data leaves
        return {**self.__dict__, "_pytree__status": self._pytree__status}

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        status = state.pop("_pytree__status", None)
        object.__setattr__(self, "_nnx_trace", _trace.current_trace())
        if status is not None:
            object.__setattr__(self, "_pytree__status", _Status(status))
        self.__dict__.update(state)

    # -- repr ------------------------------------------------------------------------------
    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        ctx = OBJECT_CONTEXT
        # the outermost repr counts sizes for the whole tree once; nested ones look theirs up
        owns_stats = ctx.node_stats is None or id(self) not in ctx.node_stats
        if owns_stats:
            ctx.node_stats = {}
            visualization.collect_stats(self, ctx.node_stats)
        assert ctx.node_stats is not None
        stats = ctx.node_stats[id(self)]
        owns_seen = ctx.seen_modules_repr is None
        if owns_seen:
            ctx.seen_modules_repr = set()
        assert ctx.seen_modules_repr is not None
        try:
            if id(self) in ctx.seen_modules_repr:  # a cycle: the object is already open above
                yield _reprlib.Object(type=type(self), empty_repr="...")
                return
            yield _reprlib.Object(type=type(self), comment=visualization.stats_comment(stats))
            ctx.seen_modules_repr.add(id(self))
            status = self._pytree__nodes
            for name, value in vars(self).items():
                if name.startswith("_pytree__") or (name.startswith("_")
                                                    and not status.get(name, False)):
                    continue
                yield _reprlib.Attr(name, _shape_dtype_view(value))
        finally:
            if owns_seen:
                ctx.seen_modules_repr = None
            if owns_stats:
                ctx.node_stats = None

    # -- pytree ----------------------------------------------------------------------------
    @classmethod
    def _pytree__unflatten(cls, aux: tuple, children: tp.Iterable[tp.Any]) -> tp.Any:
        data_keys, static_keys, static_values, status = aux
        obj = object.__new__(cls)
        object.__setattr__(obj, "_nnx_trace", _trace.current_trace())
        object.__setattr__(obj, "_pytree__status", status)
        d = obj.__dict__
        int_keys = cls._graph_int_keys
        for k, v in zip(data_keys, children):
            d[str(k) if int_keys else k] = v
        for k, v in zip(static_keys, static_values):
            d[str(k) if int_keys else k] = v
        return obj


def _split_attrs(obj: Pytree) -> tuple[list, list, tuple]:
    status = obj._pytree__status
    d = obj.__dict__
    if type(obj)._graph_int_keys:
        keys = sorted(d, key=lambda k: (0, int(k)) if k.isdigit() else (1, k))
        keyed = [(int(k) if k.isdigit() else k, k) for k in keys]
    else:
        keyed = [(k, k) for k in sorted(d)]
    data_items = []
    static_keys = []
    static_values = []
    for key, name in keyed:
        if status.get(name, False):
            data_items.append((key, d[name]))
        else:
            static_keys.append(key)
            static_values.append(d[name])
    aux = (tuple(k for k, _ in data_items), tuple(static_keys), tuple(static_values), status)
    return data_items, static_keys, aux


def _flatten(obj: Pytree) -> tuple[list, tuple]:
    items, _, aux = _split_attrs(obj)
    return [v for _, v in items], aux


def _flatten_with_keys(obj: Pytree) -> tuple[list, tuple]:
    items, _, aux = _split_attrs(obj)
    out = [(jax.tree_util.GetAttrKey(k) if isinstance(k, str)
            else jax.tree_util.SequenceKey(k), v) for k, v in items]
    return out, aux


class Object(Pytree, pytree=False):
    """A graph node that is not a pytree (no data/static bookkeeping)."""

    def __init_subclass__(cls, **kwargs: tp.Any) -> None:
        pytree = kwargs.pop("pytree", False)
        if pytree is not False:
            raise ValueError(
                f"nnx.Object subclasses are never pytrees, but {cls.__name__} asked for "
                f"pytree={pytree!r}; derive from nnx.Pytree instead.")
        super().__init_subclass__(pytree=False, **kwargs)


def check_pytree(pytree: tp.Any) -> None:
    """Re-runs the attribute checks of a Pytree (e.g. after writing ``__dict__`` directly)."""
    if not isinstance(pytree, Pytree):
        raise TypeError(f"check_pytree expects an nnx.Pytree, got a {type(pytree).__name__}")
    for name, value in pytree.__dict__.items():
        pytree._check_value(name, value, None)


# -- Flax 0.12.8's other names in nnx.pytreelib -----------------------------------------------
import os as _os  # noqa: E402
import threading as _threading  # noqa: E402

BUILDING_DOCS = "FLAX_DOC_BUILD" in _os.environ
P = tp.TypeVar("P", bound=Pytree)
DataAnnotation = _DATA_TAG
StaticAnnotation = _STATIC_TAG
ObjectMeta = PytreeMeta


@dataclasses.dataclass
class ObjectContext(_threading.local):
    """Per-thread scratch space of Pytree reprs (modules already shown, size statistics).

    >>> OBJECT_CONTEXT.seen_modules_repr is None
    True
    """

    seen_modules_repr: set[int] | None = None
    node_stats: dict[int, dict[type[Variable], tp.Any]] | None = None


OBJECT_CONTEXT = ObjectContext()


class AttributeStatus(tp.NamedTuple):
    """Whether a Pytree attribute is data (a pytree leaf) and whether that was declared.

    >>> AttributeStatus(is_data=True, explicit=False).is_data
    True
    """

    is_data: bool
    explicit: bool


@dataclasses.dataclass(frozen=True, repr=False)
class ArrayRepr(_reprlib.Representable):
    """An array shown by shape and dtype only (``Array(shape=(2, 3), dtype=float32)``).

    >>> import numpy as np
    >>> repr(ArrayRepr.from_array(np.zeros((2, 3), np.float32)))
    "Array(shape=(2, 3), dtype=dtype('float32'))"
    """

    shape: tuple[int, ...]
    dtype: tp.Any

    @staticmethod
    def from_array(array: tp.Any) -> ArrayRepr:
        return ArrayRepr(tuple(array.shape), array.dtype)

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type="Array", same_line=True)
        yield _reprlib.Attr("shape", self.shape)
        yield _reprlib.Attr("dtype", self.dtype)


@dataclasses.dataclass(frozen=True, repr=False)
class MutableArrayRepr(_reprlib.Representable):
    """A ``jax.Ref`` shown by shape and dtype only (``ArrayRef(shape=..., dtype=...)``).

    >>> import numpy as np
    >>> repr(MutableArrayRepr((4,), np.dtype("int32")))
    "ArrayRef(shape=(4,), dtype=dtype('int32'))"
    """

    shape: tuple[int, ...]
    dtype: tp.Any

    @staticmethod
    def from_array(array: tp.Any) -> MutableArrayRepr:
        return MutableArrayRepr(tuple(array.shape), array.dtype)

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type="ArrayRef", same_line=True)
        yield _reprlib.Attr("shape", self.shape)
        yield _reprlib.Attr("dtype", self.dtype)


@dataclasses.dataclass(frozen=True, repr=False)
class VariableRepr(_reprlib.Representable):
    """A Variable's type, (abbreviated) value and metadata, shown as the Variable would be.

    >>> from flaxen import nnx
    >>> print(repr(VariableRepr(nnx.Param, 1.0, {"tag": "w"})))
    Param(
      value=1.0,
      tag='w'
    )
    """

    var_type: type[Variable]
    value: tp.Any
    metadata: dict[str, tp.Any]

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield from variable_repr_items(self.var_type.__name__, self.value, self.metadata)


def _shape_dtype(x: tp.Any) -> tp.Any:
    if isinstance(x, Variable):
        raw = x.get_raw_value() if hasattr(x, "get_raw_value") else x.raw_value
        return VariableRepr(getattr(x, "var_type", type(x)), jax.tree.map(_shape_dtype, raw),
                            dict(x._var_metadata))
    if isinstance(x, (np.ndarray, jax.Array)) or is_array_ref(x):
        if int(np.prod(x.shape)) > 1:
            return (MutableArrayRepr if is_array_ref(x) else ArrayRepr).from_array(x)
    return x


def _shape_dtype_view(value: tp.Any) -> tp.Any:
    """``value`` with its arrays of more than one element (in Variables too) as shape/dtype
    placeholders; graph nodes are left whole, they print themselves the same way."""
    try:
        return jax.tree.map(_shape_dtype, value,
                            is_leaf=lambda x: isinstance(x, (GraphNode, Variable)))
    except Exception:  # noqa: BLE001 - a custom pytree that cannot rebuild with placeholders
        return value
