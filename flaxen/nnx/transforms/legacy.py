"""NNX transforms: ``jit``, ``grad``, ``value_and_grad``, ``remat``, ``eval_shape``;
``vmap``/``scan`` and the module-wrapping ``Vmap``/``Scan``/``Remat``/``Jit`` live in
:mod:`flaxen.nnx._vmap_scan`.

Each is a short function on the one lifting primitive of :mod:`flaxen.nnx._lift`: graph
nodes (Modules, Rngs, ...) may appear anywhere in the arguments, their state goes through the
JAX transform as arrays, and every change the function makes (Variable values such as
BatchNorm statistics or RNG counts, new or removed attributes) is written back to the
original objects afterwards. Shared references stay shared.

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

from flaxen import traceback_util
from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift, filterlib
from flaxen.nnx.graph import _nest
from flaxen.nnx.state import State
from flaxen.nnx.variables import Param, Variable
from flaxen.nnx.variables import VariableState as VariableStateT

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
UNSPECIFIED = object()


# -- jit -------------------------------------------------------------------------------------

class _JitOut:
    __slots__ = ("aux", "values", "out_leaves")

    def __init__(self, aux: _lift.OutStatic, values: list, out_leaves: list) -> None:
        self.aux = aux
        self.values = values
        self.out_leaves = out_leaves


jax.tree_util.register_pytree_node(
    _JitOut,
    lambda o: ((o.values, o.out_leaves), o.aux),
    lambda aux, ch: _JitOut(aux, ch[0], ch[1]),
)


class _MetaView:
    """A Variable-like view of a VariableDef's metadata (for sharding constraints)."""

    __slots__ = ("_var_metadata",)

    def __init__(self, d: tp.Any) -> None:
        self._var_metadata = d.thawed_metadata()


def _constrain(values: list, var_paths: list) -> list:
    from flaxen.nnx.spmd import _constraint_for

    out = []
    for (_, d), x in zip(var_paths, values):
        sharding = _constraint_for(_MetaView(d))
        out.append(x if sharding is None else jax.lax.with_sharding_constraint(x, sharding))
    return out


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
        jit_kwargs: dict[str, tp.Any] = dict(keep_unused=keep_unused, inline=inline)
        if device is not None:
            jit_kwargs["device"] = device
        if backend is not None:
            jit_kwargs["backend"] = backend
        if abstracted_axes is not None:
            jit_kwargs["abstracted_axes"] = abstracted_axes
        self._jit_kwargs = jit_kwargs
        self._compiled: dict[tuple, tp.Callable] = {}
        self._last_static: _lift.InStatic | None = None
        self._default = self._make_jitted(())

    def _make_jitted(self, donate_leaf_args: tuple) -> tp.Callable:
        donate = (1,) if self.donate_state else ()
        return jax.jit(self._inner, static_argnums=(0,), donate_argnums=donate + tuple(
            i + 3 for i in donate_leaf_args), **self._jit_kwargs)

    def _inner(self, static: _lift.InStatic, values: list, leaves: list, *donated: tp.Any
               ) -> _JitOut:
        leaves = list(leaves)
        for i, x in zip(static.extra[1], donated):
            leaves[i] = x
        if self.constrain_state is True:
            from flaxen.nnx._graphdef import var_def_paths

            values = _constrain(values, var_def_paths(static.defs))
        args, kwargs, inner = _lift.enter(static, values, leaves)
        args, kwargs = _insert_static(args, kwargs, static.extra[0])
        if callable(self.constrain_state) and self.constrain_state is not True:
            from flaxen.nnx.graph import split, update

            for c in inner.copies:
                update(c, self.constrain_state(split(c)[1]))
        out = self.fun(*args, **kwargs)
        if self.out_shardings is not UNSPECIFIED and self.out_shardings is not None:
            out = jax.lax.with_sharding_constraint(out, self.out_shardings)
        new_values, out_leaves, aux = _lift.exit(inner, out)
        if self.constrain_state is True:
            new_values = _constrain(new_values, aux.var_paths)
        return _JitOut(aux, new_values, out_leaves)

    def _lift_args(self, args: tuple, kwargs: dict) -> tuple[_lift.Lift, list, tuple]:
        static_vals: tuple = ()
        if self.static_argnums or self.static_argnames:
            args, kwargs, static_vals = _extract_static(
                args, kwargs, self.static_argnums, self.static_argnames)
        donate_idx: tuple = ()
        if self.donate_argnums or self.donate_argnames:
            donate_idx = _donated_leaf_indices(args, kwargs, self.donate_argnums,
                                               self.donate_argnames)
        last = self._last_static
        lift = _lift.Lift(args, kwargs, extra=(static_vals, donate_idx), last=last)
        if lift.static is last:
            pass
        elif last is not None and last == lift.static:
            lift.static = last  # the same object again: jax's cache lookup stops at identity
        else:
            self._last_static = lift.static
        leaves = lift.leaves
        if self.in_shardings is not UNSPECIFIED and self.in_shardings is not None:
            leaves = _place_inputs(self.in_shardings, args, kwargs, leaves, lift)
        return lift, leaves, donate_idx

    @traceback_util.api_boundary
    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        lift, leaves, donate_idx = self._lift_args(args, kwargs)
        if donate_idx:
            fn = self._compiled.get(donate_idx)
            if fn is None:
                fn = self._compiled[donate_idx] = self._make_jitted(donate_idx)
            donated = [leaves[i] for i in donate_idx]
            leaves = list(leaves)
            for i in donate_idx:
                leaves[i] = None
            res = fn(lift.static, lift.values, leaves, *donated)
        else:
            res = self._default(lift.static, lift.values, leaves)
        return lift.finish(res.aux, res.values, res.out_leaves)

    def __get__(self, obj: tp.Any, objtype: tp.Any = None) -> tp.Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def lower(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        lift, leaves, _ = self._lift_args(args, kwargs)
        return self._default.lower(  # type: ignore[attr-defined]  # a jax.jit wrapper
            lift.static, lift.values, leaves)


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
            raise NNXTransformError(
                "", f"nnx.jit: static argument {v!r} is not hashable",
                "Static arguments key the compilation cache: pass a hashable value (a "
                "tuple instead of a list, ...), or pass it as a regular argument.") from None
    return tuple(new_args), new_kwargs, (tuple(pos), tuple(kw))


def _insert_static(args: tuple, kwargs: dict, static_vals: tuple) -> tuple[tuple, dict]:
    if not static_vals:
        return args, kwargs
    pos, kw = static_vals
    arg_list = list(args)
    for i, v in pos:
        arg_list[i] = v
    kwargs = dict(kwargs)
    kwargs.update(kw)
    return tuple(arg_list), kwargs


def _donated_leaf_indices(args: tuple, kwargs: dict, nums: frozenset, names: frozenset
                          ) -> tuple:
    idx: list[int] = []
    start = 0
    for i, a in enumerate(args):
        n = len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node))
        if i in nums:
            idx.extend(j for j in range(start, start + n) if not _is_node_leaf(a, j - start))
        start += n
    for k in sorted(kwargs):
        n = len(jax.tree_util.tree_leaves(kwargs[k], is_leaf=_lift.is_node))
        if k in names:
            idx.extend(j for j in range(start, start + n)
                       if not _is_node_leaf(kwargs[k], j - start))
        start += n
    return tuple(idx)


def _place_inputs(in_shardings: tp.Any, args: tuple, kwargs: dict, leaves: list,
                  lift: _lift.Lift) -> list:
    """Puts arguments on devices per ``in_shardings`` (a prefix of the positional args)."""
    shardings = in_shardings if isinstance(in_shardings, (tuple, list)) else (in_shardings,) * len(
        args)
    leaves = list(leaves)
    start = 0
    node_set = set(lift.node_pos)
    for a, s in zip(args, shardings):
        n = len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node))
        if s is not None and not isinstance(s, State):
            for j in range(start, start + n):
                if j not in node_set and leaves[j] is not None:
                    leaves[j] = jax.device_put(leaves[j], s)
        start += n
    return leaves


def _is_node_leaf(tree: tp.Any, i: int) -> bool:
    return _lift.is_node(jax.tree_util.tree_leaves(tree, is_leaf=_lift.is_node)[i])


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


# -- one-shot transforms ----------------------------------------------------------------------

@traceback_util.api_boundary
def eval_shape(f: tp.Callable[..., tp.Any], *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
    """Like ``jax.eval_shape``; graph nodes in the output hold ``ShapeDtypeStruct`` values.

    >>> from flaxen import nnx
    >>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    >>> abstract.kernel.value.shape
    (2, 3)
    """
    lift = _lift.Lift(args, kwargs)
    values, out_leaves = jax.eval_shape(lift.pure(f), lift.values, lift.leaves)
    return lift.finish(lift.out,  # type: ignore[arg-type]  # set by lift.pure
                       values, out_leaves, update_inputs=False)


def remat(f: F | None = None, *, prevent_cse: bool = True, static_argnums: tp.Any = (),
          policy: tp.Callable[..., bool] | None = None) -> F:
    """Lifted ``jax.checkpoint``: recompute ``f``'s activations in the backward pass."""
    if f is None:
        return functools.partial(remat, prevent_cse=prevent_cse, static_argnums=static_argnums,
                                 policy=policy)  # type: ignore[return-value]
    nums = frozenset((static_argnums,) if isinstance(static_argnums, int) else static_argnums)

    @traceback_util.api_boundary
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        static = {i: a for i, a in enumerate(args) if i in nums}
        dyn = tuple(a for i, a in enumerate(args) if i not in nums)

        def call(*dyn_args: tp.Any, **kw: tp.Any) -> tp.Any:
            it = iter(dyn_args)
            return f(*[static[i] if i in static else next(it) for i in range(len(args))], **kw)

        lift = _lift.Lift(dyn, kwargs)
        ckpt = jax.checkpoint(lift.pure(call), prevent_cse=prevent_cse, policy=policy)
        values, out_leaves = ckpt(lift.values, lift.leaves)
        return lift.finish(lift.out,  # type: ignore[arg-type]  # set by lift.pure
                           values, out_leaves)

    return wrapper  # type: ignore[return-value]


# -- grad ------------------------------------------------------------------------------------

def _grad_impl(f: tp.Callable, argnums: int | tp.Sequence[int], has_aux: bool,
               holomorphic: bool, allow_int: bool, wrt: tp.Any, return_value: bool
               ) -> tp.Callable:
    single = isinstance(argnums, int)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    pred = filterlib.to_predicate(wrt)

    @traceback_util.api_boundary
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        if any(n >= len(args) for n in nums):
            raise NNXTransformError(
                "", f"nnx.grad: argnums={argnums} but only {len(args)} positional "
                "argument(s) were given", "Pass the argument to differentiate positionally.")
        # the differentiated node arguments travel as States of their `wrt` Variables; the
        # other arguments (and all other state) go through the primitive as usual
        node_nums = [n for n in nums if _lift.is_node(args[n])]
        lift = _lift.Lift(args, kwargs)
        owner = _owners(args, lift)
        diff_pos: dict[int, list[int]] = {}
        for n in node_nums:
            diff_pos[n] = [i for i, (p, v) in enumerate(zip(lift.paths, lift.leaf_objs))
                           if owner[i] == n and pred(p, v)]
            if not diff_pos[n]:
                raise NNXTransformError(
                    f"argument {n}", f"nnx.grad: wrt={wrt!r} matches no Variable of this "
                    f"{type(args[n]).__name__}, so there is nothing to differentiate",
                    "Use a filter that selects its trainable state, e.g. wrt=nnx.Param.")
        values = lift.values
        objs = lift.leaf_objs
        diff_in = [
            _nest([(lift.paths[i], objs[i].to_state() if isinstance(objs[i], Variable)
                    else objs[i]) for i in diff_pos[n]]) if n in diff_pos else args[n]
            for n in nums
        ]
        leaf_pos = _arg_leaf_positions(args, kwargs)

        def inner(*diff: tp.Any) -> tp.Any:
            vals = list(values)
            leaves = list(lift.leaves)
            for n, d in zip(nums, diff):
                if n in diff_pos:
                    flat_d = d.flat_state()
                    for i in diff_pos[n]:
                        leaf = flat_d[lift.paths[i]]
                        vals[i] = leaf.value if isinstance(leaf, VariableStateT) else leaf
                else:
                    sub = jax.tree_util.tree_leaves(d, is_leaf=_lift.is_node)
                    for j, x in zip(leaf_pos[n], sub):
                        leaves[j] = x
            out_box: list = []

            def split_aux(*a: tp.Any, **k: tp.Any) -> tp.Any:
                out = f(*a, **k)
                loss, aux = out if has_aux else (out, None)
                out_box.append(loss)
                return aux

            new_values, aux_leaves = lift.pure(split_aux)(vals, leaves)
            return out_box[0], (new_values, aux_leaves)

        transform = jax.value_and_grad if return_value else jax.grad
        fn = transform(inner, argnums=tuple(range(len(nums))), has_aux=True,
                       holomorphic=holomorphic, allow_int=allow_int)
        if return_value:
            (loss, (new_values, aux_leaves)), grads = fn(*diff_in)
        else:
            grads, (new_values, aux_leaves) = fn(*diff_in)
        aux = lift.finish(lift.out,  # type: ignore[arg-type]  # set by lift.pure
                          new_values, aux_leaves)
        g = grads[0] if single else tuple(grads)
        if return_value:
            return ((loss, aux), g) if has_aux else (loss, g)
        return (g, aux) if has_aux else g

    return wrapper


def _arg_leaf_positions(args: tuple, kwargs: dict) -> list[list[int]]:
    """For each positional argument, the positions of its leaves among all leaves."""
    out = []
    start = 0
    for a in args:
        n = len(jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node))
        out.append(list(range(start, start + n)))
        start += n
    return out


def _owners(args: tuple, lift: _lift.Lift) -> list[int]:
    """For each State leaf, the positional argument whose node reached it first."""
    flat = lift.flat
    if flat is None:
        return []
    from flaxen.nnx._graphdef import var_defs

    node_args: list[int] = []
    for i, a in enumerate(args):
        for leaf in jax.tree_util.tree_leaves(a, is_leaf=_lift.is_node):
            if _lift.is_node(leaf):
                node_args.append(i)
    owners: list[int] = []
    for arg_i, d in zip(node_args + [-1] * len(flat.defs), flat.defs):
        owners.extend([arg_i] * len(var_defs((d,))))
    return owners


def grad(f: tp.Callable[..., tp.Any], argnums: int | tp.Sequence[int] = 0,
         has_aux: bool = False, holomorphic: bool = False, allow_int: bool = False,
         reduce_axes: tp.Sequence[tp.Any] = (), *, wrt: filterlib.Filter = Param
         ) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.grad``: the gradient for a graph-node argument is a State of ``wrt``."""
    return _grad_impl(f, argnums, has_aux, holomorphic, allow_int, wrt, False)


def value_and_grad(f: tp.Callable[..., tp.Any], argnums: int | tp.Sequence[int] = 0,
                   has_aux: bool = False, holomorphic: bool = False, allow_int: bool = False,
                   reduce_axes: tp.Sequence[tp.Any] = (), *, wrt: filterlib.Filter = Param
                   ) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.value_and_grad``: returns ``(value, grads)`` (``((value, aux), grads)``)."""
    return _grad_impl(f, argnums, has_aux, holomorphic, allow_int, wrt, True)
