"""NNX transforms: ``jit``, ``grad``, ``value_and_grad``, ``remat``, ``eval_shape`` (and the
module-wrapping ``Jit``/``Remat``); ``vmap``/``scan``/``Vmap``/``Scan`` live in
:mod:`flaxen.nnx._vmap_scan` and are re-exported here.

Graph nodes (Modules, Rngs, ...) may appear anywhere in the arguments. Their Variables are
passed through the JAX transform as arrays, fresh copies are built inside, and every change
the function makes (Variable values such as BatchNorm statistics or RNG counts, new or
removed attributes) is written back to the original objects afterwards. Shared references
stay shared.

``nnx.jit`` is the hot path of a training loop, so it avoids Python work per call: the
graph walk is cached while the structure is unchanged, the graph definition is hashed
once, and when the traced function left the structure alone (the usual case) writing back
is one assignment per Variable.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
>>> @nnx.jit
... def step(model, x):
...     grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
...     model.kernel.value -= 0.1 * grads.kernel.value
...     return jnp.mean(model(x) ** 2)
>>> before = float(jnp.mean(model(jnp.ones((1, 2))) ** 2))
>>> float(step(model, jnp.ones((1, 2)))) < before
True
"""

from __future__ import annotations

import functools
import inspect
import typing as tp

import jax

from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _lift, filterlib
from flaxen.nnx.state import State
from flaxen.nnx.variables import Param

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
UNSPECIFIED = object()


# -- jit -------------------------------------------------------------------------------------

class _Static:
    """The static argument of the inner jitted function; hashed once, compared by identity."""

    __slots__ = ("graphdef", "treedef", "node_pos", "static_vals", "_hash")

    def __init__(self, graphdef: tp.Any, treedef: tp.Any, node_pos: tuple,
                 static_vals: tuple) -> None:
        self.graphdef = graphdef
        self.treedef = treedef
        self.node_pos = node_pos
        self.static_vals = static_vals
        self._hash = hash((graphdef, treedef, node_pos, static_vals))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _Static)
            and self._hash == other._hash
            and self.graphdef == other.graphdef
            and self.treedef == other.treedef
            and self.node_pos == other.node_pos
            and self.static_vals == other.static_vals
        )


class _OutAux:
    """Static half of the inner function's output, fixed per trace."""

    __slots__ = ("fast", "defs", "out_treedef", "out_node_pos", "n_inputs")

    def __init__(self, fast: bool, collected: _lift.Collected) -> None:
        self.fast = fast
        self.defs = collected.defs
        self.out_treedef = collected.out_treedef
        self.out_node_pos = collected.out_node_pos
        self.n_inputs = collected.n_inputs

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class _JitOut:
    __slots__ = ("aux", "values", "out_leaves")

    def __init__(self, aux: _OutAux, values: list, out_leaves: list) -> None:
        self.aux = aux
        self.values = values
        self.out_leaves = out_leaves


jax.tree_util.register_pytree_node(
    _JitOut,
    lambda o: ((o.values, o.out_leaves), o.aux),
    lambda aux, ch: _JitOut(aux, ch[0], ch[1]),
)


def _constrain(values: list, variables: list, constrain_state: tp.Any) -> list:
    if constrain_state is True:
        from flaxen.nnx.spmd import _constraint_for

        out = []
        for v, x in zip(variables, values):
            sharding = _constraint_for(v)
            out.append(x if sharding is None else jax.lax.with_sharding_constraint(x, sharding))
        return out
    return values


class JitWrapped:
    """The callable ``nnx.jit`` returns (see :func:`jit`)."""

    def __init__(self, fun: tp.Callable, *, in_shardings: tp.Any, out_shardings: tp.Any,
                 static_argnums: tp.Any, static_argnames: tp.Any, donate_argnums: tp.Any,
                 donate_argnames: tp.Any, keep_unused: bool, device: tp.Any, backend: tp.Any,
                 inline: bool, abstracted_axes: tp.Any, donate_state: bool,
                 constrain_state: tp.Any) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.constrain_state = constrain_state
        self.out_shardings = out_shardings
        nums, names = _resolve_argnums(fun, static_argnums, static_argnames)
        self.static_argnums = frozenset(nums)
        self.static_argnames = frozenset(names)
        dnums, dnames = _resolve_argnums(fun, donate_argnums, donate_argnames)
        self.donate_argnums = frozenset(dnums)
        self.donate_argnames = frozenset(dnames)
        self.in_shardings = in_shardings
        self.donate_state = donate_state
        jit_kwargs: dict[str, tp.Any] = dict(
            keep_unused=keep_unused, inline=inline,
        )
        if device is not None:
            jit_kwargs["device"] = device
        if backend is not None:
            jit_kwargs["backend"] = backend
        if abstracted_axes is not None:
            jit_kwargs["abstracted_axes"] = abstracted_axes
        self._jit_kwargs = jit_kwargs
        self._compiled: dict[tuple, tp.Callable] = {}
        self._last_static: _Static | None = None
        self._default = self._make_jitted(())

    def _make_jitted(self, donate_leaf_args: tuple) -> tp.Callable:
        donate = (1,) if self.donate_state else ()
        kwargs = dict(self._jit_kwargs)
        if self.in_shardings is not UNSPECIFIED and self.in_shardings is not None:
            kwargs["in_shardings"] = None  # applied as constraints inside (see _inner)
            kwargs.pop("in_shardings")
        return jax.jit(self._inner, static_argnums=(0,), donate_argnums=donate + tuple(
            i + 3 for i in donate_leaf_args), **kwargs)

    def _inner(self, static: _Static, values: list, leaves: list, *donated: tp.Any) -> _JitOut:
        leaves = list(leaves)
        for i, x in zip(static.static_vals[1], donated):
            leaves[i] = x
        gd_defs = static.graphdef.defs if static.graphdef is not None else ()
        values = _constrain(values, _DefVars(gd_defs), self.constrain_state)
        args, kwargs, copies, outer_map = _lift.rebuild(
            gd_defs, values, static.treedef, leaves, static.node_pos)
        args, kwargs = _insert_static(args, kwargs, static.static_vals[0])
        if callable(self.constrain_state) and self.constrain_state is not True and copies:
            from flaxen.nnx.graph import split, update

            for c in copies:
                update(c, self.constrain_state(split(c)[1]))
        out = self.fun(*args, **kwargs)
        if self.out_shardings is not UNSPECIFIED and self.out_shardings is not None:
            out = jax.lax.with_sharding_constraint(out, self.out_shardings)
        col = _lift.Collected(copies, out, outer_map)
        new_values = col.values
        if self.constrain_state is True:
            new_values = _constrain(new_values, col.variables, True)
        fast = not col.out_node_pos and _static_unchanged(gd_defs, col.defs)
        return _JitOut(_OutAux(fast, col), new_values, col.out_leaves)

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        static_vals: tuple = ()
        if self.static_argnums or self.static_argnames:
            args, kwargs, static_vals = _extract_static(
                args, kwargs, self.static_argnums, self.static_argnames)
        prepared = _lift.Prepared(args, kwargs)
        flat = prepared.flat
        values = [v.raw_value for v in flat.variables] if flat is not None else []
        leaves = prepared.leaves
        donate_idx: tuple = ()
        if self.donate_argnums or self.donate_argnames:
            donate_idx = _donated_leaf_indices(args, kwargs, self.donate_argnums,
                                               self.donate_argnames, prepared)
        if self.in_shardings is not UNSPECIFIED and self.in_shardings is not None:
            values, leaves = _place_inputs(self.in_shardings, args, kwargs, values, leaves,
                                           prepared)
        graphdef = flat.graphdef if flat is not None else None
        last = self._last_static
        key_vals = (static_vals, donate_idx)
        if (last is not None and last.graphdef is graphdef and last.treedef == prepared.treedef
                and last.node_pos == prepared.node_pos and last.static_vals == key_vals):
            static = last
        else:
            static = _Static(graphdef, prepared.treedef, prepared.node_pos, key_vals)
            self._last_static = static
        if donate_idx:
            fn = self._compiled.get(donate_idx)
            if fn is None:
                fn = self._compiled[donate_idx] = self._make_jitted(donate_idx)
            donated = [leaves[i] for i in donate_idx]
            leaves = list(leaves)
            for i in donate_idx:
                leaves[i] = None
            res = fn(static, values, leaves, *donated)
        else:
            res = self._default(static, values, leaves)
        aux = res.aux
        if aux.fast:
            setter = object.__setattr__
            for var, x in zip(flat.variables if flat is not None else (), res.values):
                setter(var, "raw_value", x)
            return aux.out_treedef.unflatten(res.out_leaves)
        roots = _lift.write_back(aux.defs, res.values, prepared)
        return _lift.assemble_output(aux.out_treedef, res.out_leaves, aux.out_node_pos,
                                     roots[aux.n_inputs:])

    def __get__(self, obj: tp.Any, objtype: tp.Any = None) -> tp.Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def lower(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        prepared = _lift.Prepared(args, kwargs)
        static = _Static(prepared.flat.graphdef if prepared.flat else None, prepared.treedef,
                         prepared.node_pos, ((), ()))
        return self._default.lower(static, prepared.values(), prepared.leaves)


class _DefVars:
    """Variables-like view over var defs (type and metadata) for sharding constraints."""

    def __init__(self, defs: tuple) -> None:
        self.items: list = []

        def walk(d: tuple) -> None:
            kind = d[0]
            if kind == "var":
                self.items.append(eng._new_var(d[1], None, d[3]))
            elif kind == "node":
                for _, s in d[3]:
                    walk(s)
            elif kind == "tree":
                for s in d[2]:
                    walk(s)

        for d in defs:
            walk(d)

    def __iter__(self) -> tp.Iterator:
        return iter(self.items)


def _static_unchanged(in_defs: tuple, out_defs: tuple) -> bool:
    if len(out_defs) != len(in_defs):
        return False
    if eng.strip_outer(out_defs) != in_defs:
        return False
    return eng.var_outer_indices(out_defs) == _lift._var_indices(in_defs)


def _resolve_argnums(fun: tp.Callable, nums: tp.Any, names: tp.Any) -> tuple[tuple, tuple]:
    nums = () if nums is None else ((nums,) if isinstance(nums, int) else tuple(nums))
    names = () if names is None else ((names,) if isinstance(names, str) else tuple(names))
    if (nums and names) or (not nums and not names):
        return nums, names
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return nums, names
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if nums and not names:
        names = tuple(positional[i] for i in nums if i < len(positional))
    else:
        nums = tuple(positional.index(n) for n in names if n in positional)
    return nums, names


def _extract_static(args: tuple, kwargs: dict, nums: frozenset, names: frozenset
                    ) -> tuple[tuple, dict, tuple]:
    pos = []
    new_args = list(args)
    for i in sorted(nums):
        if i < len(args):
            pos.append((i, args[i]))
            new_args[i] = None
    kw = []
    new_kwargs = dict(kwargs)
    for n in sorted(names):
        if n in kwargs:
            kw.append((n, kwargs[n]))
            del new_kwargs[n]
    for _, v in pos + kw:
        try:
            hash(v)
        except TypeError:
            raise ValueError(
                f"nnx.jit: static argument {v!r} is not hashable; static arguments must be "
                "hashable (they key the compilation cache)."
            ) from None
    return tuple(new_args), new_kwargs, (tuple(pos), tuple(kw))


def _insert_static(args: tuple, kwargs: dict, static_vals: tuple) -> tuple[tuple, dict]:
    if not static_vals:
        return args, kwargs
    pos, kw = static_vals
    args = list(args)
    for i, v in pos:
        args[i] = v
    kwargs = dict(kwargs)
    kwargs.update(kw)
    return tuple(args), kwargs


def _donated_leaf_indices(args: tuple, kwargs: dict, nums: frozenset, names: frozenset,
                          prepared: _lift.Prepared) -> tuple:
    idx = []
    start = 0
    for i, a in enumerate(args):
        n = len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node))
        if i in nums:
            idx.extend(j for j in range(start, start + n) if j not in prepared.node_pos)
        start += n
    for k in sorted(kwargs):
        n = len(jax.tree_util.tree_leaves(kwargs[k], is_leaf=_lift.is_node))
        if k in names:
            idx.extend(j for j in range(start, start + n) if j not in prepared.node_pos)
        start += n
    return tuple(idx)


def _place_inputs(in_shardings: tp.Any, args: tuple, kwargs: dict, values: list, leaves: list,
                  prepared: _lift.Prepared) -> tuple[list, list]:
    """Puts arguments on devices per ``in_shardings`` (a prefix of the positional args)."""
    shardings = in_shardings if isinstance(in_shardings, (tuple, list)) else (in_shardings,) * len(
        args)
    leaves = list(leaves)
    start = 0
    node_set = set(prepared.node_pos)
    for a, s in zip(args, shardings):
        n = len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node))
        if s is not None and not isinstance(s, State):
            for j in range(start, start + n):
                if j not in node_set and leaves[j] is not None:
                    leaves[j] = jax.device_put(leaves[j], s)
        start += n
    return values, leaves


def jit(
    fun: F | None = None,
    *,
    in_shardings: tp.Any = UNSPECIFIED,
    out_shardings: tp.Any = UNSPECIFIED,
    static_argnums: int | tp.Sequence[int] | None = None,
    static_argnames: str | tp.Iterable[str] | None = None,
    donate_argnums: int | tp.Sequence[int] | None = None,
    donate_argnames: str | tp.Iterable[str] | None = None,
    keep_unused: bool = False,
    device: tp.Any = None,
    backend: str | None = None,
    inline: bool = False,
    abstracted_axes: tp.Any = None,
    donate_state: bool = False,
    constrain_state: bool | tp.Callable[[State], State] = False,
) -> F:
    """Lifted ``jax.jit`` that accepts graph nodes as arguments (see the module docstring).

    ``donate_state`` donates the graph nodes' state buffers; ``constrain_state=True``
    constrains each Variable to the sharding its ``sharding`` metadata names (inside a mesh
    context), a callable receives and returns the State to constrain it. ``in_shardings``
    places non-node arguments; node state keeps the sharding its arrays already have.
    """
    kwargs = dict(
        in_shardings=in_shardings, out_shardings=out_shardings, static_argnums=static_argnums,
        static_argnames=static_argnames, donate_argnums=donate_argnums,
        donate_argnames=donate_argnames, keep_unused=keep_unused, device=device,
        backend=backend, inline=inline, abstracted_axes=abstracted_axes,
        donate_state=donate_state, constrain_state=constrain_state,
    )
    if fun is None:
        return functools.partial(jit, **kwargs)  # type: ignore[return-value]
    return JitWrapped(fun, **kwargs)  # type: ignore[return-value]


# -- generic lifting for one-shot transforms ------------------------------------------------

def _lifted_call(apply: tp.Callable[[tp.Callable, list, list], tp.Any], fun: tp.Callable,
                 args: tuple, kwargs: dict, write: bool = True) -> tp.Any:
    """Runs ``fun`` through a JAX transform: ``apply(pure, values, leaves)`` calls it."""
    prepared = _lift.Prepared(args, kwargs)
    defs = prepared.flat.defs if prepared.flat is not None else ()
    box: list = []

    def pure(values: list, leaves: list) -> tuple:
        a, k, copies, outer_map = _lift.rebuild(defs, values, prepared.treedef, leaves,
                                                prepared.node_pos)
        out = fun(*a, **k)
        col = _lift.Collected(copies, out, outer_map)
        box.append(col)
        return col.values, col.out_leaves

    new_values, out_leaves = apply(pure, prepared.values(), prepared.leaves)
    col = box[-1]
    if write:
        roots = _lift.write_back(col.defs, new_values, prepared)
    else:
        roots = [None] * col.n_inputs + eng.unflatten(
            _out_defs_only(col), new_values[len(_in_vars(col)):])
    return _lift.assemble_output(col.out_treedef, out_leaves, col.out_node_pos,
                                 roots[col.n_inputs:])


def _in_vars(col: _lift.Collected) -> list:
    n = 0

    def count(d: tuple) -> None:
        nonlocal n
        if d[0] == "var":
            n += 1
        elif d[0] == "node":
            for _, s in d[3]:
                count(s)
        elif d[0] == "tree":
            for s in d[2]:
                count(s)

    for d in col.defs[: col.n_inputs]:
        count(d)
    return [None] * n


def _out_defs_only(col: _lift.Collected) -> tuple:
    return col.defs[col.n_inputs:]


def eval_shape(f: tp.Callable[..., tp.Any], *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
    """Like ``jax.eval_shape``; graph nodes in the output hold ``ShapeDtypeStruct`` values.

    >>> from flaxen import nnx
    >>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    >>> abstract.kernel.value.shape
    (2, 3)
    """
    return _lifted_call(lambda pure, v, l: jax.eval_shape(pure, v, l), f, args, kwargs,
                        write=False)


def remat(f: F | None = None, *, prevent_cse: bool = True, static_argnums: tp.Any = (),
          policy: tp.Callable[..., bool] | None = None) -> F:
    """Lifted ``jax.checkpoint``: recompute ``f``'s activations in the backward pass."""
    if f is None:
        return functools.partial(remat, prevent_cse=prevent_cse, static_argnums=static_argnums,
                                 policy=policy)  # type: ignore[return-value]
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        if nums:
            static = {i: args[i] for i in nums}
            dyn = tuple(a for i, a in enumerate(args) if i not in static)

            def call(*dyn_args: tp.Any, **kw: tp.Any) -> tp.Any:
                it = iter(dyn_args)
                full = [static[i] if i in static else next(it) for i in range(len(args))]
                return f(*full, **kw)

            return _lifted_call(
                lambda pure, v, l: jax.checkpoint(pure, prevent_cse=prevent_cse,
                                                  policy=policy)(v, l),
                call, dyn, kwargs)
        return _lifted_call(
            lambda pure, v, l: jax.checkpoint(pure, prevent_cse=prevent_cse, policy=policy)(v, l),
            f, args, kwargs)

    return wrapper  # type: ignore[return-value]


# -- grad ------------------------------------------------------------------------------------

def _grad_impl(f: tp.Callable, argnums: int | tp.Sequence[int], has_aux: bool,
               holomorphic: bool, allow_int: bool, reduce_axes: tp.Any, wrt: tp.Any,
               return_value: bool) -> tp.Callable:
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    pred = filterlib.to_predicate(wrt)

    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        for n in nums:
            if n >= len(args):
                raise TypeError(
                    f"nnx.grad: argnums={argnums} but only {len(args)} positional argument(s) "
                    "were given."
                )
        prepared = _lift.Prepared(args, kwargs)
        flat = prepared.flat
        defs = flat.defs if flat is not None else ()
        all_values = prepared.values()
        # which variables are differentiated: those of node arguments in argnums matching wrt
        diff_positions: dict[int, list[int]] = {}
        diff_states: dict[int, State] = {}
        var_owner = _owners(args, nums, flat)
        for n in nums:
            a = args[n]
            if _lift.is_node(a):
                positions = [i for i, (p, v) in enumerate(zip(flat.paths, flat.variables))
                             if var_owner[i] == n and pred(p, v)]
                if not positions:
                    raise ValueError(
                        f"nnx.grad: wrt={wrt!r} matches no Variable of argument {n} "
                        f"({type(a).__name__}), so there is nothing to differentiate. Use a "
                        "filter that selects its trainable state, e.g. wrt=nnx.Param."
                    )
                diff_positions[n] = positions
                from flaxen.nnx.graph import _nest

                diff_states[n] = _nest([
                    (flat.paths[i], flat.variables[i].to_state()) for i in positions])
        box: list = []

        def inner(*diff_args: tp.Any) -> tp.Any:
            values = list(all_values)
            leaves = list(prepared.leaves)
            user_args = list(args)
            for n, d in zip(nums, diff_args):
                if n in diff_positions:
                    flat_d = d.flat_state()
                    for i in diff_positions[n]:
                        values[i] = flat_d[flat.paths[i]].value
                else:
                    user_args[n] = d
            if any(n not in diff_positions for n in nums):
                # non-node differentiated args: rebuild the leaves from the new user args
                prep2 = _lift.Prepared(tuple(user_args), kwargs)
                leaves = prep2.leaves
            a, k, copies, outer_map = _lift.rebuild(defs, values, prepared.treedef, leaves,
                                                    prepared.node_pos)
            out = f(*a, **k)
            if has_aux:
                loss, aux = out
            else:
                loss, aux = out, None
            col = _lift.Collected(copies, aux, outer_map)
            box.append(col)
            return loss, (col.values, col.out_leaves)

        diff_inputs = [diff_states[n] if n in diff_states else args[n] for n in nums]
        transform = jax.value_and_grad if return_value else jax.grad
        fn = transform(inner, argnums=tuple(range(len(nums))), has_aux=True,
                       holomorphic=holomorphic, allow_int=allow_int)
        if return_value:
            (loss, (new_values, out_leaves)), grads = fn(*diff_inputs)
        else:
            grads, (new_values, out_leaves) = fn(*diff_inputs)
        col = box[-1]
        roots = _lift.write_back(col.defs, new_values, prepared)
        aux = _lift.assemble_output(col.out_treedef, out_leaves, col.out_node_pos,
                                    roots[col.n_inputs:])
        g = grads[0] if single else tuple(grads)
        if return_value:
            return ((loss, aux), g) if has_aux else (loss, g)
        return (g, aux) if has_aux else g

    return wrapper


def _owners(args: tuple, nums: tuple, flat: tp.Any) -> list[int]:
    """For each walked Variable, the positional argument whose node reached it first."""
    if flat is None:
        return []
    # Prepared walks the nodes in leaf order of (args, kwargs), one root def per node
    owners: list[int] = []
    node_args: list[int] = []
    for i, a in enumerate(args):
        for leaf in jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node):
            if _lift.is_node(leaf):
                node_args.append(i)
    counts = []
    for d in flat.defs:
        counts.append(len(_lift._var_indices((d,))))
    for arg_i, c in zip(node_args + [-1] * len(counts), counts):
        owners.extend([arg_i] * c)
    return owners


def grad(f: tp.Callable[..., tp.Any], argnums: int | tp.Sequence[int] = 0,
         has_aux: bool = False, holomorphic: bool = False, allow_int: bool = False,
         reduce_axes: tp.Sequence[tp.Any] = (), *, wrt: filterlib.Filter = Param
         ) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.grad``: the gradient for a graph-node argument is a State of ``wrt``."""
    return _grad_impl(f, argnums, has_aux, holomorphic, allow_int, reduce_axes, wrt, False)


def value_and_grad(f: tp.Callable[..., tp.Any], argnums: int | tp.Sequence[int] = 0,
                   has_aux: bool = False, holomorphic: bool = False, allow_int: bool = False,
                   reduce_axes: tp.Sequence[tp.Any] = (), *, wrt: filterlib.Filter = Param
                   ) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.value_and_grad``: returns ``(value, grads)`` (``((value, aux), grads)``)."""
    return _grad_impl(f, argnums, has_aux, holomorphic, allow_int, reduce_axes, wrt, True)
