"""The functional modes of today's transforms: ``graph_updates=False`` and ``graph=False``.

With ``graph=True, graph_updates=True`` a transform writes back everything the function did
to its graph-node arguments, structure included (``_lift.Lift.finish``). The functional
modes write back only the new *values* of the Variables that went in, whatever the function
did to the structure, and build graph nodes found in the output as new objects. They refuse
outputs that alias an input Variable (the caller would get two objects for one Variable),
and tree mode (``graph=False``) also refuses a Variable or node reached twice among the
inputs (a pytree has no shared references).

Both modes run on the same primitive as graph mode (:mod:`flaxen.nnx._lift`):

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> from flaxen.nnx import _lift
>>> v = nnx.Variable(jnp.array(0))
>>> def f(v):
...     v.value += 1
...     return v.value * 2
>>> lift = _lift.Lift((v,), {})
>>> new, out_vals, out_leaves, fo = run(lift.static, f, lift.values, lift.leaves, 'jit')
>>> int(finish(lift, fo, new, out_vals, out_leaves)), int(v.value)
(2, 1)
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _lift
from flaxen.nnx._graphdef import NodeDef, NodeRef, VariableDef

_setattr = object.__setattr__


class FnOut:
    """The static half of a functional call's output (identity-compared, one per trace)."""

    __slots__ = ("defs", "treedef", "node_pos")

    def __init__(self, defs: tuple, treedef: tp.Any, node_pos: tuple) -> None:
        self.defs = defs
        self.treedef = treedef
        self.node_pos = node_pos

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def _path_str(path: tuple) -> str:
    return "".join(f"[{k!r}]" if isinstance(k, int) else f".{k}" for k in path) or "<root>"


def _root_paths(static: _lift.InStatic) -> list[tuple]:
    """A readable path prefix for each graph node among the arguments."""
    treedef = static.treedef
    n = treedef.num_leaves
    import jax

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


def input_values(inner: _lift.Inner, values: tp.Sequence[tp.Any]) -> list:
    """The values of the input Variables after the function ran (structure changes ignored)."""
    objs = inner.leaf_objs()
    return [values[i] if o is None else o.raw_value for i, o in enumerate(objs)]


def split_output(inner: _lift.Inner | None, out: tp.Any, fn_name: str
                 ) -> tuple[list, FnOut, list]:
    """``out`` as ``(non-node leaves, FnOut, node values)``; refuses aliased inputs."""
    out_leaves, treedef, pos, nodes = _lift._split_nodes(out)
    if not nodes:
        return out_leaves, FnOut((), treedef, pos), []
    fg = eng.flatten(nodes)
    if inner is not None and inner.outer_of:
        outer_of = inner.outer_of
        for obj in fg.refs:
            if id(obj) in outer_of:
                raise NNXTransformError(
                    "", f"nnx.{fn_name} does not support Variable aliasing between inputs and "
                    f"outputs in functional mode: the output holds the input "
                    f"{type(obj).__name__} itself",
                    "Return a copy (e.g. nnx.clone, or the value v[...]), or use "
                    "graph=True, graph_updates=True.")
    return out_leaves, FnOut(fg.defs, treedef, pos), fg.values()


def run(static: _lift.InStatic, fun: tp.Callable, values: tp.Sequence[tp.Any], leaves: list,
        fn_name: str, args_hook: tp.Callable | None = None
        ) -> tuple[list, list, list, FnOut]:
    """Inside a JAX transform: call ``fun`` on fresh copies; ``(new input values, output node
    values, output leaves, FnOut)``."""
    args, kwargs, inner = _lift.enter(static, values, leaves)
    if args_hook is not None:
        args, kwargs = args_hook(args, kwargs)
    out = fun(*args, **kwargs)
    new_values = input_values(inner, values)
    out_leaves, fo, out_values = split_output(inner, out, fn_name)
    return new_values, out_values, out_leaves, fo


def write_back(lift: _lift.Lift, new_values: tp.Sequence[tp.Any]) -> None:
    """Outside: the new values into the input Variables (bare arrays are left alone)."""
    for var, x in zip(lift.leaf_objs, new_values):
        try:  # no isinstance: Variable's metaclass check is slow on this per-call path
            if var.raw_value is not x:
                _setattr(var, "raw_value", x)
        except AttributeError:  # a bare array held as an attribute
            pass


def build_output(fo: FnOut, out_values: tp.Sequence[tp.Any], out_leaves: list) -> tp.Any:
    """Outside: the output with its graph nodes built as new objects."""
    if fo.defs:
        roots, _ = eng.unflatten(fo.defs, out_values)
        out_leaves = list(out_leaves)
        for p, n in zip(fo.node_pos, roots):
            out_leaves[p] = n
    return fo.treedef.unflatten(out_leaves)


def finish(lift: _lift.Lift, fo: FnOut, new_values: tp.Sequence[tp.Any],
           out_values: tp.Sequence[tp.Any], out_leaves: list, *, update: bool = True) -> tp.Any:
    if update:
        write_back(lift, new_values)
    return build_output(fo, out_values, out_leaves)


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
