"""The functional modes' own checks and plumbing: ``graph_updates=False`` and ``graph=False``.

What the functional modes write back is a branch of the lifting primitive
(:mod:`flaxen.nnx._lift`): ``exit(inner, out, functional=name)`` returns the input
Variables' new values and the output's node values, ``Lift.finish`` writes the former into
the input Variables and builds the latter as new objects, refusing outputs that alias an
input. Every transform takes that branch through ``lift.pure(f, functional=...)`` (or
``_lift.exit``) and ``lift.finish``; this file adds what only these modes need: tree mode's
refusal of a Variable or node reached twice among the inputs (:func:`check_no_shared`: a
pytree has no shared references) and the ``jax.Ref`` plumbing of a traced function's
results (:func:`unref` / :func:`reref`).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> from flaxen.nnx import _lift
>>> v = nnx.Variable(jnp.array(0))
>>> def f(v):
...     v.value += 1
...     return v.value * 2
>>> lift = _lift.Lift((v,), {})
>>> values, out_leaves = lift.pure(f, functional='jit')(lift.values, lift.leaves)
>>> int(lift.finish(lift.out, values, out_leaves)), int(v.value)
(2, 1)
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift
from flaxen.nnx._graphdef import NodeDef, NodeRef, VariableDef


def _path_str(path: tuple) -> str:
    return "".join(f"[{k!r}]" if isinstance(k, int) else f".{k}" for k in path) or "<root>"


def _root_paths(static: _lift.InStatic) -> list[tuple]:
    """A readable path prefix for each graph node among the arguments."""
    treedef = static.treedef
    n = treedef.num_leaves
    labels = jax.tree_util.tree_unflatten(treedef, list(range(n)))
    paths: dict[int, tuple] = {}
    for kp, i in jax.tree_util.tree_flatten_with_path(labels)[0]:
        paths[i] = tuple(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))
                         for k in kp)
    out = []
    for p in static.node_pos:
        path = paths.get(p, (p,))
        # ((args...), {kwargs}) -> ('args', i) / ('kwargs', name)
        if path and path[0] == 0:
            path = path[1:]
        elif path and path[0] == 1:
            path = path[1:]
        out.append(path)
    return out


def check_no_shared(static: _lift.InStatic, fn_name: str) -> None:
    """Tree mode: every graph node and Variable must appear once among the inputs."""
    defs = static.defs
    if not defs:
        return
    first: dict[int, tuple] = {}

    def walk(d: tp.Any, path: tuple) -> None:
        t = type(d)
        if t is NodeRef:
            raise NNXTransformError(
                "", f"nnx.{fn_name}: Duplicate {d.type.__name__} found at paths "
                f"{_path_str(first.get(d.index, ()))} and {_path_str(path)}: in tree mode "
                "(graph=False) the inputs are pytrees, which cannot share a Variable or "
                "Module",
                "Pass each object once, or use graph=True (graph mode keeps shared "
                "references).")
        if t is VariableDef:
            if d.index >= 0:
                first[d.index] = path
        elif t is NodeDef:
            if d.index >= 0:
                first[d.index] = path
            for k, s in d.attributes:
                walk(s, (*path, k))

    for d, p in zip(defs, _root_paths(static)):
        walk(d, p)


# -- jax.Ref values: they go into a traced function but cannot come out of one ----------------

_Ref: tp.Any = getattr(jax, "Ref", None)


def has_refs(*seqs: tp.Sequence[tp.Any]) -> bool:
    return _Ref is not None and any(isinstance(x, _Ref) for s in seqs for x in s)


def unref(seqs: tuple[list, ...], inputs: tuple[tp.Sequence[tp.Any], ...]) -> tuple:
    """Inside a trace: every ``jax.Ref`` in ``seqs`` replaced by its value, or by None when it
    is one of the ``inputs`` (JAX already applies writes to an input Ref). Returns the new
    lists and the static plan ``((seq, pos, source), ...)`` that :func:`reref` undoes;
    ``source`` is ``(input seq, input pos)`` or None for a Ref created inside."""
    where = {id(x): (k, i) for k, s in enumerate(inputs) for i, x in enumerate(s)
             if isinstance(x, _Ref)}
    out = []
    plan = []
    for k, seq in enumerate(seqs):
        seq = list(seq)
        for i, x in enumerate(seq):
            if isinstance(x, _Ref):
                src = where.get(id(x))
                plan.append((k, i, src))
                seq[i] = None if src is not None else x[...]
        out.append(seq)
    return tuple(out), tuple(plan)


def reref(seqs: tuple[list, ...], plan: tuple, inputs: tuple[tp.Sequence[tp.Any], ...],
          make_refs: bool = True) -> tuple:
    """Outside: input Refs put back (the same objects), new ones created from their values."""
    seqs = tuple(list(s) for s in seqs)
    for k, i, src in plan:
        if src is not None:
            seqs[k][i] = inputs[src[0]][src[1]]
        elif make_refs:
            seqs[k][i] = jax.new_ref(seqs[k][i])
    return seqs
