"""Serialization of pytrees: state dicts and msgpack bytes compatible with Flax.

Two layers:

* **State dicts.** :func:`to_state_dict` turns a registered object (dict, list,
  tuple, namedtuple, FrozenDict, struct dataclasses, ...) into nested dicts with
  string keys; :func:`from_state_dict` rebuilds an object shaped like a target
  from such a dict. New types join with :func:`register_serialization_state`.
* **Bytes.** :func:`to_bytes` / :func:`from_bytes` pack a state dict with msgpack,
  encoding arrays exactly the way Flax does, so bytes are interchangeable.

>>> import numpy as np
>>> from flaxen import serialization
>>> target = {'w': np.zeros(2, np.float32), 'layers': [1, 2]}
>>> data = serialization.to_bytes({'w': np.ones(2, np.float32), 'layers': [3, 4]})
>>> restored = serialization.from_bytes(target, data)
>>> restored['w'].tolist(), restored['layers']
([1.0, 1.0], [3, 4])
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import msgpack
import numpy as np

from flaxen import _msgpack_ext, _tree_compare

# Arrays larger than this many bytes are split into chunks when packed, since one
# msgpack object cannot exceed 4 GiB. Same value as Flax, so bytes match.
MAX_CHUNK_SIZE = 2**30

__all__ = [
    "MAX_CHUNK_SIZE",
    "current_path",
    "from_bytes",
    "from_state_dict",
    "is_serializable",
    "msgpack_restore",
    "msgpack_serialize",
    "register_serialization_state",
    "to_bytes",
    "to_state_dict",
]


class _ErrorContext(threading.local):
    """Per-thread stack of the state-dict keys being restored, for error paths."""

    def __init__(self) -> None:
        self.path: list[str] = []


_error_context = _ErrorContext()


@contextmanager
def _record_path(name: str) -> Iterator[None]:
    _error_context.path.append(name)
    try:
        yield
    finally:
        _error_context.path.pop()


def current_path() -> str:
    """Returns the path of the state dict being restored, e.g. ``./params/Dense_0``.

    Handlers registered with :func:`register_serialization_state` may call it
    to name the failing location in their own errors.

    >>> current_path()
    ''
    """
    return "/".join(_error_context.path)


def _display_path() -> str:
    # The user-facing form in our messages: `/params/Dense_0/kernel`, root `/`.
    parts = _error_context.path
    if parts and parts[0] == ".":
        parts = parts[1:]
    return "/" + "/".join(parts)


class _NamedTuple:
    """Registry key standing for every namedtuple class."""


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


_STATE_DICT_REGISTRY: dict[Any, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]] = {}


def _registry_key(x: Any) -> Any:
    return _NamedTuple if _is_namedtuple(x) else type(x)


def is_serializable(target: Any) -> bool:
    """True if ``target``'s type has a state-dict handler registered.

    >>> is_serializable({}), is_serializable(3)
    (True, False)
    """
    return _registry_key(target) in _STATE_DICT_REGISTRY


def register_serialization_state(
    ty: type,
    ty_to_state_dict: Callable[[Any], dict[str, Any]],
    ty_from_state_dict: Callable[[Any, dict[str, Any]], Any],
    override: bool = False,
) -> None:
    """Registers how to turn objects of type ``ty`` into state dicts and back.

    ``ty_to_state_dict(obj)`` returns a dict with string keys;
    ``ty_from_state_dict(target, state)`` returns a new object shaped like
    ``target`` holding the data of ``state``. Registering a type twice raises
    ``ValueError`` unless ``override=True``.

    >>> class Box:
    ...     def __init__(self, v): self.v = v
    >>> register_serialization_state(
    ...     Box, lambda b: {'v': to_state_dict(b.v)},
    ...     lambda b, s: Box(from_state_dict(b.v, s['v'], name='v')))
    >>> from_state_dict(Box(0), {'v': 5}).v
    5
    """
    if ty in _STATE_DICT_REGISTRY and not override:
        raise ValueError(
            f'a serialization handler for "{ty.__name__}" is already registered. '
            "Pass override=True to replace it."
        )
    _STATE_DICT_REGISTRY[ty] = (ty_to_state_dict, ty_from_state_dict)


def to_state_dict(target: Any) -> dict[str, Any]:
    """Returns a state dict (nested dicts with string keys) for ``target``.

    Unregistered objects (arrays, numbers, None, ...) are returned unchanged.

    >>> to_state_dict({'a': [1, (2, 3)], 0: None})
    {'a': {'0': 1, '1': {'0': 2, '1': 3}}, '0': None}
    """
    handlers = _STATE_DICT_REGISTRY.get(_registry_key(target))
    if handlers is None:
        return target
    return handlers[0](target)


def from_state_dict(
    target: Any, state: dict[str, Any], name: str = ".", *, strict: bool = False
) -> Any:
    """Returns a copy of ``target`` with its data taken from the state dict ``state``.

    ``name`` is the key under which ``state`` sits in its parent; handlers use
    it so that errors name the full failing path (e.g. ``/params/Dense_0``).

    As in Flax, the target gives the structure and ``state`` the values: an array of another
    shape or dtype is taken as it is, and keys only ``state`` has are dropped. With
    ``strict=True`` (a flaxen addition) every path whose structure, shape or dtype differs is
    listed in one :class:`~flaxen.errors.RestoreMismatchError` instead.

    >>> from_state_dict({'a': 1, 'b': [0, 0]}, {'a': 2, 'b': {'0': 3, '1': 4}})
    {'a': 2, 'b': [3, 4]}
    >>> import numpy as np
    >>> try:
    ...     from_state_dict({'w': np.zeros(2)}, {'w': np.zeros(3), 'v': 1}, strict=True)
    ... except ValueError as e:
    ...     for line in str(e).splitlines()[1:3]:
    ...         print(line)
      /v: nothing in the target, int restored
      /w: shape (2,) in the target, (3,) restored
    """
    if strict:
        _tree_compare.check_restored(to_state_dict(target), state)
    handlers = _STATE_DICT_REGISTRY.get(_registry_key(target))
    if handlers is None:
        return state
    with _record_path(name):
        return handlers[1](target, state)


def _check_mapping(state: Any, kind: str) -> None:
    if not isinstance(state, dict):
        raise ValueError(
            f"Cannot restore a {kind} at path {_display_path()}: the target has a {kind} there but "
            f"the state holds {type(state).__name__} {_short(state)}. The saved data has a "
            "different structure than the target; restore into a target built like the saved tree."
        )


def _mismatch(message: str, fix: str) -> ValueError:
    # The message is Flax's, word for word (code matches on it); the fix rides along as a note,
    # which tracebacks show under it.
    error = ValueError(message)
    error.add_note(fix)
    return error


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _dict_state_dict(xs: dict[Any, Any]) -> dict[str, Any]:
    return {str(key): to_state_dict(value) for key, value in xs.items()}


def _restore_dict(xs: dict[Any, Any], states: dict[str, Any]) -> dict[Any, Any]:
    _check_mapping(states, "dict")
    missing = [key for key in xs if str(key) not in states]
    if missing:
        raise _mismatch(
            "The target dict keys and state dict keys do not match, target dict contains keys "
            f"{set(map(str, missing))} which are not present in state dict at path "
            f"{current_path()}",
            f"The state dict has keys {sorted(map(str, states))} there. Restore into a target "
            "with the same keys as the saved tree.",
        )
    return {key: from_state_dict(value, states[str(key)], name=str(key))
            for key, value in xs.items()}


def _list_state_dict(xs: list[Any] | tuple[Any, ...]) -> dict[str, Any]:
    return {str(i): to_state_dict(x) for i, x in enumerate(xs)}


def _restore_list(xs: list[Any], state_dict: dict[str, Any]) -> list[Any]:
    _check_mapping(state_dict, "list")
    if len(state_dict) != len(xs):
        raise _mismatch(
            "The size of the list and the state dict do not match, got "
            f"{len(xs)} and {len(state_dict)} at path {current_path()}",
            "The target list (or tuple) must have as many entries as the saved one.",
        )
    out = []
    for i, x in enumerate(xs):
        key = str(i)
        if key not in state_dict:
            raise ValueError(
                f"The state dict for the list at path {_display_path()} has no entry {key!r} "
                f"(keys: {sorted(state_dict)}). Lists are saved with keys '0', '1', ...; the saved "
                "data has another structure."
            )
        out.append(from_state_dict(x, state_dict[key], name=key))
    return out


def _restore_tuple(xs: tuple[Any, ...], state_dict: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(_restore_list(list(xs), state_dict))


def _namedtuple_state_dict(nt: Any) -> dict[str, Any]:
    return {key: to_state_dict(getattr(nt, key)) for key in nt._fields}


_LEGACY_NAMEDTUPLE_KEYS = frozenset({"name", "fields", "values"})


def _from_legacy_namedtuple(state_dict: dict[str, Any]) -> dict[str, Any]:
    # Old Flax versions saved a named tuple as {'name': ..., 'fields': {'0': 'a', ...},
    # 'values': {'0': 1, ...}}; today's form is {'a': 1, ...}.
    fields, values = state_dict["fields"], state_dict["values"]
    if not isinstance(fields, dict) or not isinstance(values, dict) or set(fields) != set(values):
        return state_dict
    return {fields[key]: values[key] for key in fields}


def _restore_namedtuple(xs: Any, state_dict: dict[str, Any]) -> Any:
    _check_mapping(state_dict, "namedtuple")
    if set(state_dict) == _LEGACY_NAMEDTUPLE_KEYS and set(xs._fields) != _LEGACY_NAMEDTUPLE_KEYS:
        state_dict = _from_legacy_namedtuple(state_dict)
    if set(state_dict) != set(xs._fields):
        raise _mismatch(
            "The field names of the state dict and the named tuple do not match, got "
            f"{set(state_dict)} and {set(xs._fields)} at path {current_path()}",
            f"Restore into a {type(xs).__name__} with the saved fields.",
        )
    fields = {k: from_state_dict(getattr(xs, k), v, name=k) for k, v in state_dict.items()}
    return type(xs)(**fields)


def _partial_state_dict(p: jax.tree_util.Partial) -> dict[str, Any]:
    return {"args": to_state_dict(p.args), "keywords": to_state_dict(p.keywords)}


def _restore_partial(p: jax.tree_util.Partial, state: dict[str, Any]) -> jax.tree_util.Partial:
    _check_mapping(state, "jax.tree_util.Partial")
    args = from_state_dict(p.args, state["args"], name="args")
    keywords = from_state_dict(p.keywords, state["keywords"], name="keywords")
    return jax.tree_util.Partial(p.func, *args, **keywords)


register_serialization_state(dict, _dict_state_dict, _restore_dict)
register_serialization_state(list, _list_state_dict, _restore_list)
register_serialization_state(tuple, _list_state_dict, _restore_tuple)
register_serialization_state(_NamedTuple, _namedtuple_state_dict, _restore_namedtuple)
register_serialization_state(jax.tree_util.Partial, _partial_state_dict, _restore_partial)


def msgpack_serialize(pytree: Any, in_place: bool = False) -> bytes:
    """Packs a state dict (nested dicts/lists of arrays, numbers, str, ...) into msgpack bytes.

    Arrays of every numeric dtype (bfloat16 and float8 included), numpy scalars
    and complex numbers are supported; arrays above ``MAX_CHUNK_SIZE`` bytes are
    chunked. With ``in_place=False`` dict keys are written in sorted order (like
    Flax, which copies the tree with ``jax.tree_util`` first); with ``True`` in
    insertion order. The input is never modified.

    >>> import numpy as np
    >>> msgpack_restore(msgpack_serialize({'x': np.arange(3)}))['x'].tolist()
    [0, 1, 2]
    """
    return _msgpack_ext.encode(pytree, MAX_CHUNK_SIZE, sort_keys=not in_place)


def msgpack_restore(encoded_pytree: bytes | bytearray | memoryview) -> Any:
    """Unpacks bytes from :func:`msgpack_serialize` into nested dicts with numpy arrays.

    Never executes code from the data. Truncated or corrupted input raises
    ``ValueError`` saying what is wrong.

    >>> msgpack_restore(msgpack_serialize({'a': [1, 2.5, None]}))
    {'a': [1, 2.5, None]}
    """
    return _msgpack_ext.decode(encoded_pytree)


def to_bytes(target: Any) -> bytes:
    """Serializes ``target`` (any registered pytree) to msgpack bytes, Flax-compatible.

    >>> from_bytes([0], to_bytes([7]))
    [7]
    """
    return msgpack_serialize(to_state_dict(target), in_place=True)


def from_bytes(target: Any, encoded_bytes: bytes, *, strict: bool = False) -> Any:
    """Restores bytes from :func:`to_bytes` into an object shaped like ``target``.

    Arrays come back as numpy arrays. Malformed bytes raise ``ValueError``. ``strict`` is
    :func:`from_state_dict`'s.

    >>> from_bytes({'a': 0}, to_bytes({'a': 1}))
    {'a': 1}
    """
    return from_state_dict(target, msgpack_restore(encoded_bytes), strict=strict)


# --- Flax's private helpers, kept for code written against them -------------------------
# Code written for Flax drives msgpack itself with these hooks, e.g.
# ``msgpack.unpackb(data, ext_hook=serialization._msgpack_ext_unpack, raw=False)``, so each
# keeps Flax's name, signature and output. The bytes they write are the ones
# msgpack_serialize writes (the format lives in flaxen._msgpack_ext).


class _MsgpackExtType(enum.IntEnum):
    """The msgpack extension type codes of the format (Flax's names for them)."""

    ndarray = _msgpack_ext.EXT_NDARRAY
    native_complex = _msgpack_ext.EXT_COMPLEX
    npscalar = _msgpack_ext.EXT_NPSCALAR


def _ndarray_to_bytes(arr: Any) -> bytes:
    """The payload of an array extension: msgpack ``[shape, dtype name, C-order bytes]``.

    >>> _ndarray_from_bytes(_ndarray_to_bytes(np.arange(3, dtype=np.int8))).tolist()
    [0, 1, 2]
    """
    if isinstance(arr, jax.Array):
        arr = np.array(arr)
    # Flax refuses exactly these two kinds (their bytes do not describe the values); other
    # dtypes are written as they are, even ones msgpack_serialize refuses, as Flax does.
    if arr.dtype.hasobject or arr.dtype.isalignedstruct:
        raise ValueError(
            f"Cannot serialize an array of dtype {arr.dtype}: object and structured dtypes "
            "have no byte form. Convert the array to a numeric dtype first."
        )
    return msgpack.packb((arr.shape, arr.dtype.name, arr.tobytes("C")), use_bin_type=True)


def _dtype_from_name(name: str | bytes) -> Any:
    """The dtype a stored dtype name stands for.

    Flax reads payloads with ``raw=True``, so names arrive as bytes; for ``b'bfloat16'`` it
    returns the ``jnp.bfloat16`` scalar type, for everything else ``np.dtype(name)``. Only a
    name is mapped here: building arrays goes through flaxen's checked decoder.

    >>> _dtype_from_name(b'float32'), _dtype_from_name(b'bfloat16') is jnp.bfloat16
    (dtype('float32'), True)
    """
    if name == b"bfloat16":
        return jnp.bfloat16
    # numpy reads a bytes name like its text
    return np.dtype(name.decode("ascii") if isinstance(name, bytes) else name)


def _ndarray_from_bytes(data: bytes) -> np.ndarray:
    """The (read-only) array an array-extension payload holds.

    Malformed payloads and object/string dtypes raise ``ValueError``.

    >>> _ndarray_from_bytes(_ndarray_to_bytes(np.float32(1.5))).shape
    ()
    """
    return _msgpack_ext._decode_array(data)


def _msgpack_ext_pack(x: Any) -> Any:
    """``default=`` hook for ``msgpack.packb``: arrays, complex numbers and numpy scalars as
    the extension types :func:`msgpack_restore` reads; anything else is returned unchanged.

    >>> import msgpack, numpy as np
    >>> data = msgpack.packb(np.arange(3), default=_msgpack_ext_pack, strict_types=True)
    >>> msgpack_restore(data).tolist()
    [0, 1, 2]
    """
    if isinstance(x, (np.ndarray, jax.Array)):
        return msgpack.ExtType(_MsgpackExtType.ndarray, _ndarray_to_bytes(x))
    if isinstance(x, np.generic):
        return msgpack.ExtType(_MsgpackExtType.npscalar, _ndarray_to_bytes(np.asarray(x)))
    if isinstance(x, complex):
        return msgpack.ExtType(_MsgpackExtType.native_complex, msgpack.packb((x.real, x.imag)))
    return x


def _msgpack_ext_unpack(code: int, data: bytes) -> Any:
    """``ext_hook=`` for ``msgpack.unpackb``: the inverse of :func:`_msgpack_ext_pack`.

    Array payloads become read-only numpy arrays, numpy scalars numpy scalars, complex
    payloads ``complex``; codes of other extensions come back as ``msgpack.ExtType``.

    >>> import msgpack
    >>> data = msgpack.packb({'x': 1 + 2j}, default=_msgpack_ext_pack)
    >>> msgpack.unpackb(data, ext_hook=_msgpack_ext_unpack, raw=False)
    {'x': (1+2j)}
    """
    if code in (_MsgpackExtType.ndarray, _MsgpackExtType.native_complex,
                _MsgpackExtType.npscalar):
        return _msgpack_ext._ext_hook(code, data)
    # Flax hands unknown extensions back untouched (flaxen's own decoder refuses them).
    return msgpack.ExtType(code, data)


def _np_convert_in_place(d: Any) -> Any:
    """Turns ``jax.Array`` leaves of nested dicts into numpy arrays, in place.

    Returns ``d`` (or, for a lone ``jax.Array``, its numpy copy). Lists are not entered.

    >>> tree = {'a': jnp.ones(2), 'b': {'c': jnp.zeros(1)}}
    >>> _np_convert_in_place(tree) is tree, type(tree['b']['c']).__name__
    (True, 'ndarray')
    """
    if isinstance(d, dict):
        for key, value in d.items():
            if isinstance(value, jax.Array):
                d[key] = np.array(value)  # a writable copy, like Flax's
            elif isinstance(value, dict):
                _np_convert_in_place(value)
    elif isinstance(d, jax.Array):
        return np.array(d)
    return d


def _chunk(arr: np.ndarray) -> dict[str, Any]:
    """The chunked form of ``arr``: its flattened values cut into ``MAX_CHUNK_SIZE``-byte
    pieces, ``{'__msgpack_chunked_array__': True, 'shape': {'0': d0, ...},
    'chunks': {'0': piece, ...}}``.

    >>> sorted(_chunk(np.zeros((2, 2))))
    ['__msgpack_chunked_array__', 'chunks', 'shape']
    """
    # Read MAX_CHUNK_SIZE at call time: tests and users lower it to exercise chunking.
    per_chunk = max(1, MAX_CHUNK_SIZE // arr.dtype.itemsize)
    flat = arr.reshape(-1)
    pieces = [flat[i:i + per_chunk] for i in range(0, flat.size, per_chunk)]
    return {
        _msgpack_ext.CHUNKED_KEY: True,
        "shape": {str(i): d for i, d in enumerate(arr.shape)},
        "chunks": {str(i): p for i, p in enumerate(pieces)},
    }


def _unchunk(data: dict[str, Any]) -> np.ndarray:
    """The array a chunked form (see :func:`_chunk`) stands for.

    >>> _unchunk(_chunk(np.arange(4).reshape(2, 2))).tolist()
    [[0, 1], [2, 3]]
    """
    if _msgpack_ext.CHUNKED_KEY not in data:
        raise ValueError(f"not a chunked array: no {_msgpack_ext.CHUNKED_KEY!r} key")
    # The decoder drops each chunk from its dict as it copies it (to bound peak memory while
    # restoring); hand it a copy so the caller's dict is left as it was.
    return _msgpack_ext._unchunk({**data, "chunks": dict(data["chunks"])})


def _chunk_array_leaves_in_place(d: Any) -> Any:
    """Replaces numpy arrays above ``MAX_CHUNK_SIZE`` bytes in nested dicts by their chunked
    form (:func:`_chunk`), in place, and returns ``d`` (a lone big array: its chunked form).

    Only ``np.ndarray`` leaves are chunked (Flax converts ``jax.Array`` leaves first, with
    :func:`_np_convert_in_place`); lists are not entered.

    >>> _chunk_array_leaves_in_place({'a': np.zeros(3)})['a'].shape  # small: unchanged
    (3,)
    """
    if isinstance(d, dict):
        for key, value in d.items():
            if isinstance(value, np.ndarray):
                if value.size * value.dtype.itemsize > MAX_CHUNK_SIZE:
                    d[key] = _chunk(value)
            elif isinstance(value, dict):
                _chunk_array_leaves_in_place(value)
    elif isinstance(d, np.ndarray) and d.size * d.dtype.itemsize > MAX_CHUNK_SIZE:
        return _chunk(d)
    return d


def _unchunk_array_leaves_in_place(d: Any) -> Any:
    """Turns chunked forms in nested dicts back into arrays, in place, and returns ``d`` (a
    lone chunked form: its array). The inverse of :func:`_chunk_array_leaves_in_place`.

    >>> tree = {'a': _chunk(np.arange(3))}
    >>> _unchunk_array_leaves_in_place(tree)['a'].tolist()
    [0, 1, 2]
    """
    if isinstance(d, dict):
        if _msgpack_ext.CHUNKED_KEY in d:
            return _unchunk(d)
        for key, value in d.items():
            if isinstance(value, dict):
                if _msgpack_ext.CHUNKED_KEY in value:
                    d[key] = _unchunk(value)
                else:
                    _unchunk_array_leaves_in_place(value)
    return d
