"""Compare a restore target with what was restored: the check behind ``strict=True`` restores.

Flax's restores take the structure from the target and the values from the saved data, so a
checkpoint of another model (other layer sizes, other dtypes) restores silently and the error
comes later, from a layer that blames its inputs. :func:`tree_mismatches` lists every path at
which two trees differ in structure, shape or dtype, and :func:`check_restored` raises one
:class:`~flaxen.errors.RestoreMismatchError` listing them all. Foundation-level: this module
imports neither ``flaxen.linen`` nor ``flaxen.nnx``, so every restore path may use it.

>>> import numpy as np
>>> target = {'w': np.zeros((2, 3), np.float32), 'b': np.zeros(3, np.float32)}
>>> saved = {'w': np.zeros((4, 3), np.float32), 'b': np.zeros(3, np.float16)}
>>> for m in tree_mismatches(target, saved):
...     print(m.path, m.kind, m.expected, m.found)
/b dtype float32 float16
/w shape (2, 3) (4, 3)
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

__all__ = ["Mismatch", "check_restored", "tree_mismatches"]

# What a path holds on the side that lacks it.
ABSENT = "nothing"


class Mismatch(NamedTuple):
    """One path where the restored tree differs from the target.

    ``kind`` is ``'structure'`` (the path holds a leaf on one side only: ``expected`` or
    ``found`` is ``'nothing'``, the other side describes the leaf, e.g. ``'float32[2, 3]'``),
    ``'shape'`` (both are shape tuples) or ``'dtype'`` (both are dtype names).
    """

    path: str
    kind: str
    expected: Any
    found: Any


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _leaves_by_path(
    tree: Any, is_leaf: Callable[[Any], bool] | None
) -> dict[str, Any]:
    # None, like an empty container, holds no leaf: formats differ in how they save an empty
    # optimizer slot (None, {}), and both mean the same.
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    # Mapping keys and sequence indices both become strings, so a state dict
    # ({'0': ...}) lines up with the list or tuple it was made from.
    return {"/" + "/".join(_key_name(k) for k in path): x for path, x in flat}


def _shape(x: Any) -> tuple[int, ...] | None:
    shape = getattr(x, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(x, numbers.Number):
        return ()
    return None


def _dtype(x: Any) -> str | None:
    dtype = getattr(x, "dtype", None)
    return None if dtype is None else str(dtype)


def _describe(x: Any) -> str:
    shape, dtype = _shape(x), _dtype(x)
    if dtype is not None and shape is not None:
        return f"{dtype}{list(shape)}"
    return type(x).__name__


def tree_mismatches(
    target: Any, restored: Any, *, is_leaf: Callable[[Any], bool] | None = None
) -> list[Mismatch]:
    """Every path whose structure, shape or dtype differs between ``target`` and ``restored``.

    Both are pytrees (dicts, lists, tuples, FrozenDicts, struct dataclasses, state dicts, or
    trees of ``jax.ShapeDtypeStruct``/Orbax metadata, anything with ``.shape``/``.dtype``).
    Paths are ``/``-joined key names; the result is sorted by path. Shapes are compared when
    both leaves have one (Python numbers count as shape ``()``), dtypes only when both leaves
    are arrays, so a Python ``int`` target takes a saved ``int64`` without complaint. Values
    are never compared. ``is_leaf`` stops the walk at matching subtrees, as in ``jax.tree``.

    >>> tree_mismatches({'a': 1.0, 'b': [1, 2]}, {'a': 2.0, 'b': [1]})
    [Mismatch(path='/b/1', kind='structure', expected='int', found='nothing')]
    """
    expected = _leaves_by_path(target, is_leaf)
    found = _leaves_by_path(restored, is_leaf)
    out: list[Mismatch] = []
    for path in sorted(expected.keys() | found.keys()):
        if path not in found:
            out.append(Mismatch(path, "structure", _describe(expected[path]), ABSENT))
            continue
        if path not in expected:
            out.append(Mismatch(path, "structure", ABSENT, _describe(found[path])))
            continue
        a, b = expected[path], found[path]
        shape_a, shape_b = _shape(a), _shape(b)
        if shape_a is not None and shape_b is not None and shape_a != shape_b:
            out.append(Mismatch(path, "shape", shape_a, shape_b))
        dtype_a, dtype_b = _dtype(a), _dtype(b)
        if dtype_a is not None and dtype_b is not None and dtype_a != dtype_b:
            out.append(Mismatch(path, "dtype", dtype_a, dtype_b))
    return out


def check_restored(
    target: Any, restored: Any, *, source: str | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
) -> None:
    """Raises :class:`~flaxen.errors.RestoreMismatchError` listing every :func:`tree_mismatches`.

    ``source`` (a file name, say) is named in the message. Returns None when the trees agree.

    >>> import numpy as np
    >>> check_restored({'w': np.zeros(2)}, {'w': np.ones(2)})  # same shape and dtype: fine
    >>> try:
    ...     check_restored({'w': np.zeros(2)}, {'w': np.ones(3)}, source='ckpt/checkpoint_1')
    ... except ValueError as e:
    ...     print(str(e).splitlines()[1])
      /w: shape (2,) in the target, (3,) restored
    """
    mismatches = tree_mismatches(target, restored, is_leaf=is_leaf)
    if mismatches:
        from flaxen.errors import RestoreMismatchError

        raise RestoreMismatchError(mismatches, source)
