"""Graph-wide RNG operations: ``split_rngs``, ``fork_rngs``, ``with_rngs``, ``reseed``,
``restore_rngs`` (today's ``flax.nnx`` API).

They find every :class:`~flaxen.nnx.RngStream` reachable from a node (a Module, an Rngs, a
list/dict/tuple of them) and give it new keys, in one of two ways:

- in place (``graph=True, graph_updates=True``, the default): the streams' key and count
  Variables get new values, and a :class:`SplitBackups` of the old values comes back, so
  ``nnx.restore_rngs(backups)`` (or a ``with`` block) puts them back;
- as a copy (``graph_updates=False``, or ``graph=False``): a new node of the same structure
  whose streams are new objects; the original keeps its keys. In graph mode the copy
  shares every Variable other than the replaced streams' (so drawing the key that seeds a
  new stream advances the original's counter), in tree mode it shares nothing.

Without a node, ``split_rngs`` / ``fork_rngs`` / ``with_rngs`` return decorators that apply
to the decorated function's arguments for the duration of the call.

>>> from flaxen import nnx
>>> rngs = nnx.Rngs(params=0, dropout=1)
>>> with nnx.split_rngs(rngs, splits=4, only='params'):
...     rngs.params.key.value.shape, rngs['dropout'].key.value.shape
((4,), ())
>>> rngs.params.key.value.shape
()
"""

from __future__ import annotations

import copy
import functools
import typing as tp

import jax

from flaxen import struct
from flaxen.errors import InvalidNNXValueError
from flaxen.nnx import _node_protocol as _proto
from flaxen.nnx import filterlib
from flaxen.nnx._graph_node import GraphNode, new_node
from flaxen.nnx.rnglib import RngCount, RngKey, Rngs, RngStream, RngValue, _zero_counts
from flaxen.nnx.variablelib import Variable

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
Shape = int | tuple[int, ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: tp.Any = _Missing()


def _modes(graph: bool | None, graph_updates: bool | None) -> tuple[bool, bool]:
    try:
        from flaxen.nnx._modes import resolve_modes
    except ImportError:  # pragma: no cover - before the mode settings exist
        return (True if graph is None else bool(graph),
                True if graph_updates is None else bool(graph_updates))
    return resolve_modes(graph, graph_updates)


# --- walking the graph ------------------------------------------------------------------------


def _children(x: tp.Any) -> tp.Iterator[tuple[tp.Any, tp.Any]]:
    # the node protocol's one order, as every other walker of the graph
    yield from _proto.children(x) or ()


def iter_streams(node: tp.Any) -> tp.Iterator[tuple[tuple, RngStream]]:
    """``(path, stream)`` for each RngStream reachable from ``node``, once each."""
    seen: set[int] = set()

    def walk(path: tuple, x: tp.Any) -> tp.Iterator[tuple[tuple, RngStream]]:
        if isinstance(x, (GraphNode, dict, list, tuple)):
            if isinstance(x, GraphNode):
                if id(x) in seen:
                    return
                seen.add(id(x))
            if isinstance(x, RngStream):
                yield path, x
                return
            for k, v in _children(x):
                yield from walk((*path, k), v)

    yield from walk((), node)


def _copy_variable(v: Variable) -> Variable:
    try:
        return jax.tree_util.tree_map(lambda a: a, v)
    except Exception:  # pragma: no cover - a Variable that is not a pytree
        return copy.copy(v)


def map_streams(f: tp.Callable[[tuple, RngStream], tp.Any], node: tp.Any, *, graph: bool
                ) -> tp.Any:
    """A copy of ``node`` in which each RngStream ``s`` (at path ``p``) is ``f(p, copy_of_s)``.

    Graph mode copies the nodes (keeping shared ones shared) but not the Variables; tree mode
    copies Variables too. Leaves other than Variables are kept as they are.
    """
    memo: dict[int, tp.Any] = {}

    def go(path: tuple, x: tp.Any) -> tp.Any:
        if isinstance(x, Variable):
            return x if graph else _copy_variable(x)
        if isinstance(x, GraphNode):
            if graph and id(x) in memo:
                return memo[id(x)]
            new = new_node(type(x))
            status = getattr(x, "_pytree__status", None)
            if status is not None:  # which attributes are data (Pytree bookkeeping)
                object.__setattr__(new, "_pytree__status", status)
            if graph:
                memo[id(x)] = new
            d = new.__dict__
            for k, v in list(vars(x).items()):
                d[k] = go((*path, k), v)
            if isinstance(x, RngStream):
                drawn_from = new
                new = f(path, new)
                if graph:
                    memo[id(x)] = new
                elif new is not drawn_from and isinstance(x.count, Variable):
                    # tree mode works on a copy, but a key drawn for the new stream is
                    # drawn from the caller's stream: its count moves on as in graph mode
                    x.count.set_raw_value(drawn_from.count.get_raw_value())
            return new
        if isinstance(x, dict):
            return type(x)((k, go((*path, k), v)) for k, v in x.items()) \
                if type(x) is dict else _rebuild_mapping(x, path, go)
        if isinstance(x, list):
            return type(x)(go((*path, i), v) for i, v in enumerate(x))
        if isinstance(x, tuple):
            items = [go((*path, i), v) for i, v in enumerate(x)]
            return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
        return x

    return go((), node)


def _rebuild_mapping(x: dict, path: tuple, go: tp.Callable) -> tp.Any:
    try:
        return type(x)((k, go((*path, k), v)) for k, v in x.items())
    except TypeError:
        return {k: go((*path, k), v) for k, v in x.items()}


def _selects(pred: tp.Callable, path: tuple, stream: RngStream) -> bool:
    # as Flax's split_rngs / fork_rngs: a stream is selected when the filter picks both its
    # key and its count (a string names the stream's tag, which both carry)
    return bool(pred((*path, "key"), stream.key)) and bool(pred((*path, "count"), stream.count))


def _selects_stream(pred: tp.Callable, path: tuple, stream: RngStream) -> bool:
    # as Flax's with_rngs: the filter sees the RngStream itself at its path
    return bool(pred(path, stream))


# --- backups --------------------------------------------------------------------------------


StreamBackup = tuple[RngStream, jax.Array, jax.Array] | tuple[RngStream, jax.Array]


_SB = tp.TypeVar("_SB", bound=tuple)


class SplitBackups(struct.PyTreeNode, tp.Iterable[_SB]):
    """The key/count values ``split_rngs``/``fork_rngs`` replaced in place; iterable of
    ``(stream, key[, count])``. ``nnx.restore_rngs(b)`` or ``with b:`` puts them back.

    A frozen struct dataclass (a pytree of its ``backups``, ``.replace(backups=...)``).

    >>> from flaxen import nnx
    >>> rngs = nnx.Rngs(0)
    >>> with nnx.split_rngs(rngs, splits=2) as backups:
    ...     rngs.default.key.value.shape
    (2,)
    >>> [stream.tag for stream, *_ in backups], rngs.default.key.value.shape
    (['default'], ())
    """

    backups: list[_SB]

    def __iter__(self) -> tp.Iterator[_SB]:
        return iter(self.backups)

    def __enter__(self) -> SplitBackups:
        return self

    def __exit__(self, *exc: object) -> None:
        restore_rngs(self)

    def __repr__(self) -> str:
        return f"SplitBackups({[b[0].tag for b in self.backups]})"


def restore_rngs(backups: tp.Iterable[StreamBackup], /) -> None:
    """Puts back the keys (and counts) saved by ``split_rngs``/``fork_rngs``/``backup_keys``."""
    for backup in backups:
        stream = backup[0]
        stream.key.value = backup[1]
        if len(backup) == 3:
            stream.count.value = backup[2]


def backup_keys(node: tp.Any, /, *, graph: bool | None = None) -> list[StreamBackup]:
    """``[(stream, key)]`` for every stream of ``node``: pass to ``restore_rngs`` later."""
    return [(s, s.key.value) for _, s in iter_streams(node)]


def _counts_shape(splits: Shape, squeeze: bool, base: tuple[int, ...]) -> tuple[int, ...]:
    if squeeze:
        return base
    return (*((splits,) if isinstance(splits, int) else tuple(splits)), *base)


_zeros = _zero_counts


# --- split_rngs ------------------------------------------------------------------------------


def split_rngs(node: tp.Any = MISSING, /, *, splits: Shape, only: filterlib.Filter = ...,
               squeeze: bool = False, graph: bool | None = None,
               graph_updates: bool | None = None) -> tp.Any:
    """Splits the key of each RNG stream of ``node`` (selected by ``only``) into ``splits``
    keys, with a zero count per key, e.g. before an ``nnx.vmap`` over the streams.

    In place with ``graph=True, graph_updates=True`` (the defaults): returns a
    :class:`SplitBackups` (use it with ``with``, or pass it to ``nnx.restore_rngs``).
    Otherwise returns a copy of ``node`` with split streams. Without ``node``, a decorator
    that splits the decorated function's arguments while it runs.

    >>> from flaxen import nnx
    >>> rngs = nnx.Rngs(params=0, dropout=1)
    >>> copy = nnx.split_rngs(rngs, splits=(2, 3), only='params', graph_updates=False)
    >>> copy.params.key.value.shape, copy['dropout'].key.value.shape, rngs.params.key.value.shape
    ((2, 3), (), ())
    """
    graph, graph_updates = _modes(graph, graph_updates)
    if node is MISSING:
        def decorator(f: F) -> F:
            @functools.wraps(f)
            def split_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
                if graph and graph_updates:
                    with split_rngs((args, kwargs), splits=splits, only=only, squeeze=squeeze,
                                    graph=True, graph_updates=True):
                        return f(*args, **kwargs)
                args, kwargs = split_rngs((args, kwargs), splits=splits, only=only,
                                          squeeze=squeeze, graph=graph, graph_updates=False)
                return f(*args, **kwargs)

            return tp.cast(F, split_wrapper)

        return decorator
    if squeeze and splits != 1:
        raise InvalidNNXValueError(
            "", f"split_rngs(squeeze=True) needs splits=1, got splits={splits!r}",
            "Drop squeeze=True, or split into a single key.")
    pred = filterlib.to_predicate(only)
    if graph and graph_updates:
        backups: list[StreamBackup] = []
        for path, stream in iter_streams(node):
            if not _selects(pred, path, stream):
                continue
            key = stream()
            backups.append((stream, stream.key.value, stream.count.value))
            new = jax.random.split(key, splits)
            stream.key.value = new[0] if squeeze else new
            stream.count.value = _zeros(_counts_shape(splits, squeeze, tuple(key.shape)))
        return SplitBackups(backups)

    def split_one(path: tuple, stream: RngStream) -> RngStream:
        if not _selects(pred, path, stream):
            return stream
        key = stream()
        new = jax.random.split(key, splits)
        stream.key = RngKey(new[0] if squeeze else new, tag=stream.tag)
        stream.count = RngCount(_zeros(_counts_shape(splits, squeeze, tuple(key.shape))),
                                tag=stream.tag)
        return stream

    return map_streams(split_one, node, graph=graph)


# --- fork_rngs -------------------------------------------------------------------------------


def fork_rngs(node: tp.Any = MISSING, /, *,
              split: tp.Mapping[filterlib.Filter, Shape | None] | Shape | None = None,
              graph: bool | None = None, graph_updates: bool | None = None) -> tp.Any:
    """Gives each RNG stream of ``node`` a new key: the next key it would draw (split to a
    shape where ``split`` says so), with a zero count. In place by default (returns a
    :class:`SplitBackups`); a copy with ``graph_updates=False``; a decorator without ``node``.

    >>> from flaxen import nnx
    >>> rngs = nnx.Rngs(0)
    >>> with nnx.fork_rngs(rngs):
    ...     inner = rngs()
    >>> int(rngs.default.count.value)   # restored, after the one draw the fork made
    1
    """
    graph, graph_updates = _modes(graph, graph_updates)
    if node is MISSING:
        def decorator(f: F) -> F:
            @functools.wraps(f)
            def fork_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
                if graph and graph_updates:
                    with fork_rngs((args, kwargs), split=split, graph=True,
                                   graph_updates=True):
                        return f(*args, **kwargs)
                args, kwargs = fork_rngs((args, kwargs), split=split, graph=graph,
                                         graph_updates=False)
                return f(*args, **kwargs)

            return tp.cast(F, fork_wrapper)

        return decorator
    rules = [(filterlib.to_predicate(f), v) for f, v in _shape_rules(split, {...: None})]

    def rule_for(path: tuple, stream: RngStream) -> tuple[bool, Shape | None]:
        for pred, shape in rules:
            if _selects(pred, path, stream):
                return True, shape
        return False, None

    def new_key(stream: RngStream, shape: Shape | None) -> jax.Array:
        key = stream()
        return key if shape is None else jax.random.split(key, shape)

    if graph and graph_updates:
        backups: list[StreamBackup] = []
        for path, stream in iter_streams(node):
            hit, shape = rule_for(path, stream)
            if not hit:
                continue
            key = new_key(stream, shape)
            backups.append((stream, stream.key.value, stream.count.value))
            stream.key.value = key
            stream.count.value = _zeros(tuple(key.shape))
        return SplitBackups(backups)

    def fork_one(path: tuple, stream: RngStream) -> RngStream:
        hit, shape = rule_for(path, stream)
        return stream._new(new_key(stream, shape)) if hit else stream

    return map_streams(fork_one, node, graph=graph)


def _shape_rules(rules: tp.Any, default: dict) -> list[tuple[tp.Any, tp.Any]]:
    if rules is None:
        return list(default.items())
    if isinstance(rules, (int, tuple)):
        return [(..., rules)]
    return list(rules.items())


# --- with_rngs -------------------------------------------------------------------------------


def _generic(f: tp.Any) -> bool:
    return f is ... or f is True


def with_rngs(node: tp.Any = MISSING, /, *,
              split: tp.Mapping[filterlib.Filter, Shape] | Shape | None = None,
              fork: filterlib.Filter | tp.Sequence[filterlib.Filter] | None = None,
              broadcast: tp.Mapping[filterlib.Filter, Shape] | Shape | None = None,
              only: filterlib.Filter = True, graph: bool | None = None,
              graph_updates: bool | None = None) -> tp.Any:
    """A copy of ``node`` whose RNG streams are replaced by rule: ``split`` (a shape, or a
    filter -> shape map; first match wins) splits a stream's next key, ``broadcast`` repeats
    it, ``fork`` (a filter or filters) seeds a new scalar stream with it; other streams are
    copied unchanged. Without ``node``, a decorator applying the rules to the arguments.

    >>> from flaxen import nnx
    >>> rngs = nnx.Rngs(params=0, dropout=1)
    >>> new = nnx.with_rngs(rngs, split={'params': 4}, fork=..., graph_updates=False)
    >>> new.params.key.value.shape, new['dropout'].key.value.shape
    ((4,), ())
    """
    graph, graph_updates = _modes(graph, graph_updates)
    if graph and graph_updates:
        raise NotImplementedError(
            "with_rngs always returns a copy: graph=True together with graph_updates=True "
            "(the in-place mode) is not supported. Pass graph_updates=False, or use "
            "nnx.split_rngs / nnx.fork_rngs to change the streams in place.")
    if node is MISSING:
        def decorator(f: F) -> F:
            @functools.wraps(f)
            def with_rngs_wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
                args, kwargs = with_rngs((args, kwargs), split=split, fork=fork,
                                         broadcast=broadcast, only=only, graph=graph,
                                         graph_updates=False)
                return f(*args, **kwargs)

            return tp.cast(F, with_rngs_wrapper)

        return decorator
    if fork is None:
        forks: list = []
    elif isinstance(fork, str) or not isinstance(fork, tp.Sequence):
        forks = [fork]
    else:
        forks = list(fork)
    kinds = {
        "split": [(f, filterlib.to_predicate(f), v) for f, v in _shape_rules(split, {})],
        "broadcast": [(f, filterlib.to_predicate(f), v)
                      for f, v in _shape_rules(broadcast, {})],
        "fork": [(f, filterlib.to_predicate(f), None) for f in forks],
    }
    only_pred = filterlib.to_predicate(only)

    def apply(path: tuple, stream: RngStream) -> RngStream:
        if not _selects_stream(only_pred, path, stream):
            return stream
        hits = {}
        for kind, rules in kinds.items():
            for f, pred, v in rules:
                if _selects_stream(pred, path, stream):
                    hits[kind] = (f, v)
                    break
        specific = [k for k, (f, _) in hits.items() if not _generic(f)]
        if len(specific) > 1:
            which = "; ".join(f"{k} through filter {hits[k][0]!r}" for k in specific)
            raise InvalidNNXValueError(
                "/" + "/".join(map(str, path)),
                f"the RngStream {stream.tag!r} matches multiple rules of with_rngs ({which})",
                "Make the split/broadcast/fork filters disjoint, or use ... for the "
                "catch-all rule.")
        if "split" in hits:
            return stream.split(hits["split"][1])
        if "broadcast" in hits:
            return stream.broadcast(hits["broadcast"][1])
        if "fork" in hits:
            return stream._new(stream())
        return stream

    return map_streams(apply, node, graph=graph)


# --- reseed ------------------------------------------------------------------------------------


def _scalars_only(path: tuple, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    if shape != ():
        raise InvalidNNXValueError(
            "/" + "/".join(map(str, path)),
            f"reseed cannot reseed this stream because it has a non-scalar key of shape "
            f"{shape} (policy='scalars_only')",
            "Pass policy='match_shape' to split the new key to that shape, or a callable "
            "(path, key, shape) -> new_key.")
    return key


def _match_shape(path: tuple, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return key if shape == () else jax.random.split(key, shape)


def reseed(node: tp.Any, /, *, graph: bool | None = None,
           policy: str | tp.Callable[[tuple, jax.Array, tuple[int, ...]], jax.Array]
           = "scalars_only", **stream_keys: RngValue) -> None:
    """Gives the streams of ``node`` named in ``stream_keys`` new keys (``name=seed``) and
    zero counts, in place: after ``reseed(m, dropout=42)`` the model draws the same dropout
    keys as after any other ``reseed(..., dropout=42)``.

    >>> import jax, jax.numpy as jnp
    >>> from flaxen import nnx
    >>> rngs = nnx.Rngs(dropout=0)
    >>> nnx.reseed(rngs, dropout=7)
    >>> a = rngs.dropout()
    >>> nnx.reseed(rngs, dropout=7)
    >>> bool(jnp.all(jax.random.key_data(a) == jax.random.key_data(rngs.dropout())))
    True
    """
    fn: tp.Callable[[tuple, jax.Array, tuple[int, ...]], jax.Array]
    if policy == "scalars_only":
        fn = _scalars_only
    elif policy == "match_shape":
        fn = _match_shape
    elif callable(policy):
        fn = policy
    else:
        raise InvalidNNXValueError(
            "", f"reseed: policy must be 'scalars_only', 'match_shape' or a callable, got "
            f"{policy!r}", "Pass one of those.")
    seeds = Rngs(**stream_keys)
    for path, stream in iter_streams(node):
        tag = stream.tag
        if tag in stream_keys:
            key = fn(path, seeds[tag](), tuple(stream.key.value.shape))
            stream.key.value = key
            stream.count.value = _zeros(tuple(key.shape))
