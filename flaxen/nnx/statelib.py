"""State: the nested, filterable mapping of Variables that ``nnx.split`` returns.

Keys are attribute names (and list indices); leaves are Variables (today's ``flax.nnx``),
snapshots (the 0.8.3 face's ``VariableState``, see :mod:`flaxen.nnx._snapshots`) or plain
arrays after a user maps them away. A State is a pytree, so it passes straight into
``jax.jit``, ``jax.grad`` or Optax.
:class:`FlatState` is the sorted ``(path, leaf)`` sequence form; the module functions
(``to_flat_state``, ``to_pure_dict``, ``replace_by_pure_dict``, ``diff`` ...) are
``nnx.statelib``'s.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> s = nnx.State({'a': {'w': nnx.Param.state(jnp.ones(2))}, 'b': nnx.BatchStat.state(0.0)})
>>> s.a.w.value.shape
(2,)
>>> params, stats = s.split(nnx.Param, nnx.BatchStat)
>>> list(dict(params.flat_state())), list(dict(stats.flat_state()))
([('a', 'w')], [('b',)])
>>> merged = nnx.State.merge(params, stats)
>>> sorted(dict(merged.flat_state()))
[('a', 'w'), ('b',)]
"""

from __future__ import annotations

import typing as tp
import weakref
from collections.abc import Mapping, MutableMapping

import jax

from flaxen._tree_compare import check_restored
from flaxen.errors import GraphStateMismatchError, NNXFilterError
from flaxen.nnx import _treescope, filterlib
from flaxen.nnx import reprlib as _reprlib
from flaxen.nnx._snapshots import SNAPSHOT_TYPES
from flaxen.nnx.variablelib import Variable, _leaves_equal
from flaxen.typing import PathParts as PathParts  # Flax imports it here from flax.typing

Key = tp.Hashable
Path = tuple[Key, ...]


def _sort_keys(keys: tp.Iterable[Key]) -> list[Key]:
    keys = list(keys)
    try:
        return sorted(keys)  # type: ignore[type-var]  # mixed key types: handled below
    except TypeError:  # mixed key types: ints before strings, each sorted
        return sorted(keys, key=lambda k: (type(k).__name__, str(k)))


class State(MutableMapping, _reprlib.Representable):
    """A nested mapping from attribute names to sub-States and Variables.

    As in Flax, only the top level is a State: the levels below are plain ``dict`` s in its
    storage (a sub-State given to it is stored as its dict), so JAX flattens them natively,
    and ``state[key]`` hands a nested level out as a State that shares that dict (changes to
    one show in the other). With ``_copy=False`` a ``dict`` becomes the State's own storage.

    >>> from flaxen import nnx
    >>> raw = {'a': 1}
    >>> s = nnx.State(raw, _copy=False)
    >>> s['b'] = 2
    >>> raw
    {'a': 1, 'b': 2}
    """

    __treescope_repr__ = _treescope.state_repr

    def __init__(self, mapping: Mapping[Key, tp.Any] | tp.Iterable[tuple[Key, tp.Any]] = (),
                 /, *, _copy: bool = True) -> None:
        if not _copy and type(mapping) is dict:
            object.__setattr__(self, "_mapping", mapping)
            return
        if isinstance(mapping, State):
            mapping = mapping._mapping
        items = mapping.items() if isinstance(mapping, Mapping) else mapping
        object.__setattr__(self, "_mapping", {k: _raw(v) for k, v in items})

    @classmethod
    def _from_raw(cls, raw: dict) -> State:
        s = object.__new__(cls)
        object.__setattr__(s, "_mapping", raw)
        return s

    @property
    def raw_mapping(self) -> dict[Key, tp.Any]:
        _EDITS[0] += 1  # the dict may now change behind the State's back
        return self._mapping

    # -- mapping protocol ----------------------------------------------------------------
    def __getitem__(self, key: Key) -> tp.Any:
        value = self._mapping[key]
        if isinstance(value, dict):
            return self._from_raw(value)
        return value

    def __setitem__(self, key: Key, value: tp.Any) -> None:
        self._mapping[key] = _raw(value)
        _EDITS[0] += 1

    def __delitem__(self, key: Key) -> None:
        del self._mapping[key]
        _EDITS[0] += 1

    def __iter__(self) -> tp.Iterator[Key]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __contains__(self, key: object) -> bool:
        return key in self._mapping

    # A State that came out of a pytree unflatten (every jitted call's output) keeps its
    # keys and children as given until something first reads its dict: a State that only
    # goes back into the next jitted call is flattened straight from them.
    _pending: tuple | None = None

    def __getattr__(self, name: str) -> tp.Any:
        if name == "_mapping":  # not built yet (see _pending)
            pending = object.__getattribute__(self, "_pending")
            if pending is None:  # a bare object (mid-unpickling): no storage yet
                raise AttributeError(name)
            mapping = dict(zip(*pending))
            object.__setattr__(self, "_mapping", mapping)
            object.__setattr__(self, "_pending", None)
            return mapping
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"State has no key {name!r}; its keys are {list(self._mapping)}."
            ) from None

    def __setattr__(self, name: str, value: tp.Any) -> None:
        self[name] = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return False
        a, b = _flat_mapping(self), _flat_mapping(State(other))
        return a.keys() == b.keys() and all(_leaf_equal(a[k], b[k]) for k in a)

    __hash__ = None  # type: ignore[assignment]

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type(self), kv_sep=": ", start="({", end="})")
        for key, value in self.items():
            shown = NestedStateRepr(value) if isinstance(value, State) else value
            yield _reprlib.Attr(repr(key), shown, use_raw_key=True)

    # -- flat views ------------------------------------------------------------------------
    def flat_state(self) -> FlatState:
        """The ``(path tuple, leaf)`` pairs sorted by path, as :func:`to_flat_state` (Flax
        0.12.8); ``dict(state.flat_state())`` is the mapping Flax 0.8.3's face returned.

        >>> import jax.numpy as jnp
        >>> from flaxen import nnx
        >>> s = nnx.State({'b': nnx.Param(jnp.ones(1)), 'a': {'w': nnx.Param(jnp.ones(2))}})
        >>> [path for path, _ in s.flat_state()]
        [('a', 'w'), ('b',)]
        """
        return to_flat_state(self)

    @classmethod
    def from_flat_path(cls, flat_state: Mapping[Path, tp.Any] | tp.Iterable[tuple[Path, tp.Any]],
                       /) -> State:
        items = flat_state.items() if isinstance(flat_state, Mapping) else flat_state
        root: dict = {}
        for path, leaf in items:
            node = root
            for k in path[:-1]:
                node = node.setdefault(k, {})
            node[path[-1]] = leaf
        return cls._from_raw(root)

    # -- filtering -------------------------------------------------------------------------
    def filter(self, first: filterlib.Filter, /, *filters: filterlib.Filter
               ) -> State | tuple[State, ...]:
        """One State per filter; leaves matching no filter are dropped."""
        states = _split(self, (first, *filters), exhaustive=False)
        return states[0] if not filters else states

    def split(self, first: filterlib.Filter, /, *filters: filterlib.Filter
              ) -> State | tuple[State, ...]:
        """One State per filter (first match wins); every leaf must match some filter."""
        states = _split(self, (first, *filters), exhaustive=True)
        return states[0] if not filters else states

    @classmethod
    def merge(cls, state: Mapping, /, *states: Mapping) -> State:
        """Union of States (a ``cls``); later ones win where paths collide."""
        flat: dict[Path, tp.Any] = {}
        for s in (state, *states):
            _flatten_into(s, (), flat)
        return cls.from_flat_path(flat)

    def to_pure_dict(self, extract_fn: tp.Callable[[tp.Any], tp.Any] | None = None
                     ) -> dict[Key, tp.Any]:
        """Nested plain dicts of the leaf values (see :func:`to_pure_dict`)."""
        return to_pure_dict(self, extract_fn)

    def replace_by_pure_dict(self, pure_dict: Mapping[Key, tp.Any],
                             replace_fn: tp.Callable[[tp.Any, tp.Any], tp.Any] | None = None,
                             *, strict: bool = False) -> None:
        """Puts ``pure_dict``'s values into this State (see :func:`replace_by_pure_dict`)."""
        replace_by_pure_dict(self, pure_dict, replace_fn, strict=strict)

    def map(self, f: tp.Callable[[Path, tp.Any], tp.Any]) -> State:
        """A new State with each leaf replaced by ``f(path, leaf)``."""
        return map_state(f, self)

    def __or__(self, other: State) -> State:
        return State.merge(self, other)

    def __sub__(self, other: State) -> State:
        drop = set(_flat_mapping(State(other)))
        return State.from_flat_path(
            (p, v) for p, v in _flat_mapping(self).items() if p not in drop
        )


# -- remembered leaves ----------------------------------------------------------------------
# ``nnx.split`` knows the leaves of the State it builds, in its graph definition's order;
# ``nnx.merge`` of that same, unchanged State reuses them instead of walking
# it again. "Unchanged" is kept coarse and cheap: every write to any State (item set or
# delete, or handing out its raw dict) counts as an edit, and a remembered list only holds
# while no edit happened since it was recorded.
_EDITS = [0]


# Kept beside the States, not in them, so that a copy or pickle of a State never carries
# leaves that are not its own; an entry goes with its State.
_REMEMBERED: dict[int, tuple] = {}


def remember_leaves(state: State, key: tp.Any, leaves: tp.Sequence[tp.Any]) -> None:
    """Records that ``state`` (just built, unshared) holds ``leaves`` in ``key``'s order."""
    i = id(state)

    def forget(_: object) -> None:
        _REMEMBERED.pop(i, None)

    _REMEMBERED[i] = (weakref.ref(state, forget), _EDITS[0], key, leaves)


def remembered_leaves(state: State, key: tp.Any) -> tp.Sequence[tp.Any] | None:
    """The leaves :func:`remember_leaves` recorded for ``key``, while still valid."""
    got = _REMEMBERED.get(id(state))
    if got is not None and got[2] is key and got[1] == _EDITS[0] and got[0]() is state:
        return got[3]
    return None


def _raw(value: tp.Any) -> tp.Any:
    """What a State stores for ``value``: a sub-State's dict, a non-dict mapping as a dict
    (its own nested mappings likewise), anything else as it is."""
    if isinstance(value, State):
        return value._mapping
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return {k: _raw(v) for k, v in value.items()}
    return value


def _flat_mapping(state: Mapping) -> dict[Path, tp.Any]:
    """``{path tuple: leaf}`` for every leaf of ``state``, depth first (no sort)."""
    out: dict[Path, tp.Any] = {}
    _flatten_into(state, (), out)
    return out


def _flatten_into(node: Mapping, prefix: Path, out: dict) -> None:
    items = node._mapping.items() if isinstance(node, State) else node.items()
    for k, v in items:
        if isinstance(v, Mapping):
            if len(v) == 0:
                continue
            _flatten_into(v, (*prefix, k), out)
        else:
            out[(*prefix, k)] = v


def _split(state: State, filters: tuple, exhaustive: bool) -> tuple[State, ...]:
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in preds]
    for path, leaf in _flat_mapping(state).items():
        for i, pred in enumerate(preds):
            if pred(path, leaf):
                buckets[i].append((path, leaf))
                break
        else:
            if exhaustive:
                raise NNXFilterError(
                    f"/{'/'.join(map(str, path))}", f"State.split: Non-exhaustive filters, got "
                    f"a non-empty remainder: this leaf ({_describe(leaf)}) matches none of the "
                    f"filters {list(filters)!r}",
                    "Add a filter for it, or '...' as the last filter to take the rest.")
    return tuple(State.from_flat_path(b) for b in buckets)


def _describe(leaf: tp.Any) -> str:
    if isinstance(leaf, Variable) or type(leaf) in SNAPSHOT_TYPES:
        return f"a {leaf.type.__name__}"
    return type(leaf).__name__


# A State's children go in sorted key order. The order is remembered per key tuple (in
# the dict's own order) as a permutation, or None when the dict already holds its keys
# sorted (a State that came out of unflatten or split): flattening it again is one lookup.
# Only tuples of plain str or plain int keys are remembered, whose equal tuples sort alike
# (True == 1, but a bool sorts apart from ints); bounded, so ever-new keys cannot grow it.
_ORDER: dict[tuple, tuple[int, ...] | None] = {}


def _key_order(m: dict) -> tuple[tuple, bool]:
    keys = tuple(m)
    try:
        perm = _ORDER[keys]
    except KeyError:
        order = tuple(_sort_keys(keys))
        position = {id(k): i for i, k in enumerate(keys)}
        perm = None if order == keys else tuple(position[id(k)] for k in order)
        if _uniform(keys):
            if len(_ORDER) >= 4096:
                _ORDER.clear()
            _ORDER[keys] = perm
    if perm is None:
        return keys, True
    return tuple([keys[i] for i in perm]), False


def _uniform(keys: tuple) -> bool:
    kinds = set(map(type, keys))
    return kinds == {str} or kinds == {int}


def _state_flatten_with_keys(s: State) -> tuple[list, tuple]:
    m = s._mapping
    keys, _ = _key_order(m)
    return [(jax.tree_util.DictKey(k), m[k]) for k in keys], keys


def _state_flatten(s: State) -> tuple[tp.Iterable, tuple]:
    pending = s._pending
    if pending is not None:
        return pending[1], pending[0]
    m = s._mapping
    keys, in_order = _key_order(m)
    return (m.values() if in_order else [m[k] for k in keys]), keys


def _state_unflatten(keys: tuple, children: tp.Iterable[tp.Any]) -> State:
    s = _new(State)
    _setattr(s, "_pending", (keys, tuple(children)))
    return s


_new, _setattr = object.__new__, object.__setattr__


jax.tree_util.register_pytree_with_keys(
    State, _state_flatten_with_keys, _state_unflatten, flatten_func=_state_flatten
)


def _leaf_equal(a: tp.Any, b: tp.Any) -> bool:
    if isinstance(a, Variable) or isinstance(b, Variable):
        return (type(a) is type(b) and a.get_metadata() == b.get_metadata()
                and _leaves_equal(a.get_raw_value(), b.get_raw_value()))
    if type(a) in SNAPSHOT_TYPES or type(b) in SNAPSHOT_TYPES:
        return a == b
    return _leaves_equal(a, b)


# -- FlatState ---------------------------------------------------------------------------

_V = tp.TypeVar("_V")


class FlatState(tp.Sequence[tuple[Path, _V]], _reprlib.Representable):
    """A State as a sequence of ``(path, leaf)`` pairs (sorted by path when built from one).

    >>> from flaxen import nnx
    >>> flat = nnx.to_flat_state(nnx.State({'b': nnx.Param(1.0), 'a': {'c': nnx.Param(2.0)}}))
    >>> flat.paths
    (('a', 'c'), ('b',))
    >>> path, leaf = flat[1]
    >>> path, leaf.get_value()
    (('b',), 1.0)

    As in Flax it compares and hashes by identity; compare ``paths`` and ``leaves`` instead.
    """

    __slots__ = ("_keys", "_values")

    def __init__(self, items: tp.Iterable[tuple[Path, tp.Any]], /, *, sort: bool = True
                 ) -> None:
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        if sort:
            try:
                pairs.sort(key=lambda kv: kv[0])
            except TypeError:
                pairs.sort(key=lambda kv: tuple((type(k).__name__, str(k)) for k in kv[0]))
        self._keys = tuple(p for p, _ in pairs)
        self._values = [v for _, v in pairs]

    @staticmethod
    def from_sorted_keys_values(keys: tuple[Path, ...], values: list[tp.Any], /) -> FlatState:
        flat = object.__new__(FlatState)
        flat._keys = tuple(keys)
        flat._values = list(values)
        return flat

    @property
    def paths(self) -> tuple[Path, ...]:
        return self._keys

    @property
    def leaves(self) -> list[tp.Any]:
        return self._values

    def __getitem__(self, index: tp.Any) -> tp.Any:  # type: ignore[override]
        if isinstance(index, slice):
            return FlatState.from_sorted_keys_values(self._keys[index], self._values[index])
        return self._keys[index], self._values[index]

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> tp.Iterator[tuple[Path, tp.Any]]:
        return iter(zip(self._keys, self._values))

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object(type="FlatState", kv_sep="", start="([", end="])")
        for pair in self:
            yield _reprlib.Attr("", pair, use_raw_key=True)

    def to_nested_state(self) -> State:
        return from_flat_state(self)

    def split(self, first: filterlib.Filter, /, *filters: filterlib.Filter
              ) -> FlatState | tuple[FlatState, ...]:
        """One FlatState per filter (first match wins); every leaf must match one."""
        *parts, rest = _split_flat(self, (first, *filters))
        if len(rest):
            path, leaf = rest[0]
            raise NNXFilterError(
                f"/{'/'.join(map(str, path))}", "FlatState.split: Non-exhaustive filters, got a "
                f"non-empty remainder: this leaf ({_describe(leaf)}) matches none of the filters "
                f"{[first, *filters]!r}", "Add '...' as the last filter to take the rest.")
        return parts[0] if len(parts) == 1 else tuple(parts)

    def filter(self, first: filterlib.Filter, /, *filters: filterlib.Filter
               ) -> FlatState | tuple[FlatState, ...]:
        """One FlatState per filter; leaves matching none are dropped."""
        *parts, _ = _split_flat(self, (first, *filters))
        return parts[0] if len(parts) == 1 else tuple(parts)

    @staticmethod
    def merge(flat_state: tp.Iterable[tuple[Path, tp.Any]], /,
              *flat_states: tp.Iterable[tuple[Path, tp.Any]]) -> FlatState:
        """One sorted FlatState of all pairs (later ones win where paths repeat)."""
        if not flat_states and isinstance(flat_state, FlatState):
            return flat_state
        merged: dict[Path, tp.Any] = {}
        for fs in (flat_state, *flat_states):
            merged.update(fs.items() if isinstance(fs, Mapping) else fs)
        return FlatState(merged.items(), sort=True)


def _split_flat(flat: FlatState, filters: tuple) -> list[FlatState]:
    preds = filterlib.filters_to_predicates(filters)
    buckets: list[list] = [[] for _ in range(len(preds) + 1)]
    for path, leaf in flat:
        for i, pred in enumerate(preds):
            if pred(path, leaf):
                buckets[i].append((path, leaf))
                break
        else:
            buckets[-1].append((path, leaf))
    return [FlatState(b, sort=False) for b in buckets]


jax.tree_util.register_pytree_node(
    FlatState,
    lambda f: (f._values, f._keys),
    lambda keys, values: FlatState.from_sorted_keys_values(keys, list(values)),
)


# -- statelib functions --------------------------------------------------------------------


def to_flat_state(state: Mapping[Key, tp.Any]) -> FlatState:
    """The State as a :class:`FlatState` sorted by path (empty sub-States dropped)."""
    flat: dict[Path, tp.Any] = {}
    _flatten_into(state, (), flat)
    return FlatState(flat.items(), sort=True)


def from_flat_state(flat_state: tp.Mapping[Path, tp.Any] | tp.Iterable[tuple[Path, tp.Any]],
                    *, cls: type[State] = State) -> State:
    """The nested State for ``(path, leaf)`` pairs (a FlatState, a dict or any iterable)."""
    state = State.from_flat_path(flat_state)
    return state if cls is State else cls(state._mapping)


def map_state(f: tp.Callable[[Path, tp.Any], tp.Any], state: Mapping[Key, tp.Any]) -> State:
    """A new State with each leaf replaced by ``f(path, leaf)``.

    >>> from flaxen import nnx
    >>> s = nnx.map_state(lambda p, v: v.get_value() * 2, nnx.State({'a': nnx.Param(1.0)}))
    >>> s['a']
    2.0
    """
    return from_flat_state((p, f(p, v)) for p, v in to_flat_state(state))


def _extract(x: tp.Any) -> tp.Any:
    if isinstance(x, Variable):
        return x.get_value()
    if type(x) in SNAPSHOT_TYPES:
        return x.value
    return x


def to_pure_dict(state: Mapping[Key, tp.Any],
                 extract_fn: tp.Callable[[tp.Any], tp.Any] | None = None) -> dict[Key, tp.Any]:
    """Nested plain dicts holding each leaf's value (Variables unwrapped), e.g. to checkpoint.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> nnx.to_pure_dict(nnx.State({'layer': {'w': nnx.Param(jnp.ones(2))}}))
    {'layer': {'w': Array([1., 1.], dtype=float32)}}
    """
    fn = _extract if extract_fn is None else extract_fn
    root: dict[Key, tp.Any] = {}
    for path, leaf in to_flat_state(state):
        node = root
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = fn(leaf)
    return root


def _int_or_same(x: tp.Any) -> tp.Any:
    try:
        return int(x)
    except (TypeError, ValueError):
        return x


def restore_int_paths(pure_dict: Mapping[Key, tp.Any]) -> dict[Key, tp.Any]:
    """Turns string keys that spell integers back into ints (checkpoints store list
    indices such as ``layers/0`` as strings).

    >>> from flaxen import nnx
    >>> nnx.restore_int_paths({'layers': {'0': 1, 'w': 2}})
    {'layers': {0: 1, 'w': 2}}
    """
    flat: dict[Path, tp.Any] = {}
    _flatten_into(pure_dict, (), flat)
    return _nested_dict((tuple(map(_int_or_same, p)), v) for p, v in flat.items())


def _nested_dict(items: tp.Iterable[tuple[Path, tp.Any]]) -> dict[Key, tp.Any]:
    root: dict[Key, tp.Any] = {}
    for path, leaf in items:
        node = root
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = leaf
    return root


def _replace_leaf(leaf: tp.Any, value: tp.Any) -> tp.Any:
    if isinstance(leaf, Variable) or type(leaf) in SNAPSHOT_TYPES:
        return leaf.replace(value)
    return value


def replace_by_pure_dict(state: State, pure_dict: Mapping[Key, tp.Any],
                         replace_fn: tp.Callable[[tp.Any, tp.Any], tp.Any] | None = None,
                         *, strict: bool = False) -> None:
    """Puts ``pure_dict``'s values into ``state`` in place, keeping each leaf's Variable type
    and metadata (string keys that spell list indices match integer paths).

    ``strict=True`` (flaxen's, off by default as in Flax) first checks that ``pure_dict`` holds
    exactly the State's paths, each with the same shape and dtype, and raises one
    :class:`~flaxen.errors.RestoreMismatchError` listing every difference; nothing is written.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> s = nnx.State({'w': nnx.Param(jnp.ones(2))})
    >>> nnx.replace_by_pure_dict(s, {'w': jnp.zeros(2)})
    >>> type(s['w']).__name__, s['w'][...].tolist()
    ('Param', [0.0, 0.0])
    """
    fn = _replace_leaf if replace_fn is None else replace_fn
    current: dict[Path, tp.Any] = {}
    _flatten_into(state, (), current)
    new: dict[Path, tp.Any] = {}
    _flatten_into(pure_dict, (), new)
    if strict:
        check_paths(current, {p if p in current else tuple(map(_int_or_same, p)): v
                              for p, v in new.items()})
    for path, value in new.items():
        key = path if path in current else tuple(map(_int_or_same, path))
        if key not in current:
            raise GraphStateMismatchError(
                f"/{'/'.join(map(str, path))}",
                "replace_by_pure_dict: this key of the pure dict is not in the State "
                f"(the State's paths are {sorted(map(str, current))[:8]}...)",
                "Build the pure dict with nnx.to_pure_dict from a State of the same model.")
        current[key] = fn(current[key], value)
    state.update(_nested_dict(current.items()))


def filter_state(state: State, first: filterlib.Filter, /, *filters: filterlib.Filter
                 ) -> State | tuple[State, ...]:
    """``state.filter(...)`` as a function."""
    return State(state).filter(first, *filters)


def split_state(state: State, first: filterlib.Filter, /, *filters: filterlib.Filter
                ) -> State | tuple[State, ...]:
    """``state.split(...)`` as a function."""
    return State(state).split(first, *filters)


def merge_state(state: Mapping[Key, tp.Any], /, *states: Mapping[Key, tp.Any],
                cls: type[State] = State) -> State:
    """Union of States (later ones win where paths collide)."""
    merged = State.merge(state, *states)
    return merged if cls is State else cls(merged._mapping)


def diff(state: Mapping[Key, tp.Any], other: Mapping[Key, tp.Any]) -> State:
    """The part of ``state`` whose paths are not in ``other``.

    >>> from flaxen import nnx
    >>> a = nnx.State({'x': nnx.Param(1.0), 'y': nnx.Param(2.0)})
    >>> list(nnx.statelib.diff(a, nnx.State({'x': nnx.Param(0.0)})))
    ['y']
    """
    if not other:
        return state if isinstance(state, State) else State(state)
    drop = set(to_flat_state(other).paths)
    return from_flat_state((p, v) for p, v in to_flat_state(state) if p not in drop)


def check_paths(target: Mapping[Path, tp.Any], restored: Mapping[Path, tp.Any]) -> None:
    """Raises one :class:`~flaxen.errors.RestoreMismatchError` listing every path (flat
    ``{path: leaf}`` maps; Variables are compared by their value) that one side lacks or whose
    shape or dtype differs; the check behind the NNX ``strict=True`` restores.

    >>> import numpy as np
    >>> check_paths({('w',): np.zeros(2)}, {('w',): np.ones(2)})  # same shape and dtype
    """
    def arrays(flat: Mapping[Path, tp.Any]) -> dict[str, tp.Any]:
        return {"/".join(map(str, p)): (v.get_value() if isinstance(v, Variable) else v)
                for p, v in flat.items()}

    check_restored(arrays(target), arrays(restored))


# -- Flax 0.12.8's other names in nnx.statelib ------------------------------------------------

A = tp.TypeVar("A")
K = tp.TypeVar("K", bound=tp.Hashable)
S = tp.TypeVar("S", bound=State)
V = tp.TypeVar("V")
ExtractValueFn = tp.Callable[[tp.Any], tp.Any]
SetValueFn = tp.Callable[[V, tp.Any], V]


def create_path_filters(state: Mapping[Key, tp.Any]) -> dict[filterlib.PathIn, tp.Any]:
    """Groups the leaves of ``state`` by value: ``{PathIn(*paths): value}``.

    Variables count by their value, which must be hashable (partition specs, names, numbers).
    The result is a filter -> value map, e.g. for building sharding rules from a State of specs.

    >>> from flaxen import nnx
    >>> specs = nnx.State({"a": ("x",), "b": ("x",), "c": None})
    >>> sorted((sorted(f.paths), v) for f, v in create_path_filters(specs).items())
    [([('a',), ('b',)], ('x',)), ([('c',)], None)]
    """
    groups: dict[tp.Any, set[Path]] = {}
    for path, leaf in to_flat_state(state):
        value = leaf.get_value() if isinstance(leaf, Variable) else leaf
        groups.setdefault(value, set()).add(path)
    return {filterlib.PathIn(*paths): value for value, paths in groups.items()}


class NestedStateRepr(_reprlib.Representable):
    """A State printed as a plain ``{key: value}`` block, for States nested in a repr.

    >>> from flaxen import nnx
    >>> print(repr(NestedStateRepr(nnx.State({"a": {"c": 2}, "b": 1}))))
    {
      'a': {
        'c': 2
      },
      'b': 1
    }
    """

    def __init__(self, state: State):
        self.state = state

    def __nnx_repr__(self) -> tp.Iterator[_reprlib.Object | _reprlib.Attr]:
        yield _reprlib.Object("", kv_sep=": ", start="{", end="}")
        for key, value in self.state.items():
            shown = NestedStateRepr(value) if isinstance(value, State) else value
            yield _reprlib.Attr(repr(key), shown, use_raw_key=True)

    def __treescope_repr__(self, path: tp.Any, subtree_renderer: tp.Any) -> tp.Any:
        children = {k: NestedStateRepr(v) if isinstance(v, State) else v
                    for k, v in self.state.items()}
        return subtree_renderer(children, path=path)
