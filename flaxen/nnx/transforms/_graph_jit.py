"""The graph-mode jit machinery that both ``nnx.jit`` faces wrap.

:class:`JitWrapped` runs a function under ``jax.jit`` with graph nodes among its arguments:
the nodes' state goes in as arrays through the lifting primitive (:mod:`flaxen.nnx._lift`),
every change the function makes (values, new or removed attributes) is written back to the
caller's objects afterwards, and shared references stay shared. It is the hot path of a
training loop, so a call does as little Python as it can: the graph walk is cached while the
structure is unchanged, the previous call's static half is reused by identity, and when the
traced function left the structure alone writing back is one assignment per Variable.
Today's ``nnx.jit`` (:mod:`flaxen.nnx.transforms.compilation`) subclasses it with the
``graph=``/``graph_updates=`` modes; Flax 0.8.3's (``flaxen.experimental.nnx``) uses it as is.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
>>> step = JitWrapped(lambda m, x: m(x).sum(), in_shardings=UNSPECIFIED,
...     out_shardings=UNSPECIFIED, static_argnums=None, static_argnames=None,
...     donate_argnums=None, donate_argnames=None, keep_unused=False, device=None,
...     backend=None, inline=False, abstracted_axes=None, donate_state=False,
...     constrain_state=False)
>>> bool(step(model, jnp.ones((1, 2))) == model(jnp.ones((1, 2))).sum())
True
"""

from __future__ import annotations

import functools
import inspect
import typing as tp

import jax

from flaxen import traceback_util
from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift
from flaxen.nnx.statelib import State

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

    @property
    def functional_name(self) -> str | None:
        """None: graph mode (structure written back); a transform's name: the functional
        branch of the primitive (the input Variables' values written back, the output's
        nodes built new)."""
        return None

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
        inner = self._inner

        def run(static: _lift.InStatic, values: list, leaves: list, *donated: tp.Any
                ) -> _JitOut:
            return inner(static, values, leaves, *donated)

        # JAX names the computation (jaxprs, profiles, tracer errors) after the function it
        # is given: the user's name, not the wrapper's. Only the names: the signature must
        # stay the wrapper's for JAX's argnums checks.
        name = getattr(self.fun, "__name__", None)
        if isinstance(name, str):
            run.__name__ = name
            run.__qualname__ = getattr(self.fun, "__qualname__", name)
        return jax.jit(run, static_argnums=(0,), donate_argnums=donate + tuple(
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
            from flaxen.nnx._graph_ops import split, update

            for c in inner.copies:
                update(c, self.constrain_state(split(c)[1]))
        out = self._constrain_output(self.fun(*args, **kwargs))
        new_values, out_leaves, aux = _lift.exit(inner, out, functional=self.functional_name)
        if self.constrain_state is True:
            from flaxen.nnx._graphdef import var_def_paths

            # the functional branch's values: the inputs' leaves, then the output's
            paths = [*var_def_paths(static.defs), *aux.var_paths] if aux.functional \
                else aux.var_paths
            new_values = _constrain(new_values, paths)
        return _JitOut(aux, new_values, out_leaves)

    def _constrain_output(self, out: tp.Any) -> tp.Any:
        if self.out_shardings is not UNSPECIFIED and self.out_shardings is not None:
            out = jax.lax.with_sharding_constraint(out, self.out_shardings)
        return out

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
        lift = _lift.Lift(args, kwargs, extra=(static_vals, donate_idx), last=last,
                          check=self.functional_name is None)
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

