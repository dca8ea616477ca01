"""RNG derivation for scopes: ``LazyRng`` and the static fold-in hash, bit-identical to Flax.

A stream's key for a scope is the root key plus a *suffix* of names (the scope path) that is
folded in only when a key is actually drawn: ``make_rng`` folds in
``hash32(suffix + (count,))``, where ``hash32`` is the first 4 bytes (big-endian) of the
SHA-1 of the items (str as UTF-8, int as minimal big-endian bytes), each preceded by a zero
byte when ``config.flax_fix_rng_separator`` is on.

Speed: each ``LazyRng`` keeps the SHA-1 state of its suffix, built from its parent's state,
so drawing a key hashes only the counter, not the whole path. The fold-in itself binds
JAX's ``random_fold_in`` primitive on a typed key that is wrapped once per root key (and
shared by every ``LazyRng`` derived from it), instead of going through
``jax.random.fold_in``'s wrap / convert / fold / unwrap sequence on every draw: the same
primitive on the same key and data, so the keys are bit-identical, at a third of the
tracing cost. Anything unusual (batched or non-default keys, legacy-key warnings turned on,
a JAX without the primitive) falls back to ``jax.random.fold_in``.

>>> import jax
>>> rng = LazyRng.create(jax.random.PRNGKey(0), 'Dense_0')
>>> rng.suffix
('Dense_0',)
>>> key = rng.fold_count(1)  # the key of Dense_0's first make_rng('params')
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import numpy as np

from flaxen.configurations import config

PRNGKey = Any
_SEP = b"\x00"

try:  # the primitives behind jax.random.fold_in / key_data (private; optional fast path)
    from jax._src.random import prng as _jax_prng

    _FOLD_IN_P = _jax_prng.random_fold_in_p
    _UNWRAP_P = _jax_prng.random_unwrap_p
    _Tracer = jax.core.Tracer
except Exception:  # pragma: no cover - depends on the JAX version
    _FOLD_IN_P = _UNWRAP_P = None  # type: ignore[assignment]

_UINT32 = np.dtype("uint32")
_NO_FAST = (None, False)


def _legacy_keys_plain() -> bool:
    """Whether jax.random accepts raw uint32 keys silently (no warning, no error)."""
    try:
        cfg: Any = jax.config  # flags are attributes set at runtime
        return (str(cfg.jax_legacy_prng_key) in ("allow", "LegacyPrngKeyState.ALLOW")
                and not cfg.jax_enable_custom_prng)
    except Exception:  # pragma: no cover
        return False


def _wrap(rng: Any) -> tuple[Any, bool]:
    """``(typed scalar key, was_raw)`` for the fast path, or ``(None, False)`` to fall back."""
    dtype = getattr(rng, "dtype", None)
    if dtype is None:
        return _NO_FAST
    try:
        if dtype == _UINT32:
            if not _legacy_keys_plain():
                return _NO_FAST
            typed, raw = jax.random.wrap_key_data(rng), True
        elif jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            typed, raw = rng, False
        else:
            return _NO_FAST
    except Exception:
        return _NO_FAST
    if typed.ndim != 0:
        return _NO_FAST
    return typed, raw


def _same_trace(a: Any, b: Any) -> bool:
    """Whether ``b`` (derived from ``a``) may be reused wherever ``a`` is valid."""
    if isinstance(a, _Tracer):
        ta = getattr(a, "_trace", None)
        return ta is not None and isinstance(b, _Tracer) and getattr(b, "_trace", None) is ta
    return not isinstance(b, _Tracer)


def fold_in(rng: PRNGKey, data: int, cell: list | None = None) -> PRNGKey:
    """``jax.random.fold_in(rng, data)`` for a static 32-bit ``data``, bit-identical.

    ``cell`` (a one-element list shared by the LazyRngs of one root key) caches the typed
    key; it is only filled when the wrapped key lives in the same trace as ``rng``.
    """
    if _FOLD_IN_P is None:
        return jax.random.fold_in(rng, data)
    hit = cell[0] if cell is not None else None
    if hit is None:
        hit = _wrap(rng)
        if hit[0] is None:
            return jax.random.fold_in(rng, data)
        if cell is not None and _same_trace(rng, hit[0]):
            cell[0] = hit
    typed, raw = hit
    out = _FOLD_IN_P.bind(typed, np.uint32(data))
    return _UNWRAP_P.bind(out) if raw else out


def _item_bytes(item: int | str) -> bytes:
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, int):
        return item.to_bytes((item.bit_length() + 7) // 8, "big")
    raise ValueError(
        f"RNG suffix items must be str or int, got {item!r} of type {type(item).__name__}; "
        "scope names must be strings."
    )


def hash_suffix(data: tuple, fix_separator: bool | None = None) -> int:
    """The 32-bit value that ``fold_in`` receives for a suffix (see the module docstring).

    >>> 0 <= hash_suffix(('Dense_0', 1)) < 2**32
    True
    """
    if fix_separator is None:
        fix_separator = config.flax_fix_rng_separator
    m = hashlib.sha1()
    for item in data:
        if fix_separator:
            m.update(_SEP)
        m.update(_item_bytes(item))
    return int.from_bytes(m.digest()[:4], "big")


def fold_in_static(key: PRNGKey, data: tuple) -> PRNGKey:
    """Folds a static tuple of names/ints into ``key``; an empty tuple returns ``key``."""
    if not data:
        return key
    return fold_in(key, hash_suffix(data))


class _ChildRNGSentinel:
    """Type of :data:`child_rng_token`."""

    def __repr__(self) -> str:
        return "child_rng_token"


# Marks an RNG fold-in that belongs to a child scope rather than to a make_rng call.
child_rng_token = _ChildRNGSentinel()


class LazyRng:
    """A PRNG key with a not-yet-folded-in suffix of names.

    ``LazyRng.create(rng, *names)`` extends the suffix; ``as_jax_rng()`` folds it in;
    ``fold_count(n)`` gives the key of the ``n``-th ``make_rng`` call at this suffix.
    """

    __slots__ = ("rng", "suffix", "_parent", "_state", "_state_sep", "_cell")

    def __init__(self, rng: PRNGKey, suffix: tuple = ()) -> None:
        self.rng = rng
        self.suffix = tuple(suffix)
        self._parent: LazyRng | None = None
        self._state = None
        self._state_sep: bool | None = None
        self._cell: list = [None]  # the wrapped key of ``rng``, shared with derived LazyRngs

    @classmethod
    def create(cls, rng: LazyRng | PRNGKey, *suffix: int | str) -> LazyRng:
        """A LazyRng whose suffix is ``rng``'s (if it is a LazyRng) followed by ``suffix``."""
        if not isinstance(rng, LazyRng):
            return cls(rng, suffix)
        if len(suffix) != 1:
            out = cls(rng.rng, rng.suffix + suffix)
            out._cell = rng._cell
            return out
        out = cls.__new__(cls)
        out.rng = rng.rng
        out.suffix = rng.suffix + suffix
        out._parent = rng
        out._state = None
        out._state_sep = None
        out._cell = rng._cell
        return out

    def _hash_state(self, sep: bool):
        if self._state is not None and self._state_sep is sep:
            return self._state
        parent = self._parent
        if parent is not None:
            m = parent._hash_state(sep).copy()
            items = self.suffix[-1:]
        else:
            m = hashlib.sha1()
            items = self.suffix
        for item in items:
            if sep:
                m.update(_SEP)
            m.update(_item_bytes(item))
        self._state = m
        self._state_sep = sep
        return m

    def fold_count(self, count: int) -> PRNGKey:
        """``fold_in(rng, hash32(suffix + (count,)))``: the key ``make_rng`` returns."""
        sep = bool(config.flax_fix_rng_separator)
        m = self._hash_state(sep).copy()
        if sep:
            m.update(_SEP)
        m.update(count.to_bytes((count.bit_length() + 7) // 8, "big"))
        return fold_in(self.rng, int.from_bytes(m.digest()[:4], "big"), self._cell)

    def as_jax_rng(self) -> PRNGKey:
        """The key with the suffix folded in (the key itself when the suffix is empty)."""
        if not self.suffix:
            return self.rng
        digest = self._hash_state(bool(config.flax_fix_rng_separator)).digest()
        return fold_in(self.rng, int.from_bytes(digest[:4], "big"), self._cell)

    def clear_suffix(self) -> LazyRng:
        """A LazyRng with the suffix folded into the key and an empty suffix."""
        return LazyRng(self.as_jax_rng(), ())

    def replace(self, **updates: Any) -> LazyRng:
        return LazyRng(updates.get("rng", self.rng), updates.get("suffix", self.suffix))

    def __repr__(self) -> str:
        return f"LazyRng(rng={self.rng!r}, suffix={self.suffix!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LazyRng):
            return NotImplemented
        return self.rng is other.rng and self.suffix == other.suffix

    __hash__ = None  # type: ignore[assignment]


jax.tree_util.register_pytree_node(
    LazyRng,
    lambda r: ((r.rng,), r.suffix),
    lambda suffix, children: LazyRng(children[0], suffix),
)


def is_valid_rng(rng: Any) -> bool:
    """True for a PRNG key: a typed key array, or a uint32 array of the default key shape."""
    if isinstance(rng, LazyRng):
        return True
    dtype = getattr(rng, "dtype", None)
    if dtype is None:
        return False
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return True
    return str(dtype) == "uint32" and len(getattr(rng, "shape", ())) == 1
