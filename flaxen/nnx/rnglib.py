"""RNG streams as module state: ``Rngs``, ``RngStream`` and the key/count Variables.

Each stream holds a base key (:class:`RngKey`) and a counter (:class:`RngCount`); calling it
returns ``jax.random.fold_in(key, count)`` and increments the count, so the keys a model
draws are reproducible and, inside transforms, traced like any other state. This file is
today's face (Flax 0.12.8): ``RngStream(key, tag=...)``, ``Rngs.fork()`` returning an
``Rngs``; the functions that rewrite the streams of a whole graph (``split_rngs``,
``fork_rngs``, ``with_rngs``, ``reseed``, ``restore_rngs``) live in
:mod:`flaxen.nnx._rng_ops`. The Flax 0.8.3 faces subclass these in
``flaxen/experimental/nnx/_rngs.py``.

>>> import jax
>>> from flaxen import nnx
>>> rngs = nnx.Rngs(0, dropout=1)
>>> k1, k2 = rngs.params(), rngs.params()     # 'params' falls back to the default stream
>>> bool((jax.random.key_data(k1) != jax.random.key_data(k2)).any())
True
>>> int(rngs.default.count.value), int(rngs['dropout'].count.value)
(2, 0)
"""

from __future__ import annotations

import functools
import reprlib
import typing as tp
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from flaxen.errors import (
    InvalidNNXValueError,
    NNXArgumentError,
    RngStreamNotFoundError,
    TraceContextError,
)
from flaxen.nnx import filterlib
from flaxen.nnx._trace import TOP as _TOP
from flaxen.nnx._trace import current_trace as _current_trace
from flaxen.nnx.pytreelib import BOOKKEEPING, Pytree, chains_bookkeeping
from flaxen.nnx.statelib import State, _flat_mapping
from flaxen.nnx.variablelib import Variable

SplitPattern = int | tuple[int, ...] | None
RngValue = int | jax.Array


class RngState(Variable[jax.Array]):
    """Base kind of RNG state; the ``tag`` metadata names the stream."""

    __slots__ = ()


class RngKey(RngState):
    """A stream's base key."""

    __slots__ = ()


class RngCount(RngState):
    """A stream's draw counter (tagged with the stream's name, like its key)."""

    __slots__ = ()


# Eager ``jax.random.key``, ``jnp.zeros`` and ``fold_in`` + ``count + 1`` each convert their
# arguments in Python and dispatch primitives one by one (~5-15x the cost of one jitted call),
# and model construction makes a stream per Rngs and draws one key per parameter. The jitted
# functions compute the same bits and place their results where the eager calls would (they
# follow the same default device / mesh context); they run only on concrete values, so
# traced code keeps the public path and its jaxprs.
_fold_in_jit = jax.jit(jax.random.fold_in)


@jax.jit
def _draw_jit(key: jax.Array, count: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.random.fold_in(key, count), count + 1


@functools.partial(jax.jit, static_argnums=0)
def _zeros_jit(shape: tuple[int, ...]) -> jax.Array:
    return jnp.zeros(shape, dtype=jnp.uint32)


@functools.partial(jax.jit, static_argnums=1)
def _seed_jit(seed: jax.Array, impl: str) -> tuple[jax.Array, jax.Array]:
    # the impl is static: jit's cache does not key on jax_default_prng_impl
    key = jax.random.key(seed, impl=impl)
    return key, jnp.zeros(key.shape, dtype=jnp.uint32)


# The classes of a concrete typed key and a concrete array (not tracers, not Refs); found on
# the first draw, since making an array starts JAX's backend, which importing flaxen must not
# do (jax.distributed and device-count flags have to come first).
_KEY_ARRAY: list[type | None] = [None]
_ARRAY: list[type | None] = [None]


def _key_array_type() -> type:
    found = _KEY_ARRAY[0] = type(jax.random.key(0))
    _ARRAY[0] = type(jax.random.key_data(jax.random.key(0)))
    return found


def _invalid_rng(value: tp.Any, tag: str) -> InvalidNNXValueError:
    return InvalidNNXValueError(
        f"/{tag}", f"Rngs stream {tag!r}: invalid rng value {reprlib.repr(value)} "
        f"({type(value).__name__}): expected a Python int seed, a typed key "
        "(jax.random.key) or a raw uint32 key (jax.random.PRNGKey) as a jax.Array",
        f"Pass e.g. nnx.Rngs({tag}=0) or nnx.Rngs({tag}=jax.random.key(0)); convert a "
        "numpy or integer-array seed with int(seed).")


def _to_key(value: tp.Any, tag: str) -> jax.Array:
    """The 0.8.3 faces' lenient conversion: numpy and integer-array seeds are accepted."""
    if isinstance(value, (bool, np.bool_)):
        pass  # a bool is an int to Python, never a seed
    elif isinstance(value, (int, np.integer)):
        return jax.random.key(int(value))
    elif isinstance(value, (jax.Array, np.ndarray)):
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            return value  # type: ignore[return-value]  # only a jax.Array has a key dtype
        if value.dtype == np.uint32 and value.shape[-1:] == (2,):
            # a raw (legacy) PRNGKey; wrap_key_data takes numpy arrays too
            return jax.random.wrap_key_data(value)  # type: ignore[arg-type]
        if jnp.issubdtype(value.dtype, jnp.integer) and value.ndim == 0:
            return jax.random.key(value)
    raise NNXArgumentError(
        f"/{tag}", f"Rngs stream {tag!r}: expected an int seed or a JAX PRNG key, got "
        f"{type(value).__name__} {getattr(value, 'dtype', '')}".rstrip(),
        f"Pass e.g. nnx.Rngs({tag}=0) or nnx.Rngs({tag}=jax.random.key(0)).")


def _key_and_count(value: tp.Any, tag: str) -> tuple[jax.Array, jax.Array]:
    """Today's stream seed: what Flax 0.12.8 accepts (a Python int, bools included, or a
    jax.Array holding a typed key or raw uint32 key data) and nothing else."""
    if isinstance(value, int):
        if (-(1 << 63) <= value < (1 << 63) and _current_trace() is _TOP
                and not jax.config.jax_random_seed_offset):  # type: ignore[attr-defined]
            # jax.random.key converts an int seed through np.int64 as well
            impl = jax.config.jax_default_prng_impl  # type: ignore[attr-defined]
            return _seed_jit(np.int64(value), impl)
        key = jax.random.key(value)
    elif isinstance(value, jax.Array) and value.dtype == jnp.uint32:
        key = jax.random.wrap_key_data(value)  # JAX's TypeError for a wrong key-data shape
    elif isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        key = value
    else:
        raise _invalid_rng(value, tag)
    return key, _zero_counts(tuple(key.shape))


def _zero_counts(shape: tuple[int, ...]) -> tp.Any:
    if _current_trace() is _TOP:
        return _zeros_jit(shape)
    return jnp.zeros(shape, dtype=jnp.uint32)


def _as_shape(k: int | tuple[int, ...]) -> tuple[int, ...]:
    return (k,) if isinstance(k, int) else tuple(k)


# --- random helpers: ``rngs.normal(shape)``, ``rngs.params.lecun_normal()(shape)`` ----------

_RANDOM_FUNCTIONS = (
    "bits", "uniform", "randint", "permutation", "choice", "normal", "multivariate_normal",
    "truncated_normal", "bernoulli", "beta", "cauchy", "dirichlet", "exponential", "gamma",
    "loggamma", "poisson", "gumbel", "categorical", "laplace", "logistic", "pareto", "t",
    "chisquare", "f", "rademacher", "maxwell", "double_sided_maxwell", "weibull_min",
    "orthogonal", "generalized_normal", "ball", "rayleigh", "wald", "geometric", "triangular",
    "lognormal", "binomial", "multinomial",
)
_INITIALIZERS = (
    "delta_orthogonal", "glorot_normal", "glorot_uniform", "he_normal", "he_uniform",
    "kaiming_normal", "kaiming_uniform", "lecun_normal", "lecun_uniform", "variance_scaling",
    "xavier_normal", "xavier_uniform",
)


def _draw_with(name: str) -> tp.Callable[..., jax.Array]:
    fn = getattr(jax.random, name)

    @functools.wraps(fn)
    def draw(self: tp.Any, *args: tp.Any, **kwargs: tp.Any) -> jax.Array:
        return fn(self(), *args, **kwargs)

    draw.__doc__ = f"``jax.random.{name}`` with the next key of this stream."
    return draw


def _keyless_initializer(name: str) -> tp.Callable[..., tp.Callable[..., jax.Array]]:
    make = getattr(jax.nn.initializers, name)

    def initializer(self: tp.Any, *args: tp.Any, **kwargs: tp.Any) -> tp.Callable:
        init = make(*args, **kwargs)

        def keyless(*shape_args: tp.Any, **shape_kwargs: tp.Any) -> jax.Array:
            return init(self(), *shape_args, **shape_kwargs)

        return keyless

    initializer.__name__ = name
    initializer.__doc__ = (f"``jax.nn.initializers.{name}(...)`` that draws its key from this "
                           "stream: call the result with ``(shape, dtype)``.")
    return initializer


class _RandomMethods:
    """Mixin: one method per ``jax.random`` sampler and per keyed initializer constructor."""

    __slots__ = ()


for _name in _RANDOM_FUNCTIONS:
    if hasattr(jax.random, _name):
        setattr(_RandomMethods, _name, _draw_with(_name))
for _name in _INITIALIZERS:
    if hasattr(jax.nn.initializers, _name):
        setattr(_RandomMethods, _name, _keyless_initializer(_name))


# --- the stream and the collection of streams -----------------------------------------------


class RngStream(_RandomMethods, Pytree):
    """One named stream: ``stream()`` gives a fresh key (``fold_in(key, count)``, count += 1).

    >>> from flaxen import nnx
    >>> s = nnx.RngStream(0, tag='params')
    >>> s.split(4).key.value.shape, s.broadcast((2, 3)).count.value.shape
    ((4,), (2, 3))
    """

    def __init__(self, key: RngValue, *, tag: str) -> None:
        key, count = _key_and_count(key, tag)
        self.tag = tag
        self.key = RngKey(key, tag=tag)
        self.count = RngCount(count, tag=tag)

    def _trace_error(self) -> TraceContextError:
        return TraceContextError(
            f"Cannot mutate RngCount from a different trace level: the {self.tag!r} stream "
            "belongs to another JAX trace than the current one (captured by closure inside a "
            "transform, or created inside one and used outside). Pass the Rngs to the nnx "
            "transform as an argument instead.")

    def __call__(self) -> jax.Array:
        if self._nnx_trace is not _current_trace() and not self._lenient_trace_ok():
            raise self._trace_error()
        count = self.count
        c = count.get_raw_value()
        base = self.key.get_raw_value()
        if (type(base) is (_KEY_ARRAY[0] or _key_array_type())
                and "set_value_hooks" not in count._var_metadata):
            # the common eager case: a concrete stream without hooks or Refs
            if type(c) is _ARRAY[0]:
                key, c = _draw_jit(base, c)
                count.set_raw_value(c)
                return key
            if type(c) is np.uint32:  # the 0.8.3 faces' numpy counter
                key = _fold_in_jit(base, c)
                count.set_raw_value(c + 1)
                return key
        c = count.value
        key = jax.random.fold_in(self.key.value, c)
        count.value = c + 1
        return key

    def _new(self, key: jax.Array) -> RngStream:
        return RngStream(key, tag=self.tag)

    def split(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream whose key is ``split(self(), k)`` (shape ``k``), counts zeros."""
        return self._new(jax.random.split(self(), k))

    def fork(self, *, split: int | tuple[int, ...] | None = None) -> RngStream:
        """A new, independent stream seeded by the next key of this one."""
        if split is not None:
            warnings.warn("RngStream.fork(split=...) is deprecated: use stream.split(k).",
                          DeprecationWarning, stacklevel=2)
            return self.split(split)
        return self._new(self())

    def broadcast(self, k: int | tuple[int, ...]) -> RngStream:
        """A new stream holding the next key repeated to shape ``k`` (identical keys)."""
        key = self()
        return self._new(jnp.broadcast_to(key, _as_shape(k) + key.shape))


def _filter_mapping(k: tp.Any) -> dict:
    if k is None or isinstance(k, (int, tuple)):
        return {...: k}
    return dict(k)


class Rngs(_RandomMethods, Pytree):
    """Named RNG streams. ``Rngs(0)`` or ``Rngs(params=0, dropout=1)`` or both.

    ``rngs.name()`` / ``rngs['name']()`` / ``rngs()`` (the ``default`` stream) return fresh
    keys; a stream that was not given falls back to ``default`` when there is one.

    >>> from flaxen import nnx
    >>> rngs = nnx.Rngs(params=0, dropout=1)
    >>> rngs.split({'params': 5, ...: None}).params.key.value.shape
    (5,)
    >>> sorted(rngs.fork())
    ['dropout', 'params']
    """

    _stream_type: tp.ClassVar[type] = RngStream

    def __init__(self, default: RngValue | RngStream | tp.Mapping | None = None,
                 **rngs: RngValue | RngStream) -> None:
        if default is not None:
            if isinstance(default, tp.Mapping):
                rngs = {**default, **rngs}
            else:
                # after the named streams, as Flax: Rngs(0, params=1) iterates params first
                rngs["default"] = default
        for tag, key in rngs.items():
            if isinstance(key, RngStream):
                key = key.key.value
            setattr(self, tag, self._make_stream(tag, key))
        from flaxen.nnx._trace import bump

        bump()

    def _make_stream(self, tag: str, key: tp.Any) -> RngStream:
        return RngStream(key, tag=tag)

    def _missing(self, name: str) -> Exception:
        have = sorted(self.__dict__) or "none"
        return RngStreamNotFoundError(
            "", f"No RngStream named {name!r} found in Rngs (it has {have}), and no "
            "'default' stream to fall back to",
            f"Create it with nnx.Rngs({name}=seed), or give a default: nnx.Rngs(seed).")

    def _stream(self, name: str) -> RngStream:
        d = self.__dict__
        stream = d.get(name)
        if stream is None:
            stream = d.get("default")
            if stream is None:
                raise self._missing(name)
        return stream

    @chains_bookkeeping
    def __getattr__(self, name: str) -> RngStream:
        # bookkeeping of an object built without __init__ (a copy, a merge)
        if name.startswith("_pytree__") or name in BOOKKEEPING:
            return super().__getattr__(name)
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._stream(name)

    def __getitem__(self, name: str) -> RngStream:
        try:
            return self._stream(name)
        except AttributeError as e:
            raise KeyError(str(e)) from None

    def __call__(self) -> jax.Array:
        return self._stream("default")()

    def __contains__(self, name: tp.Any) -> bool:
        return name in self.__dict__

    def __iter__(self) -> tp.Iterator[str]:
        return (k for k, v in self.__dict__.items() if isinstance(v, RngStream))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items(self) -> tp.Iterator[tuple[str, RngStream]]:
        return ((k, v) for k, v in self.__dict__.items() if isinstance(v, RngStream))

    def _per_stream(self, rules: tp.Any, apply: tp.Callable[[RngStream, tp.Any], RngStream],
                    keep: tp.Callable[[RngStream], RngStream]) -> Rngs:
        # ``keep`` serves the streams a rule maps to None and those no rule matches
        preds = [(filterlib.to_predicate(f), v) for f, v in _filter_mapping(rules).items()]
        out: dict[str, RngStream] = {}
        for name, stream in self.items():
            for pred, v in preds:
                # as Flax: the stream itself with an empty path (a string filter is its tag)
                if pred((), stream):
                    out[name] = keep(stream) if v is None else apply(stream, v)
                    break
            else:
                out[name] = keep(stream)
        return self._from_streams(out)

    def _from_streams(self, streams: dict[str, RngStream]) -> Rngs:
        new = type(self).__new__(type(self))
        for name, s in streams.items():
            setattr(new, name, s)
        return new

    def split(self, k: tp.Mapping[filterlib.Filter, int | tuple[int, ...] | None] | int
              | tuple[int, ...]) -> Rngs:
        """A new Rngs whose streams matched by ``k`` (a shape, or a filter -> shape map) are
        split to that shape; the others restart from their key (count 0), as in Flax, whose
        result is built anew from the keys."""
        return self._per_stream(k, lambda s, n: s.split(n), _restart)

    def broadcast(self, k: tp.Mapping[filterlib.Filter, int | tuple[int, ...] | None] | int
                  | tuple[int, ...] | None) -> Rngs:
        """Like :meth:`split`, but each selected stream's next key is repeated to shape ``k``."""
        return self._per_stream(k, lambda s, n: s.broadcast(n), _restart)

    def fork(self, /, *, split: tp.Any = None) -> Rngs:
        """A new Rngs with independent streams, each seeded by the next key of this one's
        (split to the shape ``split`` maps it to, if any: a None shape only forks)."""
        if split is not None:
            warnings.warn("Rngs.fork(split=...) is deprecated: use rngs.split(k).",
                          DeprecationWarning, stacklevel=2)
            return self._per_stream(split, lambda s, n: s.split(n), _fork)
        return self._from_streams({name: _fork(s) for name, s in self.items()})


def _restart(stream: RngStream) -> RngStream:
    return stream._new(stream.key.get_value())


def _fork(stream: RngStream) -> RngStream:
    return stream._new(stream())


# --- Flax 0.8.3's state-level fork (used by the experimental face) --------------------------


def _split_shape(pattern: SplitPattern) -> tuple[int, ...]:
    """``(4, None, 3)`` -> ``(4, 1, 3)``: None marks an axis the keys are broadcast along."""
    if isinstance(pattern, int):
        return (pattern,)
    # a None pattern is not iterable and raises TypeError here, as it always has
    return tuple(1 if p is None else p for p in pattern)  # type: ignore[union-attr]


def fork(state: State, split_filter: filterlib.Filter, split_pattern: SplitPattern
         ) -> tuple[State, State]:
    """Splits the RNG keys matching ``split_filter`` into ``split_pattern`` keys.

    Returns ``(split_state, broadcast_state)``: each matching stream's key becomes
    ``split(fold_in(key, count), shape)`` (``None`` entries of the pattern give size-1 axes)
    in ``split_state``; every count and the other keys stay as they are in
    ``broadcast_state``.
    """
    pred = filterlib.to_predicate(split_filter)
    flat = _flat_mapping(state)
    shape = _split_shape(split_pattern)
    n = int(np.prod(shape))
    split_items, bcast_items = [], []
    for path, leaf in flat.items():
        if leaf.type is RngKey and pred(path, leaf):
            count_leaf = flat.get((*path[:-1], "count"))
            count = count_leaf.value if count_leaf is not None else 0
            keys = jax.random.split(jax.random.fold_in(leaf.value, count), n)
            split_items.append((path, leaf.replace(keys.reshape(shape))))
        else:
            bcast_items.append((path, leaf))
    return State.from_flat_path(split_items), State.from_flat_path(bcast_items)


# -- Flax 0.12.8's other names in nnx.rnglib --------------------------------------------------
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
A = tp.TypeVar("A")
Counts = list[int]
AxesValue = tp.Union[int, None]  # noqa: UP007
Fargs = tp.ParamSpec("Fargs")
OutShardingType: tp.TypeAlias = jax.sharding.NamedSharding | jax.sharding.PartitionSpec | None
StreamBackup = tuple[RngStream, jax.Array, jax.Array] | tuple[RngStream, jax.Array]


def NotKey(path: tuple, x: tp.Any) -> bool:  # noqa: N802 - Flax's name
    """Filter of the RNG Variables other than keys (the counts): what backups and reseeding
    leave alone.

    >>> from flaxen import nnx
    >>> from flaxen.nnx import rnglib
    >>> rngs = nnx.Rngs(0)
    >>> sorted(p[-1] for p, _ in nnx.to_flat_state(nnx.state(rngs, rnglib.NotKey)))
    ['count']
    """
    return isinstance(x, RngState) and not isinstance(x, RngKey)


@tp.runtime_checkable
class KeylessInitializer(tp.Protocol):
    """An initializer whose key is already bound (``rngs.params.normal(...)`` returns one).

    >>> import jax.numpy as jnp
    >>> init = lambda shape, dtype=None, out_sharding=None: jnp.zeros(shape, dtype)
    >>> isinstance(init, KeylessInitializer)
    True
    """

    def __call__(self, shape: tp.Sequence[int], dtype: tp.Any | None = None,
                 out_sharding: OutShardingType = None) -> jax.Array:
        raise NotImplementedError


_GRAPH_OPS = ("SplitBackups", "backup_keys", "fork_rngs", "reseed", "restore_rngs",
              "split_rngs", "with_rngs")


def __getattr__(name: str) -> tp.Any:
    if name in _GRAPH_OPS:
        # upward: Flax's path nnx.rnglib.split_rngs (and friends): they live in _rng_ops,
        # which imports this module, so they are looked up on first use
        from flaxen.nnx import _rng_ops

        return getattr(_rng_ops, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RngCount", "RngKey", "RngState", "RngStream", "Rngs", "fork"]
