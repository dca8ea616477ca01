"""Today's split / merge contexts: ``nnx.split_context``, ``nnx.merge_context`` and
``nnx.update_context`` (Flax 0.12.8's ``graphlib`` names).

A :class:`SplitContext` numbers every object it walks once for all of its ``split`` calls,
so a node met again (in the same call or a later one) becomes a ``NodeRef`` to its first
number and carries no state; a :class:`MergeContext` resolves those numbers back to the
objects it built. Together they move a tree holding shared graph nodes across a JAX
transform as pure pytrees.

``update_context(tag)`` links four contexts of the same tag so that what a transform does
to its copies lands on the original objects::

    (1) split outside ──> (2) merge inside ──> (3) split inside ──> (4) merge outside

(1) remembers ``object -> number`` of the originals, (2) records which inner copy stands for
which number, (3) tags each inner object with the number of the original it copies, and (4)
updates those originals in place (values, static attributes, structure) instead of building
new objects. Variables whose value lives in a ``jax.Ref`` are updated through the Ref
itself: (3) leaves :data:`NO_UPDATE` in their place, or :class:`ArrayRefOutput` for Refs
created inside the transform.

>>> import jax
>>> from flaxen import nnx
>>> m = nnx.Dict(w=nnx.Param(1.0))
>>> with nnx.update_context('demo'):
...     with nnx.split_context('demo') as ctx:
...         graphdef, state = ctx.split(m)
...     @jax.jit
...     def f(graphdef, state):
...         with nnx.merge_context('demo', inner=True) as ctx:
...             inner = ctx.merge(graphdef, state)
...         inner.w.value = inner.w.value + 1
...         inner.tag = 'seen'  # a new static attribute
...         with nnx.split_context('demo') as ctx:
...             return ctx.split(inner)
...     graphdef, state = f(graphdef, state)
...     with nnx.merge_context('demo', inner=False) as ctx:
...         out = ctx.merge(graphdef, state)
>>> out is m, float(m.w.value), m.tag
(True, 2.0, 'seen')
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import typing as tp

from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _graph_ops as _ops
from flaxen.nnx import _graphdef, filterlib, graphlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graph_ops import RefMap
from flaxen.nnx._graphdef import (
    NO_UPDATE,
    ArrayRefOutput,
    NodeDef,
    NodeRef,
    NoUpdate,
    Static,
    VariableDef,
)
from flaxen.nnx.graphlib import GraphDef, IndexMap
from flaxen.nnx.statelib import FlatState, State
from flaxen.nnx.variablelib import Variable, is_array_ref

__all__ = [
    "GRAPH_CONTEXT", "NO_UPDATE", "ArrayRefOutput", "GraphContext", "MergeContext", "NoUpdate",
    "SplitContext", "StaticCache", "UpdateContext", "UpdateContextManager",
    "current_update_context", "merge_context", "split_context", "static_cache",
    "update_context",
]

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])


# -- the update context ----------------------------------------------------------------------

class StaticCache(tp.NamedTuple):
    """What a cached graph node of ``cached_partial`` keeps between calls: its graph
    definition before and after a call (``final_graphdef``, every object tagged with its own
    outer index), its leaves' paths and Variables, and the numbering of its objects."""

    graphdef: tp.Any
    final_graphdef: tp.Any
    paths: tuple
    variables: list
    new_ref_index: RefMap
    new_index_ref: IndexMap

    @staticmethod
    def create(graphdef: tp.Any, paths: tuple, variables: list, new_ref_index: RefMap
               ) -> StaticCache:
        return StaticCache(graphdef, graphdef.with_same_outer_index(), paths, variables,
                           new_ref_index, IndexMap.from_refmap(new_ref_index))


@dataclasses.dataclass(eq=False, repr=False)
class UpdateContext:
    """What the four split/merge steps of one ``update_context(tag)`` share (see the module
    docstring). Opaque and static: every instance is equal to every other and hashes to 0, so
    it can ride along as static metadata of a JAX transform.

    >>> from flaxen import nnx
    >>> with nnx.update_context('t') as ctx:
    ...     ctx is nnx.current_update_context('t')
    True
    """

    tag: tp.Hashable
    outer_ref_outer_index: RefMap | None  # (1): original -> number
    outer_index_inner_ref: IndexMap | None  # (2): number -> inner copy
    outer_index_outer_ref: IndexMap | None  # (1): number -> original
    inner_ref_outer_index: RefMap | None  # (2): inner copy -> number
    # the caches of a static_cache(...) block this context took over (see cached_partial)
    static_cache: tp.MutableMapping[tp.Any, StaticCache] | None

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UpdateContext)

    def __repr__(self) -> str:
        return f"UpdateContext(tag={self.tag!r})"

    def flatten_end(self, ref_index: RefMap) -> None:
        """Called as a split context of this tag exits."""
        if self.outer_ref_outer_index is None:  # (1): remember the originals
            self.outer_ref_outer_index = ref_index
            self.outer_index_outer_ref = IndexMap.from_refmap(ref_index)
        else:  # (3): the inner copies are no longer needed
            self.outer_index_inner_ref = None
            self.inner_ref_outer_index = None

    def unflatten_end(self, index_ref: IndexMap, inner_merge: bool) -> None:
        """Called as a merge context of this tag exits."""
        if inner_merge:  # (2)
            self.outer_index_inner_ref = index_ref
            self.inner_ref_outer_index = RefMap.from_indexmap(index_ref)


def _mode_stack(name: str) -> tp.Callable[[], list[bool]]:
    def stack() -> list[bool]:
        # upward: the mode settings' own per-thread stack, so both names see one list
        from flaxen.nnx import _modes

        return getattr(_modes, name).get_stack()

    return stack


@dataclasses.dataclass
class GraphContext(threading.local):
    """The per-thread state of the graph contexts: open update contexts by tag, the split
    and merge contexts in use, a ``static_cache`` waiting for its update context, and the
    ``set_graph_mode`` / ``set_graph_updates`` stacks.

    >>> from flaxen import nnx
    >>> with nnx.split_context() as ctx:
    ...     GRAPH_CONTEXT.ref_index_stack[-1] is ctx
    True
    """

    update_context_stacks: dict[tp.Hashable, list[UpdateContext]] = dataclasses.field(
        default_factory=dict)
    ref_index_stack: list[SplitContext] = dataclasses.field(default_factory=list)
    index_ref_stack: list[MergeContext] = dataclasses.field(default_factory=list)
    tmp_static_cache: tp.MutableMapping[tp.Any, StaticCache] | None = None
    caching: bool = False
    graph_mode_stack: list[bool] = dataclasses.field(
        default_factory=_mode_stack("set_graph_mode"))
    graph_updates_stack: list[bool] = dataclasses.field(
        default_factory=_mode_stack("set_graph_updates"))


GRAPH_CONTEXT = GraphContext()


@contextlib.contextmanager
def static_cache(static_cache: tp.MutableMapping[tp.Any, StaticCache]) -> tp.Iterator[None]:
    """Hands ``static_cache`` to the next :class:`UpdateContext` opened inside the block (a
    transform's), which keeps it as ``ctx.static_cache``; leaving the block with nobody
    having taken it is an error.

    >>> from flaxen import nnx
    >>> with static_cache({}):
    ...     with nnx.update_context('c') as ctx:
    ...         ctx.static_cache
    {}
    """
    if GRAPH_CONTEXT.caching:
        yield
        return
    GRAPH_CONTEXT.tmp_static_cache = static_cache
    try:
        yield
    finally:
        if GRAPH_CONTEXT.tmp_static_cache is not None:
            GRAPH_CONTEXT.tmp_static_cache = None
            raise ValueError(
                "static_cache: no update context took the cache (GRAPH_CONTEXT."
                "tmp_static_cache is still set). Call an NNX transform inside the block.")


@dataclasses.dataclass
class UpdateContextManager:
    """``with``-able and decorator form of :func:`update_context`."""

    tag: tp.Hashable

    def __enter__(self) -> UpdateContext:
        cache, GRAPH_CONTEXT.tmp_static_cache = GRAPH_CONTEXT.tmp_static_cache, None
        ctx = UpdateContext(self.tag, None, None, None, None, cache)
        GRAPH_CONTEXT.update_context_stacks.setdefault(self.tag, []).append(ctx)
        return ctx

    def __exit__(self, *exc: tp.Any) -> None:
        stack = GRAPH_CONTEXT.update_context_stacks.get(self.tag)
        if not stack:
            raise RuntimeError(
                f"update_context({self.tag!r}) exited but no context of that tag is open; "
                "open and close update contexts in nested order.")
        ctx = stack.pop()
        ctx.outer_ref_outer_index = ctx.outer_index_outer_ref = None
        ctx.outer_index_inner_ref = ctx.inner_ref_outer_index = None
        if not stack:
            del GRAPH_CONTEXT.update_context_stacks[self.tag]

    def __call__(self, f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
            with self:
                return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def update_context(tag: tp.Hashable) -> UpdateContextManager:
    """Opens an :class:`UpdateContext` for ``tag`` (a ``with`` block or a decorator): split
    and merge contexts of the same tag inside it write a transform's changes back into the
    original objects (see the module docstring for the four steps).

    >>> from flaxen import nnx
    >>> m = nnx.Dict()
    >>> @nnx.update_context('grow')
    ... def grow(m):
    ...     with nnx.split_context('grow') as ctx:
    ...         gd, st = ctx.split(m)
    ...     with nnx.merge_context('grow', inner=True) as ctx:
    ...         inner = ctx.merge(gd, st)
    ...     inner.n = 3
    ...     with nnx.split_context('grow') as ctx:
    ...         gd, st = ctx.split(inner)
    ...     with nnx.merge_context('grow', inner=False) as ctx:
    ...         return ctx.merge(gd, st)
    >>> grow(m) is m, m.n
    (True, 3)
    """
    return UpdateContextManager(tag)


def current_update_context(tag: tp.Hashable) -> UpdateContext:
    """The innermost open :class:`UpdateContext` of ``tag``.

    >>> from flaxen import nnx
    >>> with nnx.update_context('x'):
    ...     nnx.current_update_context('x').tag
    'x'
    """
    stack = GRAPH_CONTEXT.update_context_stacks.get(tag)
    if not stack:
        raise ValueError(
            f"No update context found for tag {tag!r}: open one first with "
            f"`with nnx.update_context({tag!r}):` around the split and merge contexts.")
    return stack[-1]


def _update_ctx(tag: tp.Hashable | None) -> UpdateContext | None:
    return None if tag is None else current_update_context(tag)


# -- split -----------------------------------------------------------------------------------

def _is_object(x: tp.Any) -> bool:
    return isinstance(x, (GraphNode, Variable))


@dataclasses.dataclass(repr=False)
class SplitContext:
    """Splits several nodes with one numbering of their objects (see :func:`split_context`).

    ``ref_index`` maps each object walked so far to its number; it is removed (with
    ``ctxtag``) when the context exits.
    """

    ctxtag: tp.Hashable | None
    ref_index: RefMap
    is_inner: bool | None

    def __post_init__(self) -> None:
        self._roots: list = []  # the nodes walked so far, re-walked first to keep numbers
        self._n_leaves = 0

    def _walk(self, node: tp.Any) -> tuple[GraphDef, list, list]:
        ref_index = self.ref_index
        if _is_object(node) and node in ref_index:
            return GraphDef((NodeRef(type(node), ref_index[node]),)), [], []
        fg = eng.flatten((*self._roots, node))
        n = len(ref_index)
        if len(fg.refs) < n or any(ref_index.get(obj) != i for i, obj in enumerate(fg.refs[:n])):
            raise ValueError(
                "split_context: the nodes split earlier in this context changed structure "
                "before a later split; split everything first, then modify the objects.")
        for i in range(n, len(fg.refs)):
            ref_index[fg.refs[i]] = i
        leaves = fg.leaves[self._n_leaves:]
        paths = fg.paths[self._n_leaves:]
        self._roots.append(node)
        self._n_leaves = len(fg.leaves)
        ctx = _update_ctx(self.ctxtag)
        ref_outer = ctx.inner_ref_outer_index if ctx is not None else None
        outer_index = None
        if ref_outer:
            outer_index = {i: ref_outer[fg.refs[i]] for i in range(n, len(fg.refs))
                           if fg.refs[i] in ref_outer}
            leaves = [_ref_output(v, v in ref_outer) if isinstance(v, Variable)
                      and is_array_ref(v.raw_value) else v for v in leaves]
        return GraphDef(fg.defs[-1:], outer_index=outer_index), paths, leaves

    def split(self, node: tp.Any, *filters: filterlib.Filter) -> tuple:
        """``(graphdef, state, ...)`` like :func:`flaxen.nnx.split`, numbering objects for
        the whole context: a node split before comes back as a ``NodeRef`` with empty
        states.

        >>> from flaxen import nnx
        >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> with nnx.split_context() as ctx:
        ...     gd1, s1 = ctx.split(m)
        ...     gd2, s2 = ctx.split(m)
        >>> type(gd2.nodes[0]).__name__, len(s1), len(s2)
        ('NodeRef', 2, 0)
        """
        gd, paths, leaves = self._walk(node)
        if type(gd.defs[0]) is NodeRef:
            return (gd, *(State({}) for _ in (filters or (None,))))
        return (gd, *graphlib._states(gd, paths, leaves, filters, True))

    def flatten(self, node: tp.Any, *filters: filterlib.Filter, with_paths: bool = True
                ) -> tuple:
        """``(graphdef, FlatState, ...)`` (one FlatState per filter), or ``(graphdef,
        [raw value, ...])`` with ``with_paths=False``.

        >>> from flaxen import nnx
        >>> with nnx.split_context() as ctx:
        ...     gd, flat = ctx.flatten(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
        >>> [p for p, _ in flat]
        [('bias',), ('kernel',)]
        """
        if filters and not with_paths:
            raise ValueError("SplitContext.flatten cannot use filters with with_paths=False; "
                             "pass with_paths=True to get one FlatState per filter.")
        gd, paths, leaves = self._walk(node)
        if not with_paths:
            return gd, [v.raw_value if isinstance(v, Variable) else v for v in leaves]
        if not filters:
            return gd, FlatState.from_sorted_keys_values(tuple(paths), leaves)
        buckets = graphlib._partition(paths, leaves, filters, True)
        return (gd, *(FlatState.from_sorted_keys_values(tuple(p for p, _ in b),
                                                        [v for _, v in b]) for b in buckets))


def _ref_output(v: Variable, copies_outer: bool) -> Variable:
    value = NO_UPDATE if copies_outer else ArrayRefOutput(v.raw_value[...])
    return eng.new_variable(type(v), value, dict(v._var_metadata))


@contextlib.contextmanager
def split_context(ctxtag: tp.Hashable | None = None) -> tp.Iterator[SplitContext]:
    """A :class:`SplitContext` whose ``split`` / ``flatten`` calls share one numbering of
    objects; with ``ctxtag``, it is step (1) or (3) of the open ``update_context(ctxtag)``.

    >>> from flaxen import nnx
    >>> inner = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> outer = nnx.Sequential(inner)
    >>> with nnx.split_context() as ctx:
    ...     gd1, s1 = ctx.split(outer)
    ...     gd2, s2 = ctx.split(inner)
    >>> with nnx.merge_context() as ctx:
    ...     outer2, inner2 = ctx.merge(gd1, s1), ctx.merge(gd2, s2)
    >>> outer2.layers[0] is inner2
    True
    """
    ctx = _update_ctx(ctxtag)
    is_inner = None if ctx is None else ctx.outer_ref_outer_index is not None
    split_ctx = SplitContext(ctxtag, RefMap(), is_inner)
    GRAPH_CONTEXT.ref_index_stack.append(split_ctx)
    try:
        yield split_ctx
    finally:
        GRAPH_CONTEXT.ref_index_stack.pop()
        if ctxtag is not None:
            current_update_context(ctxtag).flatten_end(split_ctx.ref_index)
        del split_ctx.ref_index, split_ctx.ctxtag
        split_ctx._roots = []


# -- merge -----------------------------------------------------------------------------------

def _external_refs(defs: tuple, index_ref: tp.Mapping[int, tp.Any]) -> tuple:
    """``defs`` with each NodeRef to an object built by an earlier merge of the context
    replaced by a Static holding that object (the engine's builder resolves NodeRefs only
    within one walk)."""
    local: set[int] = set()
    external = [False]

    def scan(d: tp.Any) -> None:
        t = type(d)
        if t is NodeRef:
            if d.index not in local:
                external[0] = True
        elif t is VariableDef or t is NodeDef:
            local.add(d.index)
            if t is NodeDef:
                for _, s in d.attributes:
                    scan(s)

    for d in defs:
        scan(d)
    if not external[0]:
        return defs

    def fix(d: tp.Any) -> tp.Any:
        t = type(d)
        if t is NodeRef and d.index not in local:
            return Static(index_ref[d.index])
        if t is NodeDef:
            return NodeDef(d.type, d.index, tuple((k, fix(s)) for k, s in d.attributes),
                           d.metadata)
        return d

    return tuple(fix(d) for d in defs)


@dataclasses.dataclass(repr=False)
class MergeContext:
    """Merges several graph definitions made by one :class:`SplitContext` (see
    :func:`merge_context`). ``index_ref`` maps each number to the object built for it; it is
    removed (with ``ctxtag``) when the context exits."""

    ctxtag: tp.Hashable | None
    index_ref: IndexMap
    is_inner: bool | None

    def merge(self, graphdef: tp.Any, state: tp.Any, /, *states: tp.Any) -> tp.Any:
        """The object of ``graphdef`` built around copies of the states' Variables (the
        object itself for a ``NodeRef`` to one merged before in this context).

        >>> from flaxen import nnx
        >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> with nnx.split_context() as ctx:
        ...     gd, st = ctx.split(m)
        >>> with nnx.merge_context() as ctx:
        ...     m2 = ctx.merge(gd, st)
        >>> m2.kernel is m.kernel, bool((m2.kernel[...] == m.kernel[...]).all())
        (False, True)
        """
        return self._build(graphdef, (state, *states), copy=True)

    def unflatten(self, graphdef: tp.Any, flat_state: tp.Any, /, *flat_states: tp.Any
                  ) -> tp.Any:
        """Like :meth:`merge`, from what :meth:`SplitContext.flatten` returned (FlatStates
        or a list of values); the Variables are used as they are."""
        if type(flat_state) is list:
            if flat_states:
                raise ValueError("MergeContext.unflatten takes a single list of values; got "
                                 "more states after it. Pass one list, or FlatStates.")
            return self._build(graphdef, None, copy=False, values=flat_state)
        return self._build(graphdef, (flat_state, *flat_states), copy=False)

    def _build(self, graphdef: tp.Any, states: tuple | None, *, copy: bool,
               values: list | None = None) -> tp.Any:
        if not isinstance(graphdef, _graphdef.GraphDef):
            raise TypeError(
                f"MergeContext.merge expects a GraphDef first, got a "
                f"{type(graphdef).__name__}. Pass the graphdef of a SplitContext.split.")
        index_ref = self.index_ref
        defs = graphdef.defs
        root = defs[0]
        if type(root) is NodeRef:
            return index_ref[root.index]
        if values is not None:
            leaves = list(values)
        elif states is None:
            leaves = []
        elif type(root) is VariableDef:
            leaves = [graphlib._single_leaf(states)]
        elif any(isinstance(s, FlatState) for s in states):
            leaves = graphlib._flat_leaves(
                [p for p, _ in _graphdef.var_def_paths(defs)], states, "merge")
        else:
            leaves = _ops._leaves_from_states(defs, states, "merge")
        ctx = _update_ctx(self.ctxtag)
        idxmap: dict[int, tp.Any] | None = None
        outer_refs = ctx.outer_index_outer_ref if ctx is not None else None
        outer_index = getattr(graphdef, "outer_index", None)
        if outer_refs and outer_index:
            idxmap = {i: outer_refs[o] for i, o in outer_index.items() if o in outer_refs}
        leaves = _prepare_leaves(_graphdef.var_defs(defs), leaves, idxmap or {}, copy)
        if index_ref:
            defs = _external_refs(defs, index_ref)
        roots, built = eng.unflatten(defs, leaves, idxmap)
        index_ref.update(built)
        return roots[0]


def _prepare_leaves(vdefs: list, leaves: list, reused: tp.Mapping[int, tp.Any], copy: bool
                    ) -> list:
    out = []
    for d, leaf in zip(vdefs, leaves):
        if isinstance(leaf, Variable):
            raw = leaf.raw_value
            if type(raw) is NoUpdate:
                if d.index not in reused:
                    raise ValueError(
                        f"Expected a ArrayRefOutput for the {d.type.__name__} numbered "
                        f"{d.index}, got NoUpdate but no outer Variable to keep: merge the "
                        "output of an inner split_context with merge_context(tag, "
                        "inner=False) inside the same update_context.")
                leaf = eng.MISSING
            elif type(raw) is ArrayRefOutput:
                leaf = leaf.copy(raw.value)
            elif copy:
                leaf = leaf.copy()
        out.append(leaf)
    out.extend(leaves[len(vdefs):])
    return out


@contextlib.contextmanager
def merge_context(ctxtag: tp.Hashable | None = None, inner: bool | None = None
                  ) -> tp.Iterator[MergeContext]:
    """A :class:`MergeContext` whose ``merge`` calls resolve the numbers of one split
    context; with ``ctxtag`` it is step (2) (``inner=True``) or (4) (``inner=False``) of the
    open ``update_context(ctxtag)``.

    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> with nnx.split_context() as ctx:
    ...     parts = [ctx.split(m), ctx.split(m)]
    >>> with nnx.merge_context() as ctx:
    ...     a, b = [ctx.merge(*p) for p in parts]
    >>> a is b
    True
    """
    merge_ctx = MergeContext(ctxtag, IndexMap(), inner)
    GRAPH_CONTEXT.index_ref_stack.append(merge_ctx)
    try:
        yield merge_ctx
    finally:
        GRAPH_CONTEXT.index_ref_stack.pop()
        if ctxtag is not None:
            if inner is None:
                raise ValueError(
                    f"merge_context({ctxtag!r}) needs inner=: inner_merge must be specified "
                    "when using ctxtag (True inside the transform, False outside).")
            current_update_context(ctxtag).unflatten_end(merge_ctx.index_ref, inner)
        del merge_ctx.index_ref, merge_ctx.ctxtag
