"""Today's ``nnx.jit`` / ``nnx.jit_partial`` and ``StateSharding``.

``jit(f, graph=, graph_updates=)``: with ``graph=True, graph_updates=True`` (the default) it
is the graph-mode jit of :mod:`flaxen.nnx.transforms._graph_jit` (changes to the structure of
graph-node arguments are written back); otherwise the same machinery takes the functional
branch of the lifting primitive (:mod:`flaxen.nnx._lift`): only the new values of the input
Variables are written back and graph nodes returned are new objects. ``in_shardings``
entries may be ``StateSharding`` objects (graph mode) or shardings applied to every array of
that argument.

``jit_partial(f, *args)`` jits ``f`` with its first arguments bound; the bound graph nodes'
walk is cached, so a train step over ``(model, optimizer)`` only lifts the batch per call.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> @nnx.jit(graph_updates=False)
... def forward(m, x):
...     return m(x)
>>> forward(model, jnp.ones((1, 2))).shape
(1, 3)
>>> nnx.jit_partial(lambda m, x: m(x), model)(jnp.ones((4, 2))).shape
(4, 3)
"""

from __future__ import annotations

import functools
import typing as tp

import jax

from flaxen import traceback_util
from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift, filterlib
from flaxen.nnx.transforms import _axes, _functional, _graph_jit
from flaxen.nnx.transforms._callable_types import (
    JitFn,
    ShardMapFn,
    SimpleJitFn,
    SimpleJitPartialFn,
    SimpleShardMapFn,
)
from flaxen.nnx.transforms._common import (
    PrefixMapping,
    check_prefix,
    resolve_bound,
    resolve_modes,
)
from flaxen.nnx.transforms._stages import (
    Compiled,
    Lowered,
    SimpleCompiled,
    SimpleLowered,
    SimplePartialCompiled,
    SimplePartialLowered,
    SimplePartialTraced,
    SimpleTraced,
    Stage,
    Traced,
)
from flaxen.typing import PathParts as PathParts  # Flax imports it here from flax.typing

__all__ = ["cached_partial", "Compiled", "jit", "jit_partial", "JitFn", "JitWrapped", "Lowered",
    "shard_map", "ShardMapFn", "SimpleCompiled", "SimpleJitFn", "SimpleJitPartialFn",
    "SimpleJitPartialWrapped", "SimpleJitWrapped", "SimpleLowered", "SimplePartialCompiled",
    "SimplePartialLowered", "SimplePartialTraced", "SimpleShardMapFn", "SimpleTraced", "Stage",
    "StateSharding", "Traced"]

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
P = tp.ParamSpec("P")
R = tp.TypeVar("R")


class StateSharding(PrefixMapping):
    """Maps Variables to shardings by filter: the first filter that matches a Variable's
    ``(path, variable)`` gives its sharding. Use it as an ``in_shardings`` entry for a
    graph-node argument (graph mode).

    >>> from flaxen import nnx
    >>> s = nnx.StateSharding({nnx.PathContains('kernel'): 'k', ...: None})
    >>> s.filters[1], s.shardings
    (Ellipsis, ('k', None))
    """

    def __init__(self, filter_sharding: tp.Mapping[filterlib.Filter, tp.Any] | tp.Iterable
                 ) -> None:
        if isinstance(filter_sharding, tp.Mapping) and _axes._is_state_like(filter_sharding):
            # a State of shardings: one exact-path filter per leaf (its keys are paths, not
            # filters: a string key must not be read as a tag)
            items: tuple = tuple(
                (_axes._PathIs(p), s) for p, s in _axes._flat_paths(filter_sharding))
        else:
            items = tuple(filter_sharding.items() if isinstance(filter_sharding, tp.Mapping)
                          else filter_sharding)
        self._filters = tuple(f for f, _ in items)
        self._shardings = tuple(s for _, s in items)
        self._preds = tuple(filterlib.to_predicate(f) for f in self._filters)

    @property
    def filters(self) -> tuple:
        return self._filters

    @property
    def shardings(self) -> tuple:
        return self._shardings

    def map_prefix(self, path: tuple, variable: tp.Any) -> tp.Any:
        for pred, s in zip(self._preds, self._shardings):
            if pred(path, variable):
                return s
        raise NNXTransformError(
            "/" + "/".join(map(str, path)), "no filter of this StateSharding matches the "
            f"{type(variable).__name__} here",
            "Add a filter for it, e.g. `...: None` as the last entry.")

    def __repr__(self) -> str:
        inner = ", ".join(f"{f!r}: {s!r}" for f, s in zip(self._filters, self._shardings))
        return f"StateSharding({{{inner}}})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, StateSharding) and self._filters == other._filters
                and self._shardings == other._shardings)

    def __hash__(self) -> int:
        return hash((self._filters, self._shardings))


# -- per-value shardings of the graph-node arguments ------------------------------------------

def _arg_of_leaf(args: tuple) -> list[int]:
    """For each leaf position of ``(args, kwargs)``, its positional argument (or -1)."""
    out: list[int] = []
    for i, a in enumerate(args):
        out.extend([i] * len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node)))
    return out


def _value_shardings(shardings: tuple, args: tuple, lift: _lift.Lift) -> list:
    """One sharding (or None) per ``lift.values`` entry, from per-argument shardings
    (a sharding for every array of the argument, or a ``StateSharding``/``nnx.prefix``
    result mapping each Variable by path)."""
    from flaxen.nnx.transforms._axes import occurrences

    defs = lift.static.defs
    out: list = [None] * len(lift.paths)
    if not defs:
        return out
    arg_of = _arg_of_leaf(args)
    objs = lift.leaf_objs
    given: dict[int, tp.Any] = {}
    for leaf_pos, occ in zip(lift.static.node_pos, occurrences(defs)):
        i = arg_of[leaf_pos] if leaf_pos < len(arg_of) else -1
        s = shardings[i] if 0 <= i < len(shardings) else None
        if s is None:
            continue
        for path, p in occ:
            sharding = s.map_prefix(path, objs[p]) if hasattr(s, "map_prefix") else s
            if sharding is None:
                continue
            if p in given and given[p] != sharding:
                raise NNXTransformError(
                    "", f"nnx.jit: Inconsistent aliasing: the same Variable is given the "
                    f"shardings {given[p]} and {sharding} by in_shardings",
                    "Give every argument that shares this Variable the same sharding.")
            given[p] = sharding
    for p, s in given.items():
        out[p] = s
    return out


def _constrain(x: tp.Any, s: tp.Any) -> tp.Any:
    if s is None or not hasattr(x, "shape"):
        return x
    if isinstance(s, jax.sharding.PartitionSpec):
        from jax.sharding import get_abstract_mesh

        mesh = get_abstract_mesh()
        if mesh is None or mesh.empty:
            return x
    return jax.lax.with_sharding_constraint(x, s)


def _constrain_out(out: tp.Any, out_shardings: tp.Any) -> tp.Any:
    """Constrains the arrays of ``out`` (graph nodes included, per Variable path) to the
    shardings of the prefix tree ``out_shardings``."""
    from flaxen.nnx import _graph_engine as eng

    def is_prefix_leaf(x: tp.Any) -> bool:
        return x is None or hasattr(x, "map_prefix") or isinstance(
            x, (jax.sharding.Sharding, jax.sharding.PartitionSpec))

    def one(p: tp.Any, sub: tp.Any) -> tp.Any:
        if p is None:
            return sub
        treedef: tp.Any  # jax PyTreeDef
        leaves, treedef = jax.tree_util.tree_flatten(sub, is_leaf=_lift.is_node)
        new = []
        for leaf in leaves:
            if _lift.is_node(leaf):
                fg = eng.flatten([leaf])
                for path, var in zip(fg.paths, fg.leaves):
                    s = p.map_prefix(path, var) if hasattr(p, "map_prefix") else p
                    if s is not None and hasattr(var, "raw_value"):
                        object.__setattr__(var, "raw_value", _constrain(var.raw_value, s))
                new.append(leaf)
            else:
                new.append(_constrain(leaf, p) if not hasattr(p, "map_prefix") else leaf)
        return treedef.unflatten(new)

    try:
        return jax.tree_util.tree_map(one, out_shardings, out, is_leaf=is_prefix_leaf)
    except ValueError:
        return out


def _put(x: tp.Any, s: tp.Any) -> tp.Any:
    if isinstance(s, jax.sharding.PartitionSpec):
        from jax.sharding import get_abstract_mesh

        mesh = get_abstract_mesh()
        if mesh is None or mesh.empty:
            return x
        return jax.lax.with_sharding_constraint(x, s) if isinstance(x, jax.core.Tracer) \
            else jax.device_put(x, s)
    return jax.device_put(x, s)


# -- the wrapped callable --------------------------------------------------------------------

class _RefOut:
    """A jitted result whose ``jax.Ref`` values were taken out (see ``_functional.unref``)."""

    __slots__ = ("res", "plan")

    def __init__(self, res: tp.Any, plan: tuple) -> None:
        self.res = res
        self.plan = plan


jax.tree_util.register_pytree_node(
    _RefOut, lambda o: ((o.res,), o.plan), lambda plan, ch: _RefOut(ch[0], plan))


def _take_refs(res: tp.Any, values: list, leaves: list) -> tp.Any:
    if not _functional.has_refs(res.values, res.out_leaves):
        return res
    (res.values, res.out_leaves), plan = _functional.unref(
        (res.values, res.out_leaves), (values, leaves))
    return _RefOut(res, plan)


class _JitWrappedBase(_graph_jit.JitWrapped):
    """The implementation every today's ``nnx.jit`` callable shares (see :func:`jit`)."""

    _traced_type: tp.ClassVar[type] = Traced
    _lowered_type: tp.ClassVar[type] = Lowered

    def __init__(self, fun: tp.Callable, in_shardings: tp.Any = None,
                 out_shardings: tp.Any = None,
                 static_argnums: int | tp.Sequence[int] | None = None,
                 static_argnames: str | tp.Iterable[str] | None = None,
                 donate_argnums: int | tp.Sequence[int] | None = None,
                 donate_argnames: str | tp.Iterable[str] | None = None,
                 keep_unused: bool = False, device: tp.Any = None, backend: str | None = None,
                 inline: bool = False, partial_args: tuple = (), graph: bool | None = None,
                 update_shardings: bool = True, *, graph_updates: bool | None = None) -> None:
        # resolved once, when the transform is applied: a later set_graph_mode /
        # set_graph_updates does not change an existing jit (as in Flax)
        self._modes = resolve_modes(graph, graph_updates)
        self._updates = self._modes[0] and self._modes[1]
        self.partial_args = tuple(partial_args)
        self.update_shardings = update_shardings
        self._checked: tp.Any = None
        self._shard_cache: tuple = (None, None)
        super().__init__(
            fun, in_shardings=_graph_jit.UNSPECIFIED,
            out_shardings=_graph_jit.UNSPECIFIED if out_shardings is None else out_shardings,
            static_argnums=static_argnums, static_argnames=static_argnames,
            donate_argnums=donate_argnums, donate_argnames=donate_argnames,
            keep_unused=keep_unused, device=device, backend=backend, inline=inline,
            abstracted_axes=None, donate_state=False, constrain_state=False)
        if isinstance(in_shardings, (tuple, list)) and self.static_argnums:
            expanded = list(in_shardings)
            for i in sorted(self.static_argnums):
                if i <= len(expanded):
                    expanded.insert(i, None)
            in_shardings = tuple(expanded)
        self.today_in_shardings = in_shardings

    @property
    def graph_updates_mode(self) -> bool:
        return self._updates

    @property
    def functional_name(self) -> str | None:
        return None if self.graph_updates_mode else "jit"

    def _constrain_output(self, out: tp.Any) -> tp.Any:
        if self.graph_updates_mode:
            return super()._constrain_output(out)
        if self.out_shardings is not _graph_jit.UNSPECIFIED:
            out = _constrain_out(out, self.out_shardings)
        return out

    def _inner(self, static: _lift.InStatic, values: list, leaves: list, *donated: tp.Any
               ) -> tp.Any:
        key, per_value = self._shard_cache
        res = super()._inner(static, values, leaves, *donated)
        if (key is static and per_value is not None and self.update_shardings
                and any(s is not None for s in per_value)):
            if res.aux.functional:  # the input Variables' values come first, in leaf order
                res.values[:len(per_value)] = [
                    _constrain(x, s) for x, s in zip(res.values, per_value)]
            else:
                self._constrain_updates(static, per_value, res)
        return _take_refs(res, values, leaves)

    @staticmethod
    def _constrain_updates(static: _lift.InStatic, per_value: list, res: tp.Any) -> None:
        """Graph mode: updated input state keeps the shardings ``in_shardings`` gave it."""
        from flaxen.nnx.transforms._axes import occurrences

        by_root_path = {}
        for r, occ in enumerate(occurrences(static.defs)):
            for path, p in occ:
                if per_value[p] is not None:
                    by_root_path[(r, path)] = per_value[p]
        aux = res.aux
        new_occ = occurrences(aux.graphdef.defs[:aux.n_inputs])
        for r, occ in enumerate(new_occ):
            for path, p in occ:
                s = by_root_path.get((r, path))
                if s is not None:
                    res.values[p] = _constrain(res.values[p], s)

    def _prepare(self, args: tuple, kwargs: dict) -> tuple[_lift.Lift, list, list, tuple]:
        if self.partial_args:
            args = (*self.partial_args, *args)
        lift, leaves, donate_idx = self._lift_args(args, kwargs)
        values = lift.values
        graph, graph_updates = self._modes
        if not graph and lift.static is not self._checked:
            _functional.check_no_shared(lift.static, "jit")
            self._checked = lift.static
        s = self.today_in_shardings
        if s is not None and s is not _graph_jit.UNSPECIFIED:
            shardings = tuple(s) if isinstance(s, (tuple, list)) else (s,) * len(args)
            key, per_value = self._shard_cache
            if key is not lift.static:
                per_value = _value_shardings(shardings, args, lift)
                self._shard_cache = (lift.static, per_value)
            values = [x if sh is None else _put(x, sh) for x, sh in zip(values, per_value)]
            leaves = _graph_jit._place_inputs(
                tuple(x if not isinstance(x, PrefixMapping) else None for x in shardings),
                args, kwargs, leaves, lift)
        return lift, values, leaves, donate_idx

    def _finish(self, lift: _lift.Lift, res: tp.Any, values: list | None = None,
                leaves: list | None = None) -> tp.Any:
        if type(res) is _RefOut:
            plan, res = res.plan, res.res
            res.values, res.out_leaves = _functional.reref(
                (res.values, res.out_leaves), plan, (values or [], leaves or []))
        return lift.finish(res.aux, res.values, res.out_leaves)

    @traceback_util.api_boundary
    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        lift, values, leaves, donate_idx = self._prepare(args, kwargs)
        if donate_idx:
            fn = self._compiled.get(donate_idx)
            if fn is None:
                fn = self._compiled[donate_idx] = self._make_jitted(donate_idx)
            donated = [leaves[i] for i in donate_idx]
            leaves = list(leaves)
            for i in donate_idx:
                leaves[i] = None
            res = fn(lift.static, values, leaves, *donated)
        else:
            res = self._default(lift.static, values, leaves)
        return self._finish(lift, res, values, leaves)

    def trace(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        """Traces for these arguments (no lowering yet); ``.lower()`` continues."""
        lift, values, leaves, _ = self._prepare(args, kwargs)
        jitted: tp.Any = self._default  # a jax.jit wrapper
        return self._traced_type(jitted.trace(lift.static, values, leaves), self)

    def lower(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        """``self.trace(*args, **kwargs).lower()``: ``.compile()`` continues."""
        lift, values, leaves, _ = self._prepare(args, kwargs)
        jitted: tp.Any = self._default  # a jax.jit wrapper
        return self._lowered_type(jitted.lower(lift.static, values, leaves), self)

    def eval_shape(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        lift, values, leaves, _ = self._prepare(args, kwargs)
        res = jax.eval_shape(functools.partial(self._inner, lift.static), values, leaves)
        if type(res) is _RefOut:
            res = res.res
        return lift.finish(res.aux, res.values, res.out_leaves, update_inputs=False)


class JitWrapped(_JitWrappedBase, tp.Generic[P, R]):
    """The callable ``nnx.jit`` returns in graph mode with graph updates (see :func:`jit`).

    ``graph``/``graph_updates`` (keywords, ``None``: the current defaults at call time)
    choose the mode; ``trace``/``lower`` give :class:`Traced`/:class:`Lowered` stages.

    >>> import jax.numpy as jnp
    >>> f = JitWrapped(lambda x: x * 2, None, None)
    >>> float(f(jnp.array(2.0))), type(f.lower(jnp.array(2.0))).__name__
    (4.0, 'Lowered')
    """


class _SimpleJitBase(_JitWrappedBase):
    """The functional modes: ``graph_updates`` is ``False`` unless given."""

    def __init__(self, fun: tp.Callable, in_shardings: tp.Any = None,
                 out_shardings: tp.Any = None,
                 static_argnums: int | tp.Sequence[int] | None = None,
                 static_argnames: str | tp.Iterable[str] | None = None,
                 donate_argnums: int | tp.Sequence[int] | None = None,
                 donate_argnames: str | tp.Iterable[str] | None = None,
                 keep_unused: bool = False, device: tp.Any = None, backend: str | None = None,
                 inline: bool = False, partial_args: tuple = (), graph: bool | None = None,
                 update_shardings: bool = True, *, graph_updates: bool | None = False) -> None:
        super().__init__(fun, in_shardings, out_shardings, static_argnums, static_argnames,
                         donate_argnums, donate_argnames, keep_unused, device, backend,
                         inline, partial_args, graph, update_shardings,
                         graph_updates=graph_updates)


class SimpleJitWrapped(_SimpleJitBase, tp.Generic[P, R]):
    """The callable the functional ``nnx.jit`` returns (``graph_updates=False``, or
    ``graph=False``): only the input Variables' new values are written back.
    ``trace``/``lower`` give :class:`SimpleTraced`/:class:`SimpleLowered` stages.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> f = nnx.jit(lambda x: x * 2, graph_updates=False)
    >>> isinstance(f, SimpleJitWrapped), float(f(jnp.array(2.0)))
    (True, 4.0)
    """

    _traced_type = SimpleTraced
    _lowered_type = SimpleLowered


class SimpleJitPartialWrapped(_SimpleJitBase, tp.Generic[P, R]):
    """The callable ``nnx.jit_partial`` returns: ``partial_args`` are bound first.
    ``trace``/``lower`` give :class:`SimplePartialTraced`/:class:`SimplePartialLowered`.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> f = nnx.jit_partial(lambda a, b: a + b, jnp.array(1.0), graph_updates=False)
    >>> isinstance(f, SimpleJitPartialWrapped), float(f(jnp.array(2.0)))
    (True, 3.0)
    """

    _traced_type = SimplePartialTraced
    _lowered_type = SimplePartialLowered


def jit(
    fun: F | None = None,
    *,
    in_shardings: tp.Any = None,
    out_shardings: tp.Any = None,
    static_argnums: int | tp.Sequence[int] | None = None,
    static_argnames: str | tp.Iterable[str] | None = None,
    donate_argnums: int | tp.Sequence[int] | None = None,
    donate_argnames: str | tp.Iterable[str] | None = None,
    keep_unused: bool = False,
    device: tp.Any = None,
    backend: str | None = None,
    inline: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> F:
    """Lifted ``jax.jit`` that accepts graph nodes anywhere in its arguments.

    ``graph``/``graph_updates`` (``None``: the ``nnx.set_graph_mode`` /
    ``nnx.set_graph_updates`` defaults) choose how changes come back out: graph mode with
    updates writes back structure and values; the other modes write back Variable values
    only, and in tree mode (``graph=False``) shared references among the inputs are an
    error. ``.lower(...)`` returns a :class:`Lowered` whose ``compile()`` result is called
    like the original.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> count = nnx.Variable(jnp.array(0))
    >>> @nnx.jit(graph=False)
    ... def inc(c):
    ...     c.value += 1
    >>> inc(count); inc(count); int(count.value)
    2
    """
    graph, graph_updates = resolve_modes(graph, graph_updates)  # now, as in Flax
    kwargs = dict(
        in_shardings=in_shardings, out_shardings=out_shardings, static_argnums=static_argnums,
        static_argnames=static_argnames, donate_argnums=donate_argnums,
        donate_argnames=donate_argnames, keep_unused=keep_unused, device=device,
        backend=backend, inline=inline, graph=graph, graph_updates=graph_updates,
    )
    if fun is None:
        return functools.partial(jit, **kwargs)  # type: ignore[return-value]
    resolve_bound(fun, "jit")
    check_prefix(in_shardings, "in_shardings", "jit", graph, graph_updates)
    check_prefix(out_shardings, "out_shardings", "jit", graph, graph_updates)
    return _make(fun, kwargs)  # type: ignore[return-value]


def _make(fun: tp.Callable, kwargs: dict) -> _JitWrappedBase:
    # the class tells the modes apart as Flax's do
    graph, graph_updates = kwargs["graph"], kwargs["graph_updates"]
    g, gu = resolve_modes(graph, graph_updates)
    cls: type[_JitWrappedBase] = JitWrapped if g and gu else SimpleJitWrapped
    return cls(
        fun, kwargs["in_shardings"], kwargs["out_shardings"], kwargs["static_argnums"],
        kwargs["static_argnames"], kwargs["donate_argnums"], kwargs["donate_argnames"],
        kwargs["keep_unused"], kwargs["device"], kwargs["backend"], kwargs["inline"],
        (), graph, True, graph_updates=graph_updates)


def jit_partial(
    fun: tp.Callable[..., tp.Any],
    *partial_args: tp.Any,
    in_shardings: tp.Any = None,
    out_shardings: tp.Any = None,
    static_argnums: int | tp.Sequence[int] | None = None,
    static_argnames: str | tp.Iterable[str] | None = None,
    donate_argnums: int | tp.Sequence[int] | None = None,
    donate_argnames: str | tp.Iterable[str] | None = None,
    keep_unused: bool = False,
    device: tp.Any = None,
    backend: str | None = None,
    inline: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> SimpleJitPartialWrapped:
    """``nnx.jit(fun)`` with ``partial_args`` bound as its first arguments.

    Calls take the remaining arguments; Variable updates of the bound objects are written
    back. ``in_shardings`` (a tuple) covers the bound and the remaining arguments.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> count = nnx.Variable(jnp.array(0))
    >>> def step(c, x):
    ...     c.value += 1
    ...     return x * 2
    >>> f = nnx.jit_partial(step, count, graph_updates=False)
    >>> float(f(jnp.array(3.0))), int(count.value)
    (6.0, 1)
    """
    resolve_bound(fun, "jit_partial")
    g, gu = graph, graph_updates = resolve_modes(graph, graph_updates)
    check_prefix(in_shardings, "in_shardings", "jit_partial", g, gu)
    if not g and partial_args:
        _functional.check_no_shared(_lift.Lift(partial_args, {}).static, "jit_partial")
    return SimpleJitPartialWrapped(
        fun, in_shardings, out_shardings, static_argnums, static_argnames, donate_argnums,
        donate_argnames, keep_unused, device, backend, inline, tuple(partial_args), graph,
        True, graph_updates=graph_updates)


def cached_partial(f: tp.Callable[..., tp.Any], *cached_args: tp.Any, graph: bool | None = None,
                   graph_updates: bool | None = None) -> tp.Callable[..., tp.Any]:
    """``functools.partial(f, *cached_args)`` where each graph node among ``cached_args`` is
    replaced by a copy that shares its Variables (graph mode with graph updates only).

    The copies are fixed objects, so a transform's cached walk of them stays valid from call
    to call while their Variables (shared with the originals) carry the state.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> f = nnx.cached_partial(nnx.jit(lambda m, x: m(x)), m)
    >>> f(jnp.ones((1, 2))).shape
    (1, 3)
    """
    from flaxen.nnx import _graph_engine as eng
    from flaxen.nnx.variablelib import Variable

    g, gu = resolve_modes(graph, graph_updates)
    if not (g and gu):
        raise NNXTransformError(
            "", "cached_partial is a graph-mode-only API and requires graph_updates=True.",
            "Pass graph=True, graph_updates=True (or use nnx.compat.cached_partial); in "
            "tree mode use nnx.jit_partial.")
    treedef: tp.Any  # jax PyTreeDef
    leaves, treedef = jax.tree_util.tree_flatten(cached_args, is_leaf=_lift.is_node)
    pos = [i for i, x in enumerate(leaves) if _lift.is_node(x)]
    if pos:
        fg = eng.flatten([leaves[i] for i in pos])
        shared = {i: o for i, o in enumerate(fg.refs) if isinstance(o, Variable)}
        copies, _ = eng.unflatten(fg.defs, fg.values(), shared)
        for i, c in zip(pos, copies):
            leaves[i] = c
    return functools.partial(f, *treedef.unflatten(leaves))


# shard_map lives in its own file; Flax's module path names it here
from flaxen.nnx.transforms._mesh_mapped import shard_map  # noqa: E402

# Flax 0.12.8's aliases of nnx.transforms.compilation
Specs = tp.Any
AxisName = tp.Hashable
