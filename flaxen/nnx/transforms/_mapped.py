"""The one lifted call behind today's mapped transforms (``vmap``, ``pmap``, ``shard_map``).

:func:`mapped_call` lifts the arguments (:class:`~flaxen.nnx._lift.Lift`), resolves the
input prefix (``in_axes`` / ``in_specs``) to one value per State leaf and per plain leaf
(:mod:`._axes`), runs the JAX transform on a pure function of ``(values, leaves)`` and
writes back. The output prefix is resolved *inside*, once the output (and any graph node in
it) is known: the function returns ``[values, out_leaves]`` and the JAX transform gets a list
as its output prefix that the pure function fills before JAX reads it (``jax.vmap`` and
``shard_map`` read their output prefix after tracing). Transforms that read it before
(``jax.pmap``) map every output along axis 0 and the axes are moved afterwards (``post``).

Values come back as one-key chains ``{'attr': {'sub': x}}`` per leaf, so an error JAX raises
about an output (a broadcast Variable that became batched) names the Variable's path.

Modes: one body for all. ``graph=True, graph_updates=True`` writes structure changes back;
the functional modes take the functional branch of ``_lift.exit`` / ``Lift.finish`` (values
of the input Variables back, output nodes built new, outputs aliasing an input refused), and
tree mode (``graph=False``) refuses shared references among the inputs. The output prefix
covers the inputs' and the output's Variables in graph mode, the output's only in the
functional modes (the inputs keep their input prefix).

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> v = nnx.Variable(jnp.arange(3.0))
>>> run = lambda pure, ins, late: jax.vmap(pure, in_axes=tuple(ins), out_axes=late)
>>> mapped_call(lambda v: v[...] * 2, (v,), {}, fn_name='vmap', in_prefix=0, kw_prefix=0,
...             out_prefix=0, graph=True, graph_updates=True, transform=run)
Array([0., 2., 4.], dtype=float32)
"""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp

from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift
from flaxen.nnx.transforms import _axes, _functional
from flaxen.nnx.variablelib import Variable

__all__ = ["DefView", "mapped_call"]


class DefView:
    """Lets filters match a VariableDef like the Variable it stands for."""

    __slots__ = ("type", "_d")
    _stands_for_type = True

    def __init__(self, d: tp.Any) -> None:
        self.type = d.type
        self._d = d

    def __getattr__(self, name: str) -> tp.Any:
        for k, v in self._d.metadata:
            if k == name:
                return v
        raise AttributeError(name)


def _chain(path: tuple, x: tp.Any) -> tp.Any:
    for k in reversed(path):
        x = {k: x}
    return x


def _unchain(path: tuple, x: tp.Any) -> tp.Any:
    for k in path:
        x = x[k]
    return x


def _keyable(path: tuple) -> tuple:
    return tuple(k if isinstance(k, (str, int)) else str(k) for k in path)


def _check_aliasing_out(inner: _lift.Inner, out: tp.Any, fn_name: str) -> None:
    """Functional modes: an output must not hold an input Variable (or node)."""
    _, _, _, nodes = _lift._split_nodes(out)
    if not nodes or not inner.outer_of:
        return
    from flaxen.nnx import _graph_engine as eng

    fg = eng.flatten(nodes)
    aliased = [obj for obj in fg.refs if id(obj) in inner.outer_of]
    if aliased:
        obj = next((o for o in aliased if isinstance(o, Variable)), aliased[0])
        raise NNXTransformError(
            "", f"nnx.{fn_name}: Duplicate {type(obj).__name__} found in the output: it "
            "is an input of the transform too, and the functional modes "
            "(graph_updates=False or graph=False) cannot return an input's Variables",
            "Return a copy (nnx.clone, or the value v[...]), or use graph=True, "
            "graph_updates=True.")


def _closure_objects(f: tp.Callable) -> list:
    """Graph nodes and Variables ``f`` holds in its closure cells or reads as globals."""
    while isinstance(f, functools.partial):
        f = f.func
    found = []
    for cell in getattr(f, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    code = getattr(f, "__code__", None)
    glb = getattr(f, "__globals__", None)
    if code is not None and glb is not None:
        found.extend(glb[n] for n in code.co_names if n in glb)
    return [x for x in found if _lift.is_node(x)]


def _check_captured(f: tp.Callable, inner: _lift.Inner, out: tp.Any, fn_name: str,
                    full: bool) -> None:
    """An output that is (or holds) a graph node or Variable captured by ``f``'s closure
    (created outside, not passed as an argument) cannot come out of the transform."""
    _, _, _, nodes = _lift._split_nodes(out)
    if not nodes:
        return
    held = _closure_objects(f)
    if not held:
        return
    from flaxen.nnx import _graph_engine as eng

    outer = {id(o) for o in eng.flatten(held).refs}
    for obj in eng.flatten(nodes).refs:
        if id(obj) in outer and id(obj) not in inner.outer_of:
            kind = type(obj).__name__
            if full:
                msg = (f"nnx.{fn_name}: Cannot extract graph node from different trace level: "
                       f"the output holds a {kind} the function captured from outside (it "
                       "was neither created inside nor passed as an argument)")
            else:
                msg = (f"nnx.{fn_name}: Cannot return captured Variable (or graph node) of "
                       f"type {kind}: the function captured it from outside instead of "
                       "receiving it as an argument")
            raise NNXTransformError(
                "", msg, "Pass it as an argument of the transform, or return a copy "
                "(nnx.clone).")


def _check_no_shared_vars(lift: _lift.Lift, fn_name: str) -> None:
    """Tree mode: a Variable reached twice among the inputs is refused, naming its type."""
    if lift.flat is None:
        return
    seen: dict[int, str] = {}
    arg_paths = _axes._arg_paths(lift.treedef)
    for p, occ in zip(lift.node_pos, _axes.occurrences(lift.flat.defs)):
        for path, pos in occ:
            where = _axes._label((*arg_paths[p], *path))
            if pos in seen:
                var = lift.leaf_objs[pos]
                raise NNXTransformError(
                    "", f"nnx.{fn_name}: Duplicate {type(var).__name__} found at {seen[pos]} "
                    f"and {where}: in tree mode (graph=False) the inputs are pytrees, which "
                    "cannot share a Variable", "Pass each Variable once, or use graph=True "
                    "(graph mode keeps shared references).")
            seen[pos] = where


def mapped_call(f: tp.Callable, args: tuple, kwargs: dict, *, fn_name: str, in_prefix: tp.Any,
                kw_prefix: tp.Any, out_prefix: tp.Any, graph: bool, graph_updates: bool,
                transform: tp.Callable, post: bool = False, what: str = "in_axes",
                out_what: str = "out_axes",
                inner_hook: tp.Callable | None = None,
                outer_hook: tp.Callable | None = None) -> tp.Any:
    """Runs ``f`` under ``transform(pure, [value_prefix, leaf_prefix], late_out_prefix)``
    (which returns the transformed function of ``(values, leaves)``)
    (see the module docstring). ``inner_hook(objs, prefixes)`` runs on the inner Variables
    before ``f``; ``outer_hook(objs, prefixes)`` on the outer Variables afterwards."""
    lift = _lift.Lift(args, kwargs, check=graph and graph_updates)
    if not graph:
        _check_no_shared_vars(lift, fn_name)
        _functional.check_no_shared(lift.static, fn_name)
    value_pre, leaf_pre, in_node_pre = _axes.resolve_inputs(
        lift, in_prefix, kw_prefix, fn_name=fn_name, what=what)
    in_paths = [_keyable(p) for p in lift.paths]
    in_values = [_chain(p, x) for p, x in zip(in_paths, lift.values)]
    in_value_pre = [_chain(p, a) for p, a in zip(in_paths, value_pre)]
    late: list = [None, None]
    box: dict = {}
    full = graph and graph_updates

    def pure(values: list, leaves: list) -> list:
        values = [_unchain(p, x) for p, x in zip(in_paths, values)]
        args_in, kwargs_in, inner = _lift.enter(lift.static, values, leaves)
        if inner_hook is not None:
            inner_hook(inner.leaf_objs(), value_pre)
        out = f(*args_in, **kwargs_in)
        _check_captured(f, inner, out, fn_name, full)
        if not full:
            _check_aliasing_out(inner, out, fn_name)
        new_values, out_leaves, ostatic = _lift.exit(
            inner, out, functional=None if full else fn_name)
        lift.record_out(ostatic)
        node_pre, pos_pre = _axes.node_prefixes(
            out_prefix, ostatic.out_treedef, ostatic.out_node_pos, out_what, fn_name)
        objs = [DefView(d) for _, d in ostatic.var_paths]
        out_paths = [_keyable(p) for p, _ in ostatic.var_paths]
        if full:  # the inputs' Variables may have moved, or be new: all from the defs
            defs, n_in = ostatic.graphdef.defs, ostatic.n_inputs
            labels = [("args", i) for i in range(n_in)] + [
                ("out", i) for i in range(len(node_pre))]
            new_pre = _axes.resolve_outputs(defs, n_in, in_node_pre, node_pre, objs,
                                            fn_name=fn_name, labels=labels)
            new_paths = out_paths
        else:  # the inputs' Variables keep their places and their prefix
            labels = [("out", i) for i in range(len(node_pre))]
            out_pre = _axes.resolve_outputs(ostatic.defs, 0, [], node_pre, objs,
                                            fn_name=fn_name, labels=labels)
            new_pre = [*value_pre, *out_pre]
            new_paths = [*in_paths, *out_paths]
        out_node_pos = ostatic.out_node_pos
        box.setdefault("sigs", []).append((ostatic.graphdef.defs, ostatic.out_treedef))
        leaf_out_pre = list(pos_pre)
        for p in out_node_pos:
            leaf_out_pre[p] = None
        box["new_pre"], box["new_paths"], box["leaf_out_pre"] = new_pre, new_paths, leaf_out_pre
        if post:
            late[0] = 0
            late[1] = 0
        else:
            late[0] = [_chain(p, a) for p, a in zip(new_paths, new_pre)]
            late[1] = leaf_out_pre
        return [[_chain(p, x) for p, x in zip(new_paths, new_values)], out_leaves]

    res_values, res_leaves = transform(pure, [in_value_pre, leaf_pre], late)(
        in_values, lift.leaves)
    new_paths, new_pre = box["new_paths"], box["new_pre"]
    sigs = box["sigs"]
    if any(sig != sigs[0] for sig in sigs[1:]):
        raise NNXTransformError(
            "", f"nnx.{fn_name}: the branches left the graph nodes (or returned outputs) with "
            "different structures", "Make every branch create, remove and return the same "
            "attributes and Variables; change only values.")
    res_values = [_unchain(p, x) for p, x in zip(new_paths, res_values)]
    if post:
        res_values = [_from_axis0(x, a) for x, a in zip(res_values, new_pre)]
        res_leaves = [_from_axis0(x, a) for x, a in zip(res_leaves, box["leaf_out_pre"])]
    out_static = lift.out
    assert out_static is not None  # set by `pure` above
    result = lift.finish(out_static, res_values, res_leaves)
    if outer_hook is not None:
        if full:
            objs = [lift.built.get(d.index) if d.index >= 0 else None
                    for _, d in out_static.var_paths]
            if out_static.fast or not lift.built:
                objs = list(lift.leaf_objs) + objs[len(lift.leaf_objs):]
            outer_hook(objs, new_pre)
        else:
            outer_hook(_output_vars(result), new_pre[out_static.n_input_leaves:])
    return result


def _output_vars(result: tp.Any) -> list:
    """The Variables of the output nodes, in leaf order."""
    _, _, _, nodes = _lift._split_nodes(result)
    if not nodes:
        return []
    from flaxen.nnx import _graph_engine as eng

    return list(eng.flatten(nodes).leaves)


def _from_axis0(x: tp.Any, axis: tp.Any) -> tp.Any:
    if axis is None:
        return jax.tree_util.tree_map(lambda a: a[0], x)
    if axis == 0:
        return x
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, axis), x)


def is_var(x: tp.Any) -> bool:
    return isinstance(x, Variable)
