"""``nnx.tabulate``: a table of an NNX object's method calls and the Variables each node holds.

One row per distinct call (first call of each (node, inputs) pair, in call order) of a public
method or ``__call__`` of any graph node reachable from the object; columns: the node's path
(``block1/forward`` for a method other than ``__call__``), its type, the inputs and outputs
(shapes as ``float32[1,32]``), optionally the estimated FLOPs of the forward pass
(``compute_flops``) and of its VJP (``compute_vjp_flops``), then one column per Variable
type (RngKey/RngCount folded into ``RngState``): the node's own Variables and the count and
bytes of everything below it. The table itself is drawn by the renderer Linen's
``tabulate`` uses (``flaxen.linen._summary_render``, imported on first use so that
``import flaxen.nnx`` loads no Linen module).

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> text = nnx.tabulate(model, jnp.ones((1, 2)), console_kwargs={'force_terminal': False})
>>> 'Total Parameters: 9 (36 B)' in text
True
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import typing as tp
from collections.abc import Callable, Mapping
from types import MappingProxyType

import jax
import jax.numpy as jnp
import numpy as np

from flaxen.nnx import _graph_ops as graphlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx.rnglib import RngState, RngStream
from flaxen.nnx.variablelib import Variable

__all__ = ["CallInfo", "tabulate"]

# metadata a Variable keeps for its own machinery, not shown in the table
_HIDDEN_METADATA = frozenset({
    "hijax", "ref", "eager_sharding", "set_value_hooks", "get_value_hooks",
    "create_value_hooks", "add_axis_hooks", "remove_axis_hooks", "on_set_value",
    "on_get_value", "on_create_value", "on_add_axis", "on_remove_axis",
})
_TAG = "_nnx_tabulate_id"


@dataclasses.dataclass
class CallInfo:
    """One recorded call: what ``row_filter`` receives."""

    call_order: int
    object_id: int
    type: type
    path: tuple
    inputs_repr: str
    outputs: tp.Any
    flops: int | None
    vjp_flops: int | None


@dataclasses.dataclass
class _NodeInfo:
    path: tuple
    stats: dict = dataclasses.field(default_factory=dict)  # column type -> [count, bytes]
    groups: dict = dataclasses.field(default_factory=dict)  # column type -> {key: Variable}


def filter_rng_streams(row: CallInfo) -> bool:
    """The default ``row_filter``: hides calls of RNG streams."""
    return not issubclass(row.type, RngStream)


def _column_type(var: Variable) -> type:
    return RngState if isinstance(var, RngState) else type(var)


def _size_bytes(value: tp.Any) -> tuple[int, int]:
    size = nbytes = 0
    for leaf in jax.tree_util.tree_leaves(value):
        if hasattr(leaf, "size") and hasattr(leaf, "dtype"):
            size += int(leaf.size)
            nbytes += int(leaf.size) * int(np.dtype(leaf.dtype).itemsize
                                           if not jax.dtypes.issubdtype(
                                               leaf.dtype, jax.dtypes.prng_key)
                                           else leaf.dtype.itemsize)
    return size, nbytes


def _var_value(var: Variable) -> tp.Any:
    getter = getattr(type(var), "get_value", None)
    return getter(var) if getter is not None else var.value


def _collect(root: tp.Any) -> dict[int, _NodeInfo]:
    """Per graph node (by id): its path, own Variables by column type, and totals below it."""
    infos: dict[int, _NodeInfo] = {}
    by_path: dict[tuple, _NodeInfo] = {}
    for path, obj in graphlib.iter_graph(root):
        if isinstance(obj, Variable):
            col = _column_type(obj)
            cut = len(path) - 1
            while cut > 0 and path[:cut] not in by_path:
                cut -= 1
            owner = by_path.get(path[:cut])
            if owner is None:
                continue
            key = "/".join(str(k) for k in path[cut:])
            owner.groups.setdefault(col, {})[key] = obj
            size, nbytes = _size_bytes(_var_value(obj))
            for i in range(cut + 1):
                info = by_path.get(path[:i])
                if info is not None:
                    total = info.stats.setdefault(col, [0, 0])
                    total[0] += size
                    total[1] += nbytes
        else:
            info = _NodeInfo(tuple(path))
            infos[id(obj)] = by_path[tuple(path)] = info
    if () not in by_path:
        infos[id(root)] = by_path[()] = _NodeInfo(())
    return infos


# -- cell text ----------------------------------------------------------------------------------


def _plain(x: tp.Any) -> tp.Any:
    """Inputs/outputs/metadata as strings, dicts and lists (what the YAML layout takes)."""
    if isinstance(x, str):
        return x
    if isinstance(x, type):
        return f"type[{x.__name__}]"
    if isinstance(x, (GraphNode, Variable)):
        return f"{type(x).__name__}(...)"
    if isinstance(x, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)) or (
            hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)):
        from flaxen.linen import _summary_render as render

        return render.array_markup(jnp.shape(x), jnp.result_type(x.dtype)
                                   if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                                   else x.dtype)
    if isinstance(x, Mapping):
        return {_key(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return [_plain(v) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    return repr(x)


def _key(k: tp.Any) -> tp.Any:
    return k if isinstance(k, (str, int)) else repr(k)


def _yaml(x: tp.Any) -> str:
    from flaxen.linen import _summary_render as render

    if x is None:
        return ""
    return render.layout(_plain(x))


def _inputs_repr(args: tuple, kwargs: dict) -> str:
    text = ""
    if args:
        text = _yaml(args[0] if len(args) == 1 and not kwargs else list(args))
        if kwargs:
            text += "\n"
    if kwargs:
        text += _yaml(kwargs)
    return text


def _variable_cell(info: _NodeInfo, col: type) -> str:
    from flaxen.linen import _summary_render as render

    cells: dict[str, tp.Any] = {}
    for name in sorted(info.groups.get(col, {}), key=str):
        var = info.groups[col][name]
        value = _var_value(var)
        value_repr = _plain(value) if hasattr(value, "shape") and hasattr(value, "dtype") \
            else ""
        metadata = {k: v for k, v in var.get_metadata().items() if k not in _HIDDEN_METADATA}
        if metadata:
            cells[name] = {"value": value_repr,
                           **{k: _plain(v) if isinstance(v, (Mapping, list, tuple))
                              else (v if isinstance(v, str) else repr(v))
                              for k, v in metadata.items()}}
        elif value_repr:
            cells[name] = value_repr
    text = render.layout(cells) + "\n\n" if cells else ""
    count, nbytes = info.stats.get(col, (0, 0))
    if count:
        text += f"[bold]{render.count_markup(count, nbytes)}[/bold]"
    return text


# -- recording calls ----------------------------------------------------------------------------


def _flops(lowered: tp.Any) -> int:
    cost = lowered.cost_analysis()
    if not cost:
        cost = lowered.compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    return 0 if not cost or "flops" not in cost else int(cost["flops"])


def _split_leaves(tree: tp.Any) -> tuple[list, list, tp.Any]:
    """(array leaves, the other leaves, how to rebuild) for ``tree``."""
    treedef: tp.Any  # jaxlib's PyTreeDef is untyped here
    leaves, treedef = jax.tree_util.tree_flatten(
        tree, is_leaf=lambda x: isinstance(x, (GraphNode, Variable)))
    mask = [isinstance(x, (jax.Array, np.ndarray)) for x in leaves]
    arrays = [x for x, m in zip(leaves, mask) if m]
    others = [x for x, m in zip(leaves, mask) if not m]

    def rebuild(new_arrays: tp.Sequence) -> tp.Any:
        it_a, it_o = iter(new_arrays), iter(others)
        return treedef.unflatten([next(it_a) if m else next(it_o) for m in mask])

    return arrays, others, rebuild


def _wrap(fn: Callable, recorder: _Recorder) -> Callable:
    method_name = fn.__name__

    def wrapper(obj: tp.Any, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        object_id: tp.Any = getattr(obj, _TAG, None)
        info = recorder.infos.get(object_id) if object_id is not None else None
        if info is None:  # a node created during the call: not part of the table
            return fn(obj, *args, **kwargs)
        order = next(recorder.counter)
        inputs_repr = _inputs_repr(args, kwargs)
        path = info.path if method_name == "__call__" else (*info.path, method_name)
        identifier = (inputs_repr, object_id)
        flops = vjp_flops = None
        if recorder.compute_flops or recorder.compute_vjp_flops:
            graphdef, state = graphlib.split(obj)
            arrays, _, rebuild = _split_leaves((args, kwargs))

            def run(state: tp.Any, arrays: list) -> tp.Any:
                a, k = rebuild(arrays)
                return fn(graphlib.merge(graphdef, state), *a, **k)

            if recorder.compute_flops:
                jitted = jax.jit(run)
                flops = _flops(jitted.lower(state, arrays))
                outputs = jitted(state, arrays)
            else:
                outputs = fn(obj, *args, **kwargs)
            # a call is listed once per (node, inputs), checked after it ran: like Flax, a
            # method calling another of the same node with the same inputs keeps the inner row
            first = identifier not in recorder.seen
            if first and recorder.compute_vjp_flops:
                vjp_flops = _flops(jax.jit(_vjp_of(run)).lower(state, arrays))
        else:
            outputs = fn(obj, *args, **kwargs)
            first = identifier not in recorder.seen
        recorder.seen.add(identifier)
        if first:
            recorder.rows.append(CallInfo(order, object_id, type(obj), path, inputs_repr,
                                          outputs, flops, vjp_flops))
        return outputs

    wrapper.__name__ = method_name
    wrapper.__qualname__ = getattr(fn, "__qualname__", method_name)
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _inexact(x: tp.Any) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)


def _vjp_of(run: Callable) -> Callable:
    def do_vjp(state: tp.Any, arrays: list) -> tp.Any:
        treedef: tp.Any  # jaxlib's PyTreeDef is untyped here
        leaves, treedef = jax.tree_util.tree_flatten((state, arrays))
        diff = [x for x in leaves if _inexact(x)]

        def f(*diff_leaves: tp.Any) -> tp.Any:
            it = iter(diff_leaves)
            full = [next(it) if _inexact(x) else x for x in leaves]
            return run(*treedef.unflatten(full))

        out, pullback = jax.vjp(f, *diff)
        cotangent = jax.tree_util.tree_map(
            lambda o: o if _inexact(o) else np.zeros(np.shape(o), jax.dtypes.float0), out)
        return pullback(cotangent)

    return do_vjp


class _Recorder:
    def __init__(self, infos: dict[int, _NodeInfo], compute_flops: bool,
                 compute_vjp_flops: bool) -> None:
        self.infos = infos
        self.compute_flops = compute_flops
        self.compute_vjp_flops = compute_vjp_flops
        self.counter = itertools.count()
        self.seen: set = set()
        self.rows: list[CallInfo] = []


def _public_methods(cls: type) -> dict[str, Callable]:
    methods: dict[str, Callable] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") and name != "__call__":
                continue
            if inspect.isfunction(attr):
                methods[name] = attr
            else:
                methods.pop(name, None)  # overridden by a property, staticmethod, ...
    return methods


def _patch(types_: tp.Iterable[type], recorder: _Recorder) -> list[tuple[type, str, tp.Any]]:
    undo: list[tuple[type, str, tp.Any]] = []
    for cls in types_:
        for name, fn in _public_methods(cls).items():
            undo.append((cls, name, cls.__dict__.get(name, _MISSING)))
            setattr(cls, name, _wrap(fn, recorder))
    return undo


_MISSING = object()


def _unpatch(undo: list[tuple[type, str, tp.Any]]) -> None:
    for cls, name, old in reversed(undo):
        if old is _MISSING:
            delattr(cls, name)
        else:
            setattr(cls, name, old)


# -- the table ----------------------------------------------------------------------------------


def tabulate(
    obj: tp.Any,
    *input_args: tp.Any,
    depth: int | None = None,
    method: str = "__call__",
    row_filter: Callable[[CallInfo], bool] = filter_rng_streams,
    table_kwargs: Mapping[str, tp.Any] = MappingProxyType({}),
    column_kwargs: Mapping[str, tp.Any] = MappingProxyType({}),
    console_kwargs: Mapping[str, tp.Any] = MappingProxyType({}),
    compute_flops: bool = False,
    compute_vjp_flops: bool = False,
    **input_kwargs: tp.Any,
) -> str:
    """A summary table of ``obj`` (a Module or other graph node) called as
    ``obj.<method>(*input_args, **input_kwargs)`` on a copy (``obj`` is left unchanged).

    ``depth`` hides rows deeper than that many path entries; ``row_filter`` picks rows (by
    default RNG stream calls are hidden); ``table_kwargs`` go to ``rich.table.Table``,
    ``column_kwargs`` to its ``add_column`` and ``console_kwargs`` to
    ``rich.console.Console``; ``compute_flops``/``compute_vjp_flops`` add FLOPs columns.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> model = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
    >>> text = nnx.tabulate(model, jnp.ones((1, 4)), console_kwargs={'force_terminal': False})
    >>> 'Linear Summary' in text and 'float32[1,2]' in text
    True
    """
    from flaxen.linen import _summary_render as render

    if not graphlib.is_node(obj):
        from flaxen.errors import NotAGraphNodeError

        raise NotAGraphNodeError(
            "", f"nnx.tabulate expects a graph node such as an nnx.Module, got a "
                f"{type(obj).__name__}; wrap plain functions in a Module to tabulate them")
    obj = graphlib.clone(obj)
    infos = _collect(obj)
    node_types: set[type] = set()
    for _path, node in list(graphlib.iter_graph(obj)):
        if isinstance(node, GraphNode) and id(node) in infos:
            setattr(node, _TAG, id(node))
            node_types.add(type(node))
    if isinstance(obj, GraphNode):
        node_types.add(type(obj))
    if not hasattr(type(obj), method) or not callable(getattr(obj, method)):
        from flaxen.errors import NNXArgumentError

        raise NNXArgumentError(
            "", f"nnx.tabulate: {type(obj).__name__} has no method {method!r}",
            "pass the name of one of its methods as method=")
    columns_types = sorted(
        {_column_type(v) for _, v in graphlib.iter_graph(obj) if isinstance(v, Variable)},
        key=lambda t: t.__name__)

    recorder = _Recorder(infos, compute_flops, compute_vjp_flops)
    undo = _patch(node_types, recorder)
    try:
        getattr(obj, method)(*input_args, **input_kwargs)
    finally:
        _unpatch(undo)
    rows = sorted(recorder.rows, key=lambda r: r.call_order)
    rows = [r for r in rows if (depth is None or len(r.path) <= depth) and row_filter(r)]

    flop_cols = ["flops"] * compute_flops + ["vjp_flops"] * compute_vjp_flops
    columns = ["path", "type", "inputs", "outputs", *flop_cols,
               *(t.__name__ for t in columns_types)]
    cells = []
    for r in rows:
        info = infos[r.object_id]
        line = ["/".join(str(p) for p in r.path), r.type.__name__, r.inputs_repr,
                _yaml(r.outputs)]
        if compute_flops:
            line.append(str(r.flops))
        if compute_vjp_flops:
            line.append(str(r.vjp_flops))
        line += [_variable_cell(info, t) for t in columns_types]
        cells.append(line)
    root = infos[id(obj)]
    footers: list[tp.Any] = [""] * (3 + len(flop_cols)) + [render.right_text("Total")]
    footers += [render.count_markup(*root.stats.get(t, (0, 0))) or "" for t in columns_types]
    grand = [sum(s[i] for s in root.stats.values()) for i in (0, 1)]
    caption = f"\nTotal Parameters: {render.count_markup(*grand) or '0 (0 B)'}"
    kwargs = {"force_terminal": True, **dict(console_kwargs)}
    text = render.render(f"{type(obj).__name__} Summary", columns, cells, footers, caption,
                         kwargs, table_kwargs, column_kwargs)
    # the shared renderer frames the table in newlines as Linen's tabulate does; Flax's
    # nnx.tabulate gives the console's text alone
    return text[1:-1] if text.startswith("\n") and text.endswith("\n") else text


# -- Flax 0.12.8's other names in nnx.summary -------------------------------------------------
from flaxen import typing as _typing  # noqa: E402


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
    except ImportError:
        return False
    return get_ipython() is not None


in_ipython = _in_ipython()


class SizeBytes(_typing.SizeBytes):
    """Element count and bytes, printed with rich markup: ``'6 [dim](24 B)[/dim]'``.

    >>> SizeBytes(6, 24)
    6 [dim](24 B)[/dim]
    """

    def __repr__(self) -> str:
        return f"{self.size:,} [dim]({_typing._human_bytes(self.bytes)})[/dim]"


class ObjectInfo(tp.NamedTuple):
    """What tabulate gathers per graph node: its path, size per Variable type, and its
    Variables grouped by type.

    >>> ObjectInfo((), {}, {}).path
    ()
    """

    path: tuple
    stats: dict[type[Variable], SizeBytes]
    variable_groups: dict[type[Variable], dict[tp.Any, Variable]]


NodeStats = dict[int, ObjectInfo | None]


@dataclasses.dataclass(frozen=True, repr=False)
class ArrayRepr:
    """An array in a table cell: dtype and shape in rich markup (``'[dim]float32[/dim][2,3]'``).

    >>> str(ArrayRepr.from_array(jnp.zeros((2, 3))))
    '[dim]float32[/dim][2,3]'
    """

    shape: tuple[int, ...]
    dtype: tp.Any

    @classmethod
    def from_array(cls, x: tp.Any) -> ArrayRepr:
        return cls(jnp.shape(x), jnp.result_type(x))

    def __str__(self) -> str:
        return f"[dim]{self.dtype}[/dim][{','.join(str(d) for d in self.shape)}]"


class SimpleObjectRepr:
    """A graph node in a table cell: only its type, as ``'Linear(...)'``.

    >>> from flaxen import nnx
    >>> str(SimpleObjectRepr(nnx.Dropout(0.1)))
    'Dropout(...)'
    """

    def __init__(self, obj: tp.Any):
        self.type = type(obj)

    def __str__(self) -> str:
        return f"{self.type.__name__}(...)"

    __repr__ = __str__


def __getattr__(name: str) -> tp.Any:
    if name == "NoneDumper":
        # built on first use: it subclasses yaml's SafeDumper, and `import flaxen.nnx` should
        # not pay for importing yaml
        import yaml

        class NoneDumper(yaml.SafeDumper):
            """A YAML dumper that writes ``None`` as the string ``None`` (not ``null``)."""

        NoneDumper.__module__ = __name__
        NoneDumper.add_representer(
            type(None), lambda d, _: d.represent_scalar("tag:yaml.org,2002:str", "None"))
        globals()["NoneDumper"] = NoneDumper
        return NoneDumper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
