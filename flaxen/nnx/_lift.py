"""The one lifting primitive every NNX transform is built on.

A JAX transform only sees pytrees of arrays; NNX transforms accept graph nodes (Modules,
Rngs, Variables) anywhere in their arguments and write every change the function makes back
into them. :class:`Lift` does that in four steps, the same for every transform:

1. ``Lift(args, kwargs)`` (outside): finds the graph nodes among the arguments, walks them
   jointly (cached; shared objects stay shared across arguments) into a static
   :class:`InStatic` (GraphDef, argument treedef, node positions) and two lists of arrays:
   ``values`` (every State leaf, in walk order) and ``leaves`` (the other arguments).
2. :func:`enter` (inside the JAX transform): fresh copies of the nodes from ``values``,
   placed back into the arguments.
3. :func:`exit` (inside): walks the copies plus any graph nodes in the output, records which
   original object each copy stands for, and returns the new ``values``, the output's array
   leaves and a static :class:`OutStatic`.
4. ``lift.finish(out_static, values, out_leaves)`` (outside): brings the original objects up
   to date in place (new values, and new or removed attributes), builds objects created
   inside, and reassembles the output.

``lift.pure(fun)`` packages 2+3 as a function of ``(values, leaves)`` for transforms that
call it once (grad, vmap, remat, eval_shape); ``nnx.jit`` calls :func:`enter` and
:func:`exit` itself so the static halves ride in the pytree structure JAX caches on. A
transform that needs per-leaf treatment (vmap's ``state_axes``, grad's ``wrt``) reads
``lift.paths`` / ``lift.leaf_objs``, and ``OutStatic.var_paths`` for leaves created inside.

The functional modes (``graph_updates=False``, ``graph=False``) are a branch of steps 3
and 4, not a second body: ``exit(inner, out, functional=fn_name)`` returns the input
Variables' new *values* (whatever the function did to the structure) followed by the values
of the graph nodes in the output, and refuses an output that holds an input's Variable or
node (the caller would get two objects for one); ``finish`` then writes those values into
the input Variables and builds the output's graph nodes as new objects. Tree mode's
refusal of shared references among the inputs is ``transforms/_functional.check_no_shared``.

Loops (``scan``, ``while_loop``, ``fori_loop``) use the same four steps on
``Lift(args, {}, roots=True)``: every positional argument is a root of the walk, so arrays
inside plain pytrees are State leaves too and every leaf has a path starting at its
argument's position (scan resolves ``in_axes`` per leaf from it). Each step runs
:func:`enter` on the loop state; :func:`check_carry` refuses a step that changed the state's
structure or put other objects in it; :meth:`Lift.write_back` updates the caller's objects
once the loop is done.

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> v = nnx.Variable(jnp.array(1.0))
>>> lift = Lift(((v, jnp.array(3.0)),), {}, roots=True)
>>> lift.paths
[(0, 0), (0, 1)]
>>> def step(values):
...     (state,), _, inner = enter(lift.static, values, lift.leaves)
...     state[0][...] *= state[1]
...     return [state[0].raw_value, state[1]]
>>> (new_v, _), = lift.write_back(lift.static.defs, step(lift.values))
>>> new_v is v, float(v[...])
(True, 3.0)
"""

from __future__ import annotations

import itertools
import typing as tp

import jax
import numpy as np

from flaxen.errors import NNXStructureChangeError, NNXTransformError, TraceContextError
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _trace
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graph_ops import GraphDef as ApiGraphDef
from flaxen.nnx._graph_ops import _intern
from flaxen.nnx._graphdef import GraphDef, NodeDef, NodeRef, VariableDef, var_def_paths
from flaxen.nnx.variablelib import Variable

_flatten = jax.tree_util.tree_flatten
_setattr = object.__setattr__
_RAW = itertools.repeat("raw_value")


def is_node(x: tp.Any) -> bool:
    return isinstance(x, (GraphNode, Variable))


class ForeignTraceError(TraceContextError, ValueError):
    """An NNX transform got an object created under another JAX trace (captured by closure
    from outside a ``jax.jit``/``jax.grad``/...). Both the ``ValueError`` and the
    ``TraceContextError`` Flax raises for this mistake catch it."""


def check_trace(flat: tp.Any) -> None:
    """Refuses the walk's objects that belong to another JAX trace than the current one.

    Lifting such an object would write the transform's tracers into it when the transform
    returns (a module captured from outside a ``jax.jit`` would keep the jit's tracers), so
    Flax refuses it, and so does flaxen. Outside every transform there is nothing to check:
    an object is either this trace's or holds leaked tracers JAX itself reports."""
    tr = _trace.current_trace()
    if tr is _trace.TOP:
        return
    for obj in flat.refs:
        if isinstance(obj, Variable):
            if obj._trace_state is tr or obj.hijax:
                continue
        elif isinstance(obj, GraphNode):
            if obj._nnx_trace is tr or obj._lenient_trace_ok():
                continue
        else:
            continue
        where = next((p for p, leaf in zip(flat.paths, flat.leaves) if leaf is obj), None)
        at = f" at /{'/'.join(map(str, where))}" if where else ""
        raise ForeignTraceError(
            f"Cannot extract graph node from different trace level: a {type(obj).__name__}"
            f"{at} was created outside the JAX transform now running (captured by closure "
            "inside jax.jit, jax.grad, jax.vmap, ...?), and lifting it would store that "
            "transform's tracers in it. Pass it as an argument of the outer transform (use "
            "nnx.jit/nnx.grad/... there), or create it inside.")


def _split_nodes(tree: tp.Any) -> tuple[list, tp.Any, tuple, tuple]:
    leaves, treedef = _flatten(tree, is_leaf=is_node)
    pos = []
    nodes = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, (GraphNode, Variable)):
            pos.append(i)
            nodes.append(leaf)
            leaves[i] = None
    return leaves, treedef, tuple(pos), tuple(nodes)


# Positional-only calls whose arguments are each a graph node, a Variable or an array (the
# shape of nearly every training step) flatten the same way for the same argument types:
# the treedef and node positions are remembered per tuple of types, which skips the pytree
# walk and its per-leaf ``is_leaf`` callbacks.
_LEAF_TYPES = frozenset({np.ndarray, int, float, bool, complex})
_SIGNATURES: dict[tuple, tuple[tp.Any, tuple]] = {}
_MAX_SIGNATURES = 256


def _simple_type(t: type) -> bool:
    # jax.Array: concrete arrays and tracers, pytree leaves (checked only when a new
    # signature is remembered)
    return t in _LEAF_TYPES or issubclass(t, (GraphNode, Variable, jax.Array))


def split_args(args: tuple, kwargs: dict) -> tuple[list, tp.Any, tuple, tuple]:
    """:func:`_split_nodes` of ``(args, kwargs)``, cached by argument types when it can be."""
    if kwargs:
        return _split_nodes((args, kwargs))
    sig = tuple(map(type, args))
    hit = _SIGNATURES.get(sig)
    if hit is not None:
        treedef, pos = hit
        leaves = list(args)
        nodes = tuple([args[i] for i in pos])
        for i in pos:
            leaves[i] = None
        return leaves, treedef, pos, nodes
    out = _split_nodes((args, kwargs))
    if all(map(_simple_type, sig)):
        if len(_SIGNATURES) >= _MAX_SIGNATURES:
            _SIGNATURES.clear()
        _SIGNATURES[sig] = (out[1], out[2])
    return out


class _RootsDef:
    """The definitions of a roots-mode walk (loops): compared and hashed by identity, as
    nothing caches on them (scan keys its own cache on ``defs``)."""

    __slots__ = ("defs",)

    def __init__(self, defs: tuple) -> None:
        self.defs = defs


_NO_DEFS: tp.Any = _RootsDef(())


class InStatic:
    """The static half of the lifted arguments; hashed once, compared cheaply."""

    __slots__ = ("graphdef", "treedef", "node_pos", "extra", "_hash")

    def __init__(self, graphdef: GraphDef | None, treedef: tp.Any, node_pos: tuple,
                 extra: tp.Any = ()) -> None:
        self.graphdef = graphdef
        self.treedef = treedef
        self.node_pos = node_pos
        self.extra = extra
        self._hash = hash((graphdef, treedef, node_pos, extra))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, InStatic) and self._hash == other._hash
            and self.graphdef == other.graphdef and self.treedef == other.treedef
            and self.node_pos == other.node_pos and self.extra == other.extra)

    @property
    def defs(self) -> tuple:
        return self.graphdef.defs if self.graphdef is not None else ()


class Lift:
    """Step 1 and 4 of the primitive (see the module docstring)."""

    __slots__ = ("flat", "leaves", "treedef", "node_pos", "static", "out", "built")

    def __init__(self, args: tuple, kwargs: dict, extra: tp.Any = (),
                 last: InStatic | None = None, *, roots: bool = False,
                 check: bool = False) -> None:
        # ``check``: the transform writes the objects' new state back (graph mode with
        # graph updates), so objects of another JAX trace are refused (check_trace); a
        # loop (``roots``) always writes back
        if roots:
            self._walk_roots(args, kwargs, extra)
            return
        leaves, self.treedef, self.node_pos, nodes = split_args(args, kwargs)
        self.leaves = leaves
        self.flat = eng.flatten_cached(nodes, _intern) if nodes else None
        if check and self.flat is not None:
            check_trace(self.flat)
        gd = self.flat.graphdef if self.flat is not None else None
        if (last is not None and last.graphdef is gd and last.treedef is self.treedef
                and last.node_pos == self.node_pos and last.extra == extra):
            self.static = last  # the previous call's: no hashing, and jax's cache hits by id
        else:
            self.static = InStatic(gd, self.treedef, self.node_pos, extra)
        self.out: OutStatic | None = None
        self.built: dict[int, tp.Any] = {}  # index -> object, of the last slow write-back

    def _walk_roots(self, args: tuple, kwargs: dict, extra: tp.Any) -> None:
        """Roots mode (the loops): each positional argument is walked whole, plain arrays
        included, with paths ``(argument position, ...)``."""
        if kwargs:
            raise TypeError(f"a loop's state is positional; got keywords {sorted(kwargs)}")
        n = len(args)
        self.treedef = jax.tree_util.tree_structure(((0,) * n, {}))
        self.node_pos = tuple(range(n))
        self.leaves = [None] * n
        self.flat = eng.flatten(args, root_paths=[(i,) for i in range(n)])
        check_trace(self.flat)
        self.static = InStatic(_RootsDef(self.flat.defs), self.treedef,  # type: ignore[arg-type]
                               self.node_pos, extra)
        self.out = None
        self.built = {}

    @property
    def values(self) -> list:
        return self.flat.values() if self.flat is not None else []

    @property
    def refs(self) -> list:
        """The shared objects (nodes and Variables) of the walk, in index order."""
        return self.flat.refs if self.flat is not None else []

    def write_back(self, defs: tuple, values: tp.Sequence[tp.Any]) -> list:
        """Roots for ``defs`` (the inputs' definitions, or a loop step's, which start with
        the inputs' shared objects in the same order) holding ``values``: the caller's
        objects updated in place, objects created inside built new."""
        roots, self.built = eng.unflatten(defs, values, dict(enumerate(self.refs)))
        return roots

    @property
    def paths(self) -> list:
        return self.flat.paths if self.flat is not None else []

    @property
    def leaf_objs(self) -> list:
        """The Variables (or bare arrays) behind ``values``."""
        return self.flat.leaves if self.flat is not None else []

    def pure(self, fun: tp.Callable, *, hook: tp.Callable | None = None,
             functional: str | None = None) -> tp.Callable:
        """``fun`` as a function of ``(values, leaves) -> (values, out_leaves)``; the static
        half of the result is left in ``self.out``. ``hook(args, kwargs, inner)`` may rewrite
        the arguments after the nodes were rebuilt (``inner.leaf_objs()`` gives the rebuilt
        Variables). ``functional`` (the transform's name) selects the functional branch of
        :func:`exit`."""

        def pure(values: list, leaves: list) -> tuple[list, list]:
            args, kwargs, inner = enter(self.static, values, leaves)
            if hook is not None:
                args, kwargs = hook(args, kwargs, inner)
            new_values, out_leaves, out = exit(inner, fun(*args, **kwargs),
                                               functional=functional)
            self.record_out(out)
            return new_values, out_leaves

        return pure

    def record_out(self, out: OutStatic) -> None:
        """Keeps ``out`` as the call's static result. A function traced more than once (the
        branches of cond/switch) changed every value any of its traces changed."""
        last = self.out
        if last is not None and last.changed is not None and out.changed is not None:
            out.changed = tuple(sorted({*last.changed, *out.changed}))
        self.out = out

    def write_values(self, new_values: tp.Sequence[tp.Any],
                     changed: tp.Sequence[int] | None = None) -> None:
        """Functional modes: the new values into the input Variables, in leaf order (bare
        arrays held as attributes are left alone, as the structure is). Inside another
        transform only the values the function ``changed`` are written: the others come
        back as that transform's tracers, which a Variable captured from outside it must
        not keep."""
        flat = self.flat
        if flat is None:
            return
        tr = _trace.current_trace()
        if changed is not None and tr is not _trace.TOP:
            # another trace's Variable may not change (refused here); unchanged, it keeps
            # its value, and this trace's Variables take theirs
            check_foreign_writes([flat.leaves[i] for i in changed],
                                 [new_values[i] for i in changed])
            for var, x in zip(flat.leaves, new_values):
                if (isinstance(var, Variable) and (var._trace_state is tr or var.hijax)
                        and var.raw_value is not x):
                    _setattr(var, "raw_value", x)
            return
        if not flat.has_arrays:  # every leaf a Variable: graph mode's one C-level loop
            for _ in map(_setattr, flat.leaves, _RAW, new_values):
                pass
            return
        for var, x in zip(flat.leaves, new_values):
            try:  # no isinstance: Variable's metaclass check is slow on this per-call path
                if var.raw_value is not x:
                    _setattr(var, "raw_value", x)
            except AttributeError:  # a bare array held as an attribute
                pass

    def finish(self, out: OutStatic, values: tp.Sequence[tp.Any], out_leaves: list, *,
               update_inputs: bool = True) -> tp.Any:
        """Step 4: write back into the original objects and rebuild the output."""
        if out.functional:
            n_in = out.n_input_leaves
            if update_inputs:
                self.write_values(values[:n_in], out.changed)
            return build_output(out, values[n_in:], out_leaves)
        flat = self.flat
        if flat is not None and update_inputs and not flat.sorted_attrs:
            sort_attributes(flat.refs)
            flat.sorted_attrs = True
        if out.fast and flat is not None and update_inputs:
            # one C-level loop; object.__setattr__ skips Variable's checked __setattr__
            for _ in map(_setattr, flat.leaves, _RAW, values):
                pass
            return out.out_treedef.unflatten(out_leaves)
        if update_inputs:
            refs = flat.refs if flat is not None else []
            idxmap = {new: refs[old] for new, old in out.idx_pairs}
            roots, self.built = eng.unflatten(out.graphdef.defs, values, idxmap)
        else:  # eval_shape: leave the inputs alone, build what came out from fresh objects
            # (an output may hold an input object, or a part of one: its abstract copy, as
            # in Flax, so the inputs are rebuilt too rather than referenced)
            roots, self.built = eng.unflatten(out.graphdef.defs, values)
        leaves = list(out_leaves)
        for p, n in zip(out.out_node_pos, roots[out.n_inputs:]):
            leaves[p] = n
        return out.out_treedef.unflatten(leaves)


def sort_attributes(objs: tp.Iterable[tp.Any]) -> None:
    """Puts each graph node's attributes in name order, in place (the same ``__dict__``).

    Flax's graph-updates transforms rebuild every input node from its sorted attributes on
    the way out, so after ``nnx.jit``/``grad``/``vmap``/... a Module lists (and prints) its
    attributes alphabetically; this gives the same order without rebuilding. Called once
    per fresh walk: a cached walk's nodes keep the order (a new attribute means a new walk).
    Sequence-like nodes (``nnx.List``: keys are positions) and the 0.8.3 face's objects keep
    theirs."""
    for o in objs:
        if not isinstance(o, GraphNode):
            continue
        t = type(o)
        if t._graph_int_keys or t._nnx_lenient_trace:
            continue
        d = o.__dict__
        keys = list(d)
        try:
            order = sorted(keys)
        except TypeError:  # keys that do not compare: leave them as they are
            continue
        if order != keys:
            items = [(k, d[k]) for k in order]
            d.clear()
            d.update(items)


def check_foreign_writes(leaves: tp.Sequence[tp.Any], new_values: tp.Sequence[tp.Any]
                         ) -> None:
    """Refuses writing a changed value into a Variable of another JAX trace.

    The functional modes lift objects of any trace, as Flax's do (nothing is written back
    unless it changed); a change to a captured Variable would store this trace's tracer."""
    tr = _trace.current_trace()
    if tr is _trace.TOP:
        return
    for var, x in zip(leaves, new_values):
        if (isinstance(var, Variable) and var.raw_value is not x and not var.hijax
                and var._trace_state is not tr):
            raise ForeignTraceError(
                f"Cannot mutate {type(var).__name__} from a different trace level: the "
                "function changed a Variable created outside the JAX transform now running "
                "(captured by closure?), which would keep that transform's tracer. Pass it "
                "as an argument of the outer transform, or create it inside.")


class Inner:
    """What :func:`enter` knows inside the transform: the copies and whom they stand for."""

    __slots__ = ("static", "copies", "outer_of", "built", "values")

    def __init__(self, static: InStatic, copies: list, outer_of: dict[int, int],
                 built: dict[int, tp.Any], values: tp.Sequence[tp.Any] = ()) -> None:
        self.static = static
        self.copies = copies
        self.outer_of = outer_of
        self.built = built
        self.values = values  # what the copies were built from

    def leaf_objs(self) -> list:
        """The rebuilt Variables in leaf order (None for bare arrays)."""
        return [self.built.get(d.index) for _, d in var_def_paths(self.static.defs)]


def enter(static: InStatic, values: tp.Sequence[tp.Any], leaves: list
          ) -> tuple[tuple, dict, Inner]:
    """Step 2: fresh node copies from ``values``, placed into the arguments."""
    defs = static.defs
    if defs:
        copies, built = eng.unflatten(defs, values)
        outer_of = {id(obj): i for i, obj in built.items()}
    else:
        copies, outer_of, built = [], {}, {}
    leaves = list(leaves)
    for p, n in zip(static.node_pos, copies):
        leaves[p] = n
    args, kwargs = static.treedef.unflatten(leaves)
    return args, kwargs, Inner(static, copies, outer_of, built, values)


class OutStatic:
    """The static half of a lifted call's result, fixed per trace."""

    __slots__ = ("graphdef", "idx_pairs", "out_treedef", "out_node_pos", "n_inputs",
                 "n_input_leaves", "var_paths", "fast", "functional", "changed")

    def __init__(self, graphdef: GraphDef, idx_pairs: tuple, out_treedef: tp.Any,
                 out_node_pos: tuple, n_inputs: int, n_input_leaves: int, var_paths: list,
                 fast: bool, functional: bool = False) -> None:
        self.graphdef = graphdef
        self.idx_pairs = idx_pairs  # (new index, original index) of objects that came back
        self.out_treedef = out_treedef
        self.out_node_pos = out_node_pos
        self.n_inputs = n_inputs
        self.n_input_leaves = n_input_leaves
        # (path, VariableDef) of every leaf, in order (functional: of the output's only)
        self.var_paths = var_paths
        self.fast = fast
        # functional modes: ``graphdef`` holds the output's nodes only (``n_inputs`` is 0)
        # and the first ``n_input_leaves`` values are the input Variables' new values, of
        # which those at ``changed`` are ones the function changed
        self.functional = functional
        self.changed: tuple[int, ...] | None = None

    # the output's half, by the names the functional callers use
    @property
    def defs(self) -> tuple:
        return self.graphdef.defs[self.n_inputs:]

    @property
    def treedef(self) -> tp.Any:
        return self.out_treedef

    @property
    def node_pos(self) -> tuple:
        return self.out_node_pos

    def is_new(self, leaf_pos: int) -> bool:
        """True when the leaf at ``leaf_pos`` belongs to a Variable created inside."""
        d = self.var_paths[leaf_pos][1]
        return d.index < 0 or d.index not in dict(self.idx_pairs)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def exit(inner: Inner, out: tp.Any, *, functional: str | None = None
         ) -> tuple[list, list, OutStatic]:
    """Step 3: the copies (and graph nodes in ``out``) walked into new values + statics.
    ``functional`` (the transform's name, for errors): the functional branch (see the
    module docstring)."""
    if functional is not None:
        out_leaves, ostatic, out_values = split_output(inner, out, functional)
        new_in = input_values(inner)
        ostatic.changed = tuple(i for i, (a, b) in enumerate(zip(new_in, inner.values))
                                if a is not b)
        return [*new_in, *out_values], out_leaves, ostatic
    out_leaves, out_treedef, out_pos, out_nodes = _split_nodes(out)
    roots = (*inner.copies, *out_nodes)
    n_in = len(inner.copies)
    if roots:
        fg = eng.flatten(roots)
        outer_of = inner.outer_of
        pairs = tuple((i, outer_of[id(obj)]) for i, obj in enumerate(fg.refs)
                      if id(obj) in outer_of)
        defs = fg.defs
        values = fg.values()
        paths = var_def_paths(defs)
        n_in_leaves = len(var_def_paths(defs[:n_in]))
    else:
        pairs, defs, values, paths, n_in_leaves, fg = (), (), [], [], 0, None
    in_defs = inner.static.defs
    fast = (not out_nodes and fg is not None and not fg.has_arrays and defs == in_defs
            and all(a == b for a, b in pairs) and len(pairs) == len(fg.refs))
    # fast implies the inputs were split, so their graphdef is set
    gd: GraphDef = inner.static.graphdef if fast else ApiGraphDef(defs)  # type: ignore[assignment]
    return values, out_leaves, OutStatic(gd, pairs, out_treedef, out_pos, n_in, n_in_leaves,
                                         paths, fast)


# -- the functional branch -------------------------------------------------------------------

def input_values(inner: Inner, values: tp.Sequence[tp.Any] | None = None) -> list:
    """Functional modes, inside: the input Variables' values after the function ran (the
    entered ``values`` where a leaf is a bare array; structure changes ignored)."""
    if values is None:
        values = inner.values
    objs = inner.leaf_objs()
    return [values[i] if o is None else o.raw_value for i, o in enumerate(objs)]


def split_output(inner: Inner | None, out: tp.Any, fn_name: str
                 ) -> tuple[list, OutStatic, list]:
    """Functional modes, inside: ``out`` as ``(non-node leaves, OutStatic, node values)``;
    refuses an output holding an input's Variable or node."""
    out_leaves, treedef, pos, nodes = _split_nodes(out)
    n_in = len(inner.values) if inner is not None else 0
    if not nodes:
        return out_leaves, OutStatic(_NO_DEFS, (), treedef, pos, 0, n_in, [], False,
                                     True), []
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
    return out_leaves, OutStatic(_RootsDef(fg.defs), (), treedef, pos, 0, n_in,  # type: ignore[arg-type]
                                 var_def_paths(fg.defs), False, True), fg.values()


def build_output(out: OutStatic, out_values: tp.Sequence[tp.Any], out_leaves: list) -> tp.Any:
    """Functional modes, outside: the output with its graph nodes built as new objects."""
    defs = out.defs
    if defs:
        roots, _ = eng.unflatten(defs, out_values)
        out_leaves = list(out_leaves)
        for p, n in zip(out.out_node_pos, roots):
            out_leaves[p] = n
    return out.out_treedef.unflatten(out_leaves)


# -- loops: the step must hand back the state it received ------------------------------------

def _outline(defs: tp.Sequence[tp.Any]) -> list:
    """What must stay fixed across loop steps: kinds, types and attribute names (not the
    values, nor static attributes)."""
    out: list = []

    def walk(d: tp.Any) -> None:
        t = type(d)
        if t is VariableDef:
            out.append(("v", d.type, d.index))
        elif t is NodeRef:
            out.append(("r", d.type, d.index))
        elif t is NodeDef:
            out.append(("n", d.type, d.index, tuple(k for k, _ in d.attributes)))
            for _, sub in d.attributes:
                walk(sub)
        else:
            out.append(("s",))

    for d in defs:
        walk(d)
    return out


def check_carry(lift: Lift, after_defs: tuple, after_refs: list, built: dict[int, tp.Any],
                what: str, identity_msg: str, n_roots: int | None = None) -> None:
    """Refuses a loop step whose resulting state (walked into ``after_defs`` /
    ``after_refs``) differs from the state ``lift`` walked in structure, or holds other
    objects than the step's copies (``built``, from :func:`enter`) of the inputs. Only the
    first ``n_roots`` roots are compared (scan's outputs follow them)."""
    before = lift.static.defs
    n = len(before) if n_roots is None else n_roots
    # the structure first: an added or removed Variable (a sow in the body, say) shifts the
    # objects after it, which would otherwise read as a replaced object
    if _outline(after_defs[:n]) != _outline(before[:n]):
        raise NNXStructureChangeError(
            "", f"{what}: the loop state changed its structure between iterations (an "
            "attribute, a Variable or a container was added, removed or replaced)",
            "Create all state before the loop and keep the same objects in it.")
    refs = lift.refs
    for i, ref in enumerate(after_refs[: len(refs)]):
        if built.get(i) is not ref:
            raise NNXStructureChangeError(
                _ref_path(lift, i), f"{what}: {identity_msg}; the step returned a different "
                f"object ({type(ref).__name__}) where its input had one",
                "Update Variables in place (v[...] = ...) and return the objects the step "
                "received instead of new ones.")


def _ref_path(lift: Lift, index: int) -> str:
    refs = lift.refs
    obj = refs[index] if index < len(refs) else None
    for p, leaf in zip(lift.paths, lift.leaf_objs):
        if leaf is obj:
            return eng.path_str(p)
    return ""
