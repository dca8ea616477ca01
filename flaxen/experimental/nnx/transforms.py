"""Flax 0.8.3's NNX transforms: ``jit``, ``grad``, ``value_and_grad``, ``remat``,
``eval_shape`` (``vmap``/``scan`` and the module-wrapping ``Vmap``/``Scan``/``Remat``/``Jit``
are in :mod:`flaxen.experimental.nnx._axis_transforms`).

Each is a short function on the lifting primitive of :mod:`flaxen.nnx._lift`: graph nodes
(Modules, Rngs, ...) may appear anywhere in the arguments, their state goes through the JAX
transform as arrays, and every change the function makes (BatchNorm statistics, RNG counts,
new or removed attributes) is written back to the original objects afterwards.

>>> import jax.numpy as jnp
>>> from flaxen.experimental import nnx
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
import typing as tp

import jax

from flaxen import traceback_util
from flaxen.errors import NNXTransformError
from flaxen.experimental.nnx import filterlib as _filters
from flaxen.experimental.nnx._variable_state import VariableState
from flaxen.nnx import _lift, filterlib
from flaxen.nnx._graph_ops import _nest
from flaxen.nnx.statelib import State, _flat_mapping
from flaxen.nnx.transforms._graph_jit import UNSPECIFIED, JitWrapped
from flaxen.nnx.variablelib import Param, Variable

F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])


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
    pred = _filters.to_predicate(wrt)

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
            _nest([(lift.paths[i], VariableState.of(objs[i]) if isinstance(objs[i], Variable)
                    else objs[i]) for i in diff_pos[n]]) if n in diff_pos else args[n]
            for n in nums
        ]
        leaf_pos = _arg_leaf_positions(args, kwargs)

        def inner(*diff: tp.Any) -> tp.Any:
            vals = list(values)
            leaves = list(lift.leaves)
            for n, d in zip(nums, diff):
                if n in diff_pos:
                    flat_d = _flat_mapping(d)
                    for i in diff_pos[n]:
                        leaf = flat_d[lift.paths[i]]
                        vals[i] = leaf.value if isinstance(leaf, VariableState) else leaf
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
