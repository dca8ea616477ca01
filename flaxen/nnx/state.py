"""State: the nested, filterable mapping of VariableStates that ``nnx.split`` returns.

Keys are attribute names (and list indices); leaves are :class:`VariableState` objects (or
plain arrays after a user maps them away). A State is a pytree, so it passes straight into
``jax.jit``, ``jax.grad`` or Optax.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> s = nnx.State({'a': {'w': nnx.Param.state(jnp.ones(2))}, 'b': nnx.BatchStat.state(0.0)})
>>> s.a.w.value.shape
(2,)
>>> params, stats = s.split(nnx.Param, nnx.BatchStat)
>>> list(params.flat_state()), list(stats.flat_state())
([('a', 'w')], [('b',)])
>>> merged = nnx.State.merge(params, stats)
>>> sorted(merged.flat_state())
[('a', 'w'), ('b',)]
"""

from __future__ import annotations

import typing as tp
from collections.abc import Mapping, MutableMapping

import jax

from flaxen.errors import NNXFilterError
from flaxen.nnx import _treescope, filterlib

Key = tp.Hashable
Path = tuple[Key, ...]


def _sort_keys(keys: tp.Iterable[Key]) -> list[Key]:
    keys = list(keys)
    try:
        return sorted(keys)
    except TypeError:  # mixed key types: ints before strings, each sorted
        return sorted(keys, key=lambda k: (type(k).__name__, str(k)))


class State(MutableMapping):
    """A nested mapping from attribute names to sub-States and VariableStates."""

    __slots__ = ("_mapping",)
    __treescope_repr__ = _treescope.state_repr

    def __init__(self, mapping: Mapping[Key, tp.Any] | tp.Iterable[tuple[Key, tp.Any]] = (),
                 /) -> None:
        if isinstance(mapping, State):
            mapping = mapping._mapping
        items = mapping.items() if isinstance(mapping, Mapping) else mapping
        raw = {}
        for k, v in items:
            if isinstance(v, Mapping) and not isinstance(v, State):
                v = State(v)
            raw[k] = v
        object.__setattr__(self, "_mapping", raw)

    @classmethod
    def _from_raw(cls, raw: dict) -> State:
        s = object.__new__(cls)
        object.__setattr__(s, "_mapping", raw)
        return s

    @property
    def raw_mapping(self) -> dict[Key, tp.Any]:
        return self._mapping

    # -- mapping protocol ----------------------------------------------------------------
    def __getitem__(self, key: Key) -> tp.Any:
        return self._mapping[key]

    def __setitem__(self, key: Key, value: tp.Any) -> None:
        if isinstance(value, Mapping) and not isinstance(value, State):
            value = State(value)
        self._mapping[key] = value

    def __delitem__(self, key: Key) -> None:
        del self._mapping[key]

    def __iter__(self) -> tp.Iterator[Key]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __contains__(self, key: object) -> bool:
        return key in self._mapping

    def __getattr__(self, name: str) -> tp.Any:
        try:
            return object.__getattribute__(self, "_mapping")[name]
        except KeyError:
            raise AttributeError(
                f"State has no key {name!r}; its keys are {list(self._mapping)}."
            ) from None

    def __setattr__(self, name: str, value: tp.Any) -> None:
        self[name] = value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, State):
            return self._mapping == other._mapping
        return isinstance(other, Mapping) and self._mapping == dict(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        from flaxen.nnx.visualization import state_repr

        return state_repr(self)

    # -- flat views ------------------------------------------------------------------------
    def flat_state(self) -> dict[Path, tp.Any]:
        """``{path tuple: leaf}`` for every leaf, depth first."""
        out: dict[Path, tp.Any] = {}
        _flatten_into(self, (), out)
        return out

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
        return _to_state(root)

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

    @staticmethod
    def merge(state: Mapping, /, *states: Mapping) -> State:
        """Union of States; later ones win where paths collide."""
        flat: dict[Path, tp.Any] = {}
        for s in (state, *states):
            _flatten_into(s, (), flat)
        return State.from_flat_path(flat)

    def __or__(self, other: State) -> State:
        return State.merge(self, other)

    def __sub__(self, other: State) -> State:
        drop = set(State(other).flat_state())
        return State.from_flat_path(
            (p, v) for p, v in self.flat_state().items() if p not in drop
        )


def _to_state(d: dict) -> State:
    return State._from_raw({k: _to_state(v) if type(v) is dict else v for k, v in d.items()})


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
    for path, leaf in state.flat_state().items():
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
    from flaxen.nnx.variables import VariableState

    if isinstance(leaf, VariableState):
        return f"a {leaf.type.__name__}"
    return type(leaf).__name__


def _state_flatten_with_keys(s: State) -> tuple[list, tuple]:
    keys = _sort_keys(s._mapping)
    m = s._mapping
    return [(jax.tree_util.DictKey(k), m[k]) for k in keys], tuple(keys)


def _state_flatten(s: State) -> tuple[list, tuple]:
    keys = _sort_keys(s._mapping)
    m = s._mapping
    return [m[k] for k in keys], tuple(keys)


def _state_unflatten(keys: tuple, children: tp.Iterable[tp.Any]) -> State:
    return State._from_raw(dict(zip(keys, children)))


jax.tree_util.register_pytree_with_keys(
    State, _state_flatten_with_keys, _state_unflatten, flatten_func=_state_flatten
)
