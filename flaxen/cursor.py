"""Cursors: edit one value deep inside an immutable tree and get a new tree back (``flax.cursor``).

``cursor(obj)`` wraps a tree of dicts, ``FrozenDict``s, lists, tuples, named tuples and
dataclasses (``TrainState`` and other ``struct`` nodes included). Item and attribute access
on a cursor give cursors of the children; assigning to one records a change. ``build()``
returns a copy of the tree with every recorded change applied (the original is never modified),
and ``set(value)`` records one change and builds at once. ``apply_update`` changes every node an
update function changes, ``find``/``find_all`` give cursors of the nodes a condition selects.

>>> from flaxen.cursor import cursor
>>> tree = {'a': 1, 'b': (2, 3)}
>>> cursor(tree)['b'][0].set(10)
{'a': 1, 'b': (10, 3)}
>>> c = cursor(tree)
>>> c['a'] = 5
>>> c['b'][1] = -3
>>> c.build(), tree
({'a': 5, 'b': (2, -3)}, {'a': 1, 'b': (2, 3)})
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import operator
from collections.abc import Callable, Generator, Iterator, Mapping  # noqa: F401 - Flax's names
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from flaxen import errors
from flaxen.core.frozen_dict import FrozenDict
from flaxen.errors import CursorFindError, TraverseTreeError  # noqa: F401 - Flax's names

__all__ = ["AccessType", "Cursor", "Indexable", "Key", "ParentKey", "cursor", "is_named_tuple"]

A = TypeVar("A")
Key = Any  # a dict key, sequence index or attribute name
_STATE = ("_obj", "_parent_key", "_changes")


class AccessType(enum.Enum):
    """How a child is reached from its parent: ``obj[key]`` or ``obj.key``."""

    ITEM = enum.auto()
    ATTR = enum.auto()


@runtime_checkable
class Indexable(Protocol):
    """Anything with ``__getitem__``; ``isinstance`` checks it (the protocol is runtime-checkable).

    >>> isinstance([1], Indexable), isinstance(1, Indexable)
    (True, False)
    """

    def __getitem__(self, key: Any) -> Any: ...


@dataclasses.dataclass
class ParentKey(Generic[A]):
    """Where a cursor sits: its parent cursor, the key, and how the key is applied."""

    parent: Cursor[A]
    key: Key
    access_type: AccessType


def is_named_tuple(obj: Any) -> bool:
    """Whether ``obj`` is an instance of a ``namedtuple``/``typing.NamedTuple`` class.

    >>> import collections
    >>> is_named_tuple(collections.namedtuple("P", "x y")(1, 2)), is_named_tuple((1, 2))
    (True, False)
    """
    return (
        isinstance(obj, tuple)
        and hasattr(obj, "_fields")
        and hasattr(obj, "_asdict")
        and hasattr(obj, "_replace")
    )


_is_namedtuple = is_named_tuple


def _children(obj: Any) -> Iterator[tuple[Any, AccessType, Any]]:
    """``(key, access type, child)`` of a container node; nothing for a leaf."""
    if isinstance(obj, (dict, FrozenDict)):
        for key in obj.keys():
            yield key, AccessType.ITEM, obj[key]
    elif _is_namedtuple(obj):
        for name in obj._fields:
            yield name, AccessType.ATTR, getattr(obj, name)
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield index, AccessType.ITEM, value
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            yield field.name, AccessType.ATTR, getattr(obj, field.name)


def _path_str(path: tuple[tuple[Any, AccessType], ...]) -> str:
    return "/".join(str(key) for key, _ in path)


def _traverse_tree(
    path: tuple[tuple[Any, AccessType], ...],
    obj: Any,
    *,
    update_fn: Callable[[str, Any], Any] | None = None,
    cond_fn: Callable[[str, Any], bool] | None = None,
) -> Generator[Any, None, None]:
    """Walks the nodes below ``obj`` depth first (the root itself is not visited).

    With ``update_fn``: yields ``(path, new_value)`` for each node it returns a different object
    for, without descending into it. With ``cond_fn``: yields the ``path`` of each node it
    accepts, without descending into it. ``path`` is a tuple of ``(key, AccessType)``; the
    functions receive it as a ``'/'``-joined string. Exactly one of the two must be given.
    """
    if (update_fn is None) == (cond_fn is None):
        raise errors.TraverseTreeError(update_fn, cond_fn)
    for key, access, child in _children(obj):
        child_path = (*path, (key, access))
        if update_fn is not None:
            new = update_fn(_path_str(child_path), child)
            if new is not child:
                yield child_path, new
                continue
        elif cond_fn is not None and cond_fn(_path_str(child_path), child):
            yield child_path
            continue
        yield from _traverse_tree(child_path, child, update_fn=update_fn, cond_fn=cond_fn)


def _rebuild(obj: Any, updates: dict[Any, Any]) -> Any:
    """A copy of ``obj`` with ``updates`` (key -> new child) applied; ``obj`` is not modified."""
    if isinstance(obj, FrozenDict):
        return FrozenDict({**{k: obj[k] for k in obj.keys()}, **updates})
    if isinstance(obj, dict):
        new_dict = copy.copy(obj)
        new_dict.update(updates)
        return new_dict
    if _is_namedtuple(obj):
        return obj._replace(**updates)
    if isinstance(obj, list):
        new_list = copy.copy(obj)
        for index, value in updates.items():
            new_list[index] = value
        return new_list
    if isinstance(obj, tuple):
        items = list(obj)
        for index, value in updates.items():
            items[index] = value
        return type(obj)(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        init = {f.name for f in dataclasses.fields(obj) if f.init}
        new = dataclasses.replace(obj, **{k: v for k, v in updates.items() if k in init})
        for name, value in updates.items():
            if name not in init:
                object.__setattr__(new, name, value)
        return new
    if hasattr(obj, "__dict__"):
        new = copy.copy(obj)
        for name, value in updates.items():
            object.__setattr__(new, name, value)
        return new
    raise NotImplementedError(
        f"Cursor.build() cannot rebuild an object of type {type(obj)} with changed "
        f"children {list(updates)}: supported are dicts, FrozenDicts, lists, tuples, named "
        "tuples, dataclasses and objects with attributes. Change its parent instead."
    )


def _binary(op: Callable[[Any, Any], Any], reflected: bool = False) -> Callable[..., Any]:
    if reflected:
        return lambda self, other: op(other, self._obj)
    return lambda self, other: op(self._obj, other)


def _unary(op: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda self: op(self._obj)


class Cursor(Generic[A]):
    """A position in a tree that records changes; see the module docstring.

    Arithmetic and comparison operators apply to the wrapped value and return plain values,
    so ``c[1] += 1`` reads the current value and records the sum as a change.
    """

    _obj: A
    _parent_key: ParentKey | None
    _changes: dict[Any, Cursor]

    def __init__(self, obj: A, parent_key: ParentKey | None) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_parent_key", parent_key)
        object.__setattr__(self, "_changes", {})

    # --- navigation -------------------------------------------------------------------

    @property
    def _root(self) -> Cursor:
        node = self
        while node._parent_key is not None:
            node = node._parent_key.parent
        return node

    @property
    def _path(self) -> str:
        parts = []
        node = self
        while node._parent_key is not None:
            pk = node._parent_key
            parent, key, access = pk.parent, pk.key, pk.access_type
            parts.append(f".{key}" if access is AccessType.ATTR else f"[{key!r}]")
            node = parent
        return "".join(reversed(parts))

    def _child_key(self, key: Any) -> tuple[Any, AccessType]:
        # A named tuple's fields are reachable both as c[0] and c.x: both name one child.
        obj: Any = self._obj
        if _is_namedtuple(obj) and isinstance(key, int):
            return obj._fields[key], AccessType.ATTR
        return key, AccessType.ITEM

    def _child(self, key: Any, access: AccessType) -> Cursor:
        if key not in self._changes:
            obj: Any = self._obj
            value = getattr(obj, key) if access is AccessType.ATTR else obj[key]
            self._changes[key] = Cursor(value, ParentKey(self, key, access))
        return self._changes[key]

    def __getitem__(self, key: Any) -> Cursor:
        return self._child(*self._child_key(key))

    def __getattr__(self, name: str) -> Cursor:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (copy, numpy, jax) are not children
        return self._child(name, AccessType.ATTR)

    def __setitem__(self, key: Any, value: Any) -> None:
        key, access = self._child_key(key)
        self._changes[key] = Cursor(value, ParentKey(self, key, access))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _STATE:
            object.__setattr__(self, name, value)
            return
        self._changes[name] = Cursor(value, ParentKey(self, name, AccessType.ATTR))

    def _navigate(self, path: tuple[tuple[Any, AccessType], ...]) -> Cursor:
        node = self
        for key, access in path:
            node = node._child(key, access)
        return node

    # --- building ---------------------------------------------------------------------

    def build(self) -> A:
        """A new tree: the wrapped object with every change recorded below this cursor.

        >>> c = cursor([1, (2, 3)])
        >>> c[1][0] = 20
        >>> c.build()
        [1, (20, 3)]
        """
        if not self._changes:
            return self._obj
        updates = {key: child.build() for key, child in self._changes.items()}
        return _rebuild(self._obj, updates)

    def set(self, value: Any) -> Any:
        """Replaces the value at this position and returns the rebuilt root tree.

        >>> cursor({'a': {'b': 1}})['a']['b'].set(2)
        {'a': {'b': 2}}
        """
        if self._parent_key is None:
            return value
        pk = self._parent_key
        parent, key, access = pk.parent, pk.key, pk.access_type
        parent._changes[key] = Cursor(value, ParentKey(parent, key, access))
        return self._root.build()

    def apply_update(self, update_fn: Callable[[str, Any], Any]) -> Cursor[A]:
        """Records ``update_fn(path, value)`` for every node below this one; returns ``self``.

        ``path`` is the ``'/'``-joined keys from this cursor (``'Dense_0/kernel'``). Where the
        function returns a different object, that object replaces the node (and its children
        are not visited); where it returns the value itself, the walk goes on inside it.

        >>> double = lambda path, v: v * 2 if isinstance(v, int) else v
        >>> cursor({'a': 1, 'b': [2, 3]}).apply_update(double).build()
        {'a': 2, 'b': [4, 6]}
        """
        for path, value in list(_traverse_tree((), self._obj, update_fn=update_fn)):
            *head, (key, access) = path
            parent = self._navigate(tuple(head))
            parent._changes[key] = Cursor(value, ParentKey(parent, key, access))
        return self

    def find_all(self, cond_fn: Callable[[str, Any], bool]) -> Generator[Cursor, None, None]:
        """Cursors of every node below this one for which ``cond_fn(path, value)`` is True.

        A matching node's children are not searched.

        >>> c = cursor({'x': [1, 2], 'y': [3]})
        >>> [sub._path for sub in c.find_all(lambda path, v: isinstance(v, list))]
        ["['x']", "['y']"]
        """
        for path in list(_traverse_tree((), self._obj, cond_fn=cond_fn)):
            yield self._navigate(path)

    def find(self, cond_fn: Callable[[str, Any], bool]) -> Cursor:
        """The cursor of the one node ``cond_fn(path, value)`` selects.

        Raises ``CursorFindError`` when it selects none or more than one.

        >>> cursor({'a': 1, 'b': 2}).find(lambda path, v: path == 'b').set(5)
        {'a': 1, 'b': 5}
        """
        paths = []
        for path in _traverse_tree((), self._obj, cond_fn=cond_fn):
            paths.append(path)
            if len(paths) == 2:
                raise errors.CursorFindError(self._navigate(paths[0]), self._navigate(path))
        if not paths:
            raise errors.CursorFindError()
        return self._navigate(paths[0])

    # --- containers -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._obj)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Cursor]:
        if not isinstance(self._obj, (tuple, list)):
            raise NotImplementedError(
                "__iter__ method only implemented for tuples and lists, not type "
                f"{type(self._obj)}. Index the cursor by key instead (c[key])."
            )
        return (self[i] for i in range(len(self._obj)))

    def __reversed__(self) -> Iterator[Cursor]:
        if not isinstance(self._obj, (tuple, list)):
            raise NotImplementedError(
                "__reversed__ method only implemented for tuples and lists, not type "
                f"{type(self._obj)}. Index the cursor by key instead (c[key])."
            )
        return (self[i] for i in reversed(range(len(self._obj))))

    # --- display ----------------------------------------------------------------------

    def __repr__(self) -> str:
        return self._repr(0)

    def _repr(self, indent: int) -> str:
        pad = " " * indent
        obj = repr(self._obj).replace("\n", "\n" + pad + "  ")
        if not self._changes:
            changes = "{}"
        else:
            entries = []
            for key, child in self._changes.items():
                head = f"{pad}    {key!r}: "
                entries.append(head + child._repr(len(head)))
            changes = "{\n" + ",\n".join(entries) + f"\n{pad}  }}"
        return f"Cursor(\n{pad}  _obj={obj},\n{pad}  _changes={changes}\n{pad})"

    # --- operators on the wrapped value ---------------------------------------------------

    __neg__ = _unary(operator.neg)
    __pos__ = _unary(operator.pos)
    __abs__ = _unary(abs)
    __invert__ = _unary(operator.invert)

    def __round__(self, ndigits: int | None = None) -> Any:
        obj: Any = self._obj
        return round(obj, ndigits) if ndigits is not None else round(obj)

    __add__, __radd__ = _binary(operator.add), _binary(operator.add, True)
    __sub__, __rsub__ = _binary(operator.sub), _binary(operator.sub, True)
    __mul__, __rmul__ = _binary(operator.mul), _binary(operator.mul, True)
    __truediv__, __rtruediv__ = _binary(operator.truediv), _binary(operator.truediv, True)
    __floordiv__, __rfloordiv__ = _binary(operator.floordiv), _binary(operator.floordiv, True)
    __mod__, __rmod__ = _binary(operator.mod), _binary(operator.mod, True)
    __divmod__, __rdivmod__ = _binary(divmod), _binary(divmod, True)
    __pow__, __rpow__ = _binary(pow), _binary(pow, True)
    __lshift__, __rlshift__ = _binary(operator.lshift), _binary(operator.lshift, True)
    __rshift__, __rrshift__ = _binary(operator.rshift), _binary(operator.rshift, True)
    __and__, __rand__ = _binary(operator.and_), _binary(operator.and_, True)
    __xor__, __rxor__ = _binary(operator.xor), _binary(operator.xor, True)
    __or__, __ror__ = _binary(operator.or_), _binary(operator.or_, True)
    __matmul__, __rmatmul__ = _binary(operator.matmul), _binary(operator.matmul, True)
    __lt__ = _binary(operator.lt)
    __le__ = _binary(operator.le)
    __eq__ = _binary(operator.eq)  # type: ignore[assignment]
    __ne__ = _binary(operator.ne)  # type: ignore[assignment]
    __gt__ = _binary(operator.gt)
    __ge__ = _binary(operator.ge)
    # cursors compare by value, like their objects, so they are unhashable
    __hash__ = None  # type: ignore[assignment]


def cursor(obj: A) -> Cursor[A]:
    """A root :class:`Cursor` over ``obj`` (which is never modified).

    >>> from flaxen.cursor import cursor
    >>> cursor((1, [2, 3]))[1][0].set(-2)
    (1, [-2, 3])
    """
    return Cursor(obj, None)

