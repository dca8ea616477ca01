"""RNG derivation for scopes: ``LazyRng`` and the static fold-in hash, bit-identical to Flax.

A stream's key for a scope is the root key plus a *suffix* of names (the scope path) that is
folded in only when a key is actually drawn: ``make_rng`` folds in
``hash32(suffix + (count,))``, where ``hash32`` is the first 4 bytes (big-endian) of the
SHA-1 of the items (str as UTF-8, int as minimal big-endian bytes), each preceded by a zero
byte when ``config.flax_fix_rng_separator`` is on.

Speed: each ``LazyRng`` keeps the SHA-1 state of its suffix, built from its parent's state,
so drawing a key hashes only the counter, not the whole path.

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

from flaxen.configurations import config

PRNGKey = Any
_SEP = b"\x00"


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
    return jax.random.fold_in(key, hash_suffix(data))


class LazyRng:
    """A PRNG key with a not-yet-folded-in suffix of names.

    ``LazyRng.create(rng, *names)`` extends the suffix; ``as_jax_rng()`` folds it in;
    ``fold_count(n)`` gives the key of the ``n``-th ``make_rng`` call at this suffix.
    """

    __slots__ = ("rng", "suffix", "_parent", "_state", "_state_sep")

    def __init__(self, rng: PRNGKey, suffix: tuple = ()) -> None:
        self.rng = rng
        self.suffix = tuple(suffix)
        self._parent: LazyRng | None = None
        self._state = None
        self._state_sep: bool | None = None

    @classmethod
    def create(cls, rng: LazyRng | PRNGKey, *suffix: int | str) -> LazyRng:
        """A LazyRng whose suffix is ``rng``'s (if it is a LazyRng) followed by ``suffix``."""
        if not isinstance(rng, LazyRng):
            return cls(rng, suffix)
        if len(suffix) != 1:
            return cls(rng.rng, rng.suffix + suffix)
        out = cls.__new__(cls)
        out.rng = rng.rng
        out.suffix = rng.suffix + suffix
        out._parent = rng
        out._state = None
        out._state_sep = None
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
        return jax.random.fold_in(self.rng, int.from_bytes(m.digest()[:4], "big"))

    def as_jax_rng(self) -> PRNGKey:
        """The key with the suffix folded in (the key itself when the suffix is empty)."""
        if not self.suffix:
            return self.rng
        digest = self._hash_state(bool(config.flax_fix_rng_separator)).digest()
        return jax.random.fold_in(self.rng, int.from_bytes(digest[:4], "big"))

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
