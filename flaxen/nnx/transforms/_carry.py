"""The shared core of today's ``nnx.scan``, ``nnx.while_loop`` and ``nnx.fori_loop``.

All three hand JAX a flat list of leaf values and rebuild the user's objects around them on
each step. :class:`Flat` walks the positional arguments with the graph engine (every
Variable and array is a leaf, with a path starting at its argument's position); inside a
step, :meth:`Flat.rebuild` makes fresh copies; :func:`check_same` compares what the step
returns with what went in (the loop state must keep its structure and its Variables'
identities); :meth:`Flat.write_back` brings the caller's objects up to date in place.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> count = nnx.Variable(jnp.array(0))
>>> out = nnx.fori_loop(0, 3, lambda i, c: c, count)
>>> out is count
True
"""

from __future__ import annotations

import functools
import inspect
import typing as tp

import jax
import jax.numpy as jnp

from flaxen.errors import NNXTransformError
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graphdef import NodeDef, NodeRef, VariableDef
from flaxen.nnx.variablelib import Variable

_PY_SCALARS = (bool, int, float, complex)


def is_node(x: tp.Any) -> bool:
    return isinstance(x, (GraphNode, Variable))


def resolve_kwargs(f: tp.Callable, args: tuple, kwargs: dict) -> tuple:
    """``args`` with the keyword arguments moved to their positions (defaults filled in), so
    a transform's per-argument axes cover them; e.g. ``Module(rngs=...)`` of a transformed
    ``__init__``. Keyword-only parameters cannot be placed: a TypeError says so."""
    if not kwargs:
        return args
    target = f
    if isinstance(target, functools.partial):  # a partial's signature is opaque
        def target(*a: tp.Any, **k: tp.Any) -> None:  # noqa: ARG001
            return None
    bound = inspect.signature(target).bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(
            f"keyword arguments could not be resolved to positions: {sorted(bound.kwargs)} "
            "(keyword-only parameters, or a functools.partial). Pass them positionally.")
    return tuple(bound.args)


def arrays_for_scalars(tree: tp.Any) -> tp.Any:
    """Python numbers in ``tree`` (outside graph nodes) as JAX arrays, so they can be loop
    state (the graph engine would otherwise keep them as static constants)."""

    def conv(x: tp.Any) -> tp.Any:
        if type(x) in _PY_SCALARS:
            return jnp.asarray(x)
        return x

    return jax.tree_util.tree_map(conv, tree, is_leaf=is_node)


class Flat:
    """The positional arguments walked into definitions and leaves (one walk, shared refs)."""

    __slots__ = ("roots", "fg", "defs", "leaves", "paths", "values", "n_refs")

    def __init__(self, roots: tp.Sequence[tp.Any]) -> None:
        self.roots = tuple(roots)
        fg = eng.flatten(self.roots, root_paths=[(i,) for i in range(len(self.roots))])
        self.fg = fg
        self.defs = fg.defs
        self.leaves = fg.leaves
        self.paths = fg.paths
        self.values = fg.values()
        self.n_refs = len(fg.refs)

    def rebuild(self, values: tp.Sequence[tp.Any]) -> tuple[list, dict[int, tp.Any]]:
        """Fresh objects holding ``values`` (inside a step)."""
        return eng.unflatten(self.defs, values)

    def write_back(self, defs: tuple, values: tp.Sequence[tp.Any]) -> list:
        """Objects for ``defs`` whose first ``n_refs`` shared objects are the caller's own,
        updated in place; objects created inside are built new."""
        idxmap = dict(enumerate(self.fg.refs))
        roots, _ = eng.unflatten(defs, values, idxmap)
        return roots


def _structure(defs: tp.Sequence[tp.Any]) -> list:
    """A comparable outline of ``defs``: kinds, types and attribute names (not the values or
    the static attributes)."""
    out: list = []

    def walk(d: tp.Any) -> None:
        t = type(d)
        if t is VariableDef:
            out.append(("v", d.type, d.index))
        elif t is NodeRef:
            out.append(("r", d.type, d.index))
        elif t is NodeDef:
            out.append(("n", d.type, d.index, tuple(k for k, _ in d.attributes)))
            for _, s in d.attributes:
                walk(s)
        else:
            out.append(("s",))

    for d in defs:
        walk(d)
    return out


def check_same(before: Flat, after_defs: tuple, after_refs: list, built: dict[int, tp.Any],
               what: str, identity_msg: str, n_roots: int | None = None) -> None:
    """Raises when the loop state ``after`` (walked) differs from ``before`` in structure or
    holds other objects than the step's copies of the inputs."""
    n = len(before.defs) if n_roots is None else n_roots
    for i, ref in enumerate(after_refs[: before.n_refs]):
        if built.get(i) is not ref:
            path = _ref_path(before, i)
            raise NNXTransformError(
                path, f"{what}: {identity_msg}; the step returned a different object "
                f"({type(ref).__name__}) where its input had one",
                "Update Variables in place (v[...] = ...) and return the objects the step "
                "received instead of new ones.")
    if _structure(after_defs[:n]) != _structure(before.defs[:n]):
        raise NNXTransformError(
            "", f"{what}: the loop state changed its structure between iterations (an "
            "attribute, a Variable or a container was added, removed or replaced)",
            "Create all state before the loop and keep the same objects in it.")


def _ref_path(flat: Flat, index: int) -> str:
    obj = flat.fg.refs[index] if index < len(flat.fg.refs) else None
    for p, leaf in zip(flat.paths, flat.leaves):
        if leaf is obj:
            return eng.path_str(p)
    return ""
