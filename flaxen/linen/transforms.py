"""Lifted transforms for Linen Modules: ``nn.vmap``, ``nn.scan``, ``nn.jit``, ``nn.remat``, ...

JAX transforms need pure functions; a Module method reads and writes variables and draws
RNG keys. A lifted transform handles that: variables and RNG streams of chosen collections
cross the transform explicitly (mapped, broadcast, carried or split), and whatever the
method creates or updates inside comes back out.

Each transform accepts

* a Module **class**: returns a subclass (``nn.vmap(MLP)`` -> ``VmapMLP``, so auto-names read
  ``VmapMLP_0``) whose ``__call__`` (or the ``methods=`` listed) is lifted;
* a Module **method** (as a decorator, or ``Foo.method``) or any **function taking a Module
  first**: returns a function ``(module, *args)`` with the same contract.

Anything else raises :class:`~flaxen.errors.TransformTargetError`. ``nn.vjp``, ``nn.jvp``,
``nn.grad``, ``nn.value_and_grad``, ``nn.cond``, ``nn.switch`` and ``nn.while_loop`` are
called directly with the function, the Module and the inputs. The work is done by
:mod:`flaxen.core.lift` on the Module's scope.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> class Ensemble(nn.Module):
...     @nn.compact
...     def __call__(self, x):
...         VmapDense = nn.vmap(nn.Dense, variable_axes={'params': 0},
...                             split_rngs={'params': True}, in_axes=None, axis_size=3)
...         return VmapDense(2)(x)
>>> variables = Ensemble().init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
>>> variables['params']['VmapDense_0']['kernel'].shape
(3, 4, 2)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from flaxen import errors
from flaxen.core import lift, meta
from flaxen.core._lift_misc import fold_rngs_reseeded
from flaxen.core.frozen_dict import FrozenDict
from flaxen.core.scope import CollectionFilter, PRNGSequenceFilter
from flaxen.linen._interception import named_call
from flaxen.linen._transform_cached import (
    ModuleT,
    TransformTarget,
    clean_clone,
    decorator_lift_transform_cached,
    fork_rngs,
    lift_transform_cached,
    module_class_lift_transform_cached,
)
from flaxen.linen._transform_jit import jit_lift_transform
from flaxen.linen._transform_wrap import (
    DirectTransformTargetError,
    InstancePlaceholder,
    VariablePlaceholder,
    decorator_lift_transform,
    get_module_scopes,
    is_module_class,
    lift_direct_transform,
    lift_transform,
    module_class_lift_transform,
    module_fingerprint,
    set_module_scopes,
)
from flaxen.typing import InOutAxis, InOutScanAxis

Target = TypeVar("Target")
C = TypeVar("C")

__all__ = [
    "ModuleT", "TransformTarget", "clean_clone", "decorator_lift_transform_cached",
    "fork_rngs", "lift_transform_cached", "module_class_lift_transform_cached",
    "InstancePlaceholder", "VariablePlaceholder", "add_metadata_axis", "checkpoint", "cond",
    "custom_vjp", "decorator_lift_transform", "fold_rngs", "get_module_scopes", "grad", "jit",
    "jvp", "lift_direct_transform", "lift_transform", "map_variables",
    "module_class_lift_transform", "named_call", "remat", "remat_scan", "scan",
    "set_module_scopes", "switch", "value_and_grad", "vjp", "vmap", "while_loop",
]


def _identity(x: Any) -> Any:
    return x


class _HashableProxy:
    """A hashable stand-in for a Module's configuration (class, fields, name).

    Two proxies are equal when their Modules would trace the same way, so a proxy can be a
    static argument of ``jax.jit`` without re-tracing for an equal Module.

    >>> import flaxen.linen as nn
    >>> _HashableProxy.from_module(nn.Dense(3)) == _HashableProxy.from_module(nn.Dense(3))
    True
    """

    __slots__ = ("module", "key", "_hash")

    def __init__(self, module: Any) -> None:
        self.module = module
        self.key = module_fingerprint(module)
        self._hash = hash(self.key)

    @classmethod
    def from_module(cls, module: Any) -> _HashableProxy:
        return cls(module)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _HashableProxy) and self.key == other.key


# --- mapping transforms --------------------------------------------------------------------

class BroadcastVariableWriteError(errors.FlaxError, ValueError):
    """A variable of a broadcast collection got per-batch-element values inside ``nn.vmap``.

    Also a ``ValueError``, which is what Flax raises (from ``jax.vmap``).
    """


_BATCHED_BROADCAST = re.compile(
    r"at vmap out_axes\[1\](?:\[\d+\])*((?:\['[^']*'\])+), got axis spec None but output "
    r"was batched")


def _checked_vmap(fn: Callable[..., Any], variable_axes: Any, split_rngs: Any,
                  **kwargs: Any) -> Callable[..., Any]:
    """``lift.vmap`` that explains a write to a broadcast collection inside the vmap."""
    vmapped = lift.vmap(fn, variable_axes, split_rngs, **kwargs)
    name = getattr(fn, "__name__", "fn")

    def wrapper(scopes: Any, *args: Any, **kw: Any) -> Any:
        try:
            return vmapped(scopes, *args, **kw)
        except ValueError as e:
            found = _BATCHED_BROADCAST.search(str(e))
            if found is None:
                raise
            path = "/" + "/".join(re.findall(r"\['([^']*)'\]", found.group(1)))
            col = path.split("/")[1]
            raise BroadcastVariableWriteError(
                f"nn.vmap of {name}: variable {path} was written inside the vmap with a "
                f"different value per batch element, but its collection {col!r} is broadcast "
                f"(variable_axes={dict(variable_axes)}). Map it instead, e.g. "
                f"variable_axes={{{col!r}: 0, ...}}, or do not update it inside the vmap."
            ) from None

    return wrapper


def vmap(
    target: Target,
    variable_axes: Mapping[CollectionFilter, InOutAxis] = FrozenDict(),
    split_rngs: Mapping[PRNGSequenceFilter, bool] = FrozenDict(),
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: str | None = None,
    spmd_axis_name: str | None = None,
    metadata_params: Mapping[Any, Any] = {},  # noqa: B006 - Flax's default
    methods: Any = None,
) -> Target:
    """A vectorised version of a Module class or method (lifted ``jax.vmap``).

    Collections in ``variable_axes`` map to an axis (``{'params': 0}``: one set of params
    per slice, stacked on axis 0) or ``None`` (shared); unlisted collections are shared
    and must not be modified inside. ``split_rngs={'params': True}`` gives every slice its
    own key. ``in_axes``/``out_axes``/``axis_size``/``axis_name``/``spmd_axis_name`` are
    ``jax.vmap``'s. Boxed variables (``nn.Partitioned``) get the new axis named by
    ``metadata_params={nn.PARTITION_NAME: name}``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> VmapDense = nn.vmap(nn.Dense, variable_axes={'params': 0},
    ...                     split_rngs={'params': True})
    >>> variables = VmapDense(2).init(jax.random.PRNGKey(0), jnp.ones((3, 4)))
    >>> variables['params']['kernel'].shape
    (3, 4, 2)
    """
    return lift_transform(
        _checked_vmap, target, variable_axes, split_rngs, methods=methods, class_prefix="Vmap",
        in_axes=in_axes, out_axes=out_axes, axis_size=axis_size, axis_name=axis_name,
        spmd_axis_name=spmd_axis_name, metadata_params=metadata_params)


def _checked_scan(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``lift.scan`` whose body must return a ``(carry, ys)`` pair (clear error if not)."""
    name = getattr(fn, "__name__", "body")

    def body(scope: Any, carry: Any, *xs: Any) -> Any:
        out = fn(scope, carry, *xs)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                f"The body of nn.scan ({name}) must return a pair (carry, ys), got "
                f"{type(out).__name__}"
                f"{'' if not isinstance(out, tuple) else f' of length {len(out)}'}"
                ". Return (new_carry, None) when there is no per-step output."
            )
        return out

    body.__name__ = name
    return lift.scan(body, *args, **kwargs)


def scan(
    target: Target,
    variable_axes: Mapping[CollectionFilter, InOutScanAxis] = FrozenDict(),
    variable_broadcast: CollectionFilter = False,
    variable_carry: CollectionFilter = False,
    split_rngs: Mapping[PRNGSequenceFilter, bool] = FrozenDict(),
    in_axes: Any = 0,
    out_axes: Any = 0,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
    data_transform: Callable[..., Any] | None = None,
    metadata_params: Mapping[Any, Any] = {},  # noqa: B006 - Flax's default
    methods: Any = None,
    _split_transpose: bool = False,
    check_constancy_invariants: bool = True,
) -> Target:
    """A loop over a Module class or method (lifted ``jax.lax.scan``).

    The body is ``(module, carry, *xs) -> (carry, ys)``; for a function target, scanning is
    over every argument from the third on. ``variable_axes`` collections are scanned (each
    iteration has its own slice: ``{'params': 0}`` stacks per-layer params),
    ``variable_broadcast`` ones are shared by all iterations, ``variable_carry`` ones are
    updated from one iteration to the next (create them before the loop).
    ``split_rngs={'params': True}`` draws a different key per iteration. Use
    ``flaxen.core.broadcast`` in ``in_axes`` for an input every iteration sees whole.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Block(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x, _):
    ...         return nn.relu(nn.Dense(4)(x)), None
    >>> Stack = nn.scan(Block, variable_axes={'params': 0}, split_rngs={'params': True},
    ...                 length=6)
    >>> variables = Stack().init(jax.random.PRNGKey(0), jnp.ones((2, 4)), None)
    >>> variables['params']['Dense_0']['kernel'].shape
    (6, 4, 4)
    """
    return lift_transform(
        _checked_scan, target, methods=methods, class_prefix="Scan",
        variable_axes=variable_axes, variable_broadcast=variable_broadcast,
        variable_carry=variable_carry, split_rngs=split_rngs, in_axes=in_axes,
        out_axes=out_axes, length=length, reverse=reverse, unroll=unroll,
        _split_transpose=_split_transpose, data_transform=data_transform,
        metadata_params=metadata_params, check_constancy_invariants=check_constancy_invariants)


# --- compilation and rematerialisation --------------------------------------------------------


def _argnums(x: int | Iterable[int]) -> tuple[int, ...]:
    return (x,) if isinstance(x, int) else tuple(x)


def jit(
    target: Target,
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
    static_argnums: int | Iterable[int] = (),
    static_argnames: str | Iterable[str] = (),
    donate_argnums: int | Iterable[int] = (),
    device: Any = None,
    backend: str | None = None,
    methods: Any = None,
) -> Target:
    """A compiled version of a Module class or method (lifted ``jax.jit``).

    ``static_argnums`` count ``self`` as 0 (``__call__(self, x, train)``: ``train`` is 2).
    Traces are cached per Module configuration (class, fields, name), scope position and
    static arguments, so calling the same Module again does not re-trace.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> JitDense = nn.jit(nn.Dense)
    >>> variables = JitDense(3).init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
    >>> JitDense(3).apply(variables, jnp.ones((1, 2))).shape
    (1, 3)
    """
    static_argnums = _argnums(static_argnums)
    donate_argnums = _argnums(donate_argnums)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    return jit_lift_transform(
        target, methods=methods, variables=variables, rngs=rngs,
        static_argnums=static_argnums, static_argnames=tuple(static_argnames),
        donate_argnums=donate_argnums, device=device, backend=backend)


def checkpoint(
    target: Target,
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
    concrete: bool = False,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: Callable[..., bool] | None = None,
    methods: Any = None,
) -> Target:
    """A rematerialised version of a Module class or method (lifted ``jax.checkpoint``).

    Activations inside are recomputed in the backward pass instead of stored.
    ``static_argnums`` count ``self`` as 0; ``policy`` is a ``jax.checkpoint_policies``
    policy; only ``__call__`` is lifted unless ``methods`` says otherwise. Also available
    as ``nn.remat``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> RematDense = nn.remat(nn.Dense)
    >>> variables = RematDense(3).init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
    >>> sorted(variables['params'])
    ['bias', 'kernel']
    """
    static_argnums = _argnums(static_argnums)
    if any(i < 1 for i in static_argnums):
        raise ValueError(
            f"remat static_argnums={static_argnums}: argument 0 is the Module itself (always "
            "static); count the method's arguments from 1, e.g. static_argnums=(2,) for "
            "__call__(self, x, train)."
        )
    return lift_transform(
        lift.checkpoint, target, variables=variables, rngs=rngs, concrete=concrete,
        prevent_cse=prevent_cse, static_argnums=tuple(i - 1 for i in static_argnums),
        policy=policy, methods=methods, class_prefix="Checkpoint")


remat = checkpoint


def remat_scan(
    target: Target,
    lengths: Sequence[int] | None = (),
    policy: Callable[..., bool] | None = None,
    variable_broadcast: CollectionFilter = False,
    variable_carry: CollectionFilter = False,
    variable_axes: Mapping[CollectionFilter, InOutScanAxis] = FrozenDict({True: 0}),
    split_rngs: Mapping[PRNGSequenceFilter, bool] = FrozenDict({True: True}),
) -> Target:
    """``prod(lengths)`` repetitions of a Module as nested, rematerialised scans.

    The body is ``(module, x) -> x``. Memory grows like ``n ** (1 / len(lengths))``; every
    collection gets one leading axis per entry of ``lengths``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> Deep = nn.remat_scan(nn.Dense, lengths=(2, 3))
    >>> variables = Deep(4).init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
    >>> variables['params']['kernel'].shape
    (2, 3, 4, 4)
    """
    return lift_transform(
        lift.remat_scan, target, lengths=lengths, variable_broadcast=variable_broadcast,
        variable_carry=variable_carry, variable_axes=variable_axes, split_rngs=split_rngs,
        policy=policy, class_prefix="Remat_scan")


# --- variables and RNGs -------------------------------------------------------------------------


def map_variables(
    target: Target,
    mapped_collections: CollectionFilter = True,
    trans_in_fn: Callable[..., Any] = _identity,
    trans_out_fn: Callable[..., Any] = _identity,
    init: bool = False,
    mutable: bool = False,
    rngs: PRNGSequenceFilter = True,
    variables: CollectionFilter = True,
    methods: Any = None,
) -> Target:
    """Runs a Module class or method on transformed variables.

    ``trans_in_fn`` maps the ``mapped_collections`` before the Module sees them;
    ``trans_out_fn`` maps updates on the way out, and is only applied when ``init`` or
    ``mutable`` is set. ``init=True`` lets the Module initialise the (un-transformed)
    variables; ``mutable=True`` makes the mapped collections writable.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> Tied = nn.map_variables(nn.Dense, 'params', lambda v: jax.tree_util.tree_map(
    ...     lambda p: p * 0, v), init=True)
    >>> variables = Tied(2).init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    >>> float(Tied(2).apply(variables, jnp.ones((1, 3))).sum())
    0.0
    """
    return lift_transform(
        lift.map_variables, target, mapped_collections, trans_in_fn, trans_out_fn, init,
        mutable, rngs, variables, methods=methods, class_prefix="Map_variables")


def add_metadata_axis(
    target: Target,
    variable_axes: Mapping[CollectionFilter, InOutAxis] = FrozenDict(),
    metadata_params: dict[Any, Any] = {},  # noqa: B006 - Flax's default
) -> Target:
    """Adds (on the way out) and removes (on the way in) an axis in the boxed metadata.

    Mirrors what ``vmap``/``scan`` do to ``nn.Partitioned`` boxes, without mapping any
    value: for each ``collection: axis`` in ``variable_axes`` (``None`` = leave alone),
    the boxes inside see their names without the axis, the stored ones have it.
    """
    for col, axis in dict(variable_axes).items():
        if axis is None:
            continue
        index = cast(int, axis)  # the metadata axis: an int in practice, as Flax passes it
        target = map_variables(
            target, col,
            trans_in_fn=functools.partial(meta.remove_axis, index=index,
                                          params=metadata_params),
            trans_out_fn=functools.partial(meta.add_axis, index=index, params=metadata_params),
            mutable=True)
    return target


def fold_rngs(
    target: Target,
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> Target:
    """Runs a Module class or method with each RNG stream reseeded by one fresh key.

    Keys drawn inside then do not depend on how many were drawn before in the stream.
    """
    return lift_transform(fold_rngs_reseeded, target, variables=variables, rngs=rngs,
                          class_prefix="Fold_rngs")


# --- autodiff ----------------------------------------------------------------------------------


def vjp(
    fn: Callable[..., Any],
    mdl: Any,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Any = (),
    vjp_variables: CollectionFilter = "params",
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
    multi_scope: bool = False,
) -> tuple[Any, ...]:
    """``jax.vjp`` of ``fn(mdl, *primals)``, also with respect to ``mdl``'s variables.

    Returns ``(y, vjp_fn)`` (``(y, vjp_fn, aux)`` with ``has_aux``); ``vjp_fn(ct)`` returns
    ``(variable_cotangents, *primal_cotangents)``, the variables being those of the
    ``vjp_variables`` collections.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         dense = nn.Dense(2)
    ...         dense(x)  # create the params first: vjp differentiates existing ones
    ...         y, bwd = nn.vjp(lambda mdl, x: mdl(x), dense, x)
    ...         params_grad, x_grad = bwd(jnp.ones_like(y))
    ...         return params_grad['params']['kernel'].shape, x_grad.shape
    >>> Foo().init_with_output(jax.random.PRNGKey(0), jnp.ones((1, 3)))[0]
    ((3, 2), (1, 3))
    """
    return lift_direct_transform(
        lift.vjp, (fn,), mdl, *primals, multi_scope=multi_scope, has_aux=has_aux,
        reduce_axes=reduce_axes, vjp_variables=vjp_variables, variables=variables, rngs=rngs)


def value_and_grad(
    fn: Callable[..., Any],
    mdl: Any,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Any = (),
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> tuple[Any, Any]:
    """``(value, primal_grads)`` of a scalar ``fn(mdl, *primals)``.

    Gradients are taken with respect to the primals only (a tuple, one per primal); use
    :func:`vjp` for gradients with respect to variables. With ``has_aux``:
    ``((value, aux), primal_grads)``.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         f = lambda mdl, x: jnp.sum(mdl(x))
    ...         value, (x_grad,) = nn.value_and_grad(f, nn.Dense(2), x)
    ...         return x_grad.shape
    >>> Foo().init_with_output(jax.random.PRNGKey(0), jnp.ones((1, 3)))[0]
    (1, 3)
    """
    out = lift_direct_transform(
        lift.value_and_grad, (fn,), mdl, *primals, multi_scope=True, has_aux=has_aux,
        reduce_axes=reduce_axes, variables=variables, rngs=rngs)
    if has_aux:
        # lift.value_and_grad gives (y, aux, grads), as in Flax; linen nests (y, aux).
        value, aux, grads = out
        return (value, aux), grads
    return out


def grad(
    fn: Callable[..., Any],
    mdl: Any,
    *primals: Any,
    has_aux: bool = False,
    reduce_axes: Any = (),
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> Any:
    """The gradients of :func:`value_and_grad` (``(grads, aux)`` with ``has_aux``)."""
    value, grads = value_and_grad(fn, mdl, *primals, has_aux=has_aux,
                                  reduce_axes=reduce_axes, variables=variables, rngs=rngs)
    if has_aux:
        return grads, value[1]
    return grads


def jvp(
    fn: Callable[..., Any],
    mdl: Any,
    primals: Sequence[Any],
    tangents: Sequence[Any],
    variable_tangents: Mapping[str, Any],
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> tuple[Any, Any]:
    """``(y, y_tangent)``: ``jax.jvp`` of ``fn(mdl, *primals)``.

    ``variable_tangents`` maps collections to tangent trees for ``mdl``'s variables
    (unlisted collections have zero tangent); no tangents come back for variables.
    """
    return lift_direct_transform(
        lift.jvp, (fn,), mdl, primals, tangents, variable_tangents, multi_scope=False,
        variables=variables, rngs=rngs)


def custom_vjp(
    fn: Callable[..., Any],
    forward_fn: Callable[..., Any],
    backward_fn: Callable[..., Any],
    grad_vars: CollectionFilter = "params",
    nondiff_argnums: Sequence[int] = (),
) -> Callable[..., Any]:
    """``fn(mdl, *args)`` with a custom backward pass.

    ``forward_fn(mdl, *args)`` returns ``(y, residuals)``; ``backward_fn(*nondiff_args,
    residuals, y_cotangent)`` returns ``(grad_vars_cotangent, *arg_cotangents)`` (the
    Module and non-differentiable arguments excluded). The scope is not available in the
    backward pass; ``fn`` itself runs when no gradient is taken.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class SignGrad(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         def f(mdl, x):
    ...             return mdl(x)
    ...         def fwd(mdl, x):
    ...             return nn.vjp(f, mdl, x)
    ...         def bwd(vjp_fn, y_t):
    ...             params_t, *inputs_t = vjp_fn(y_t)
    ...             return (jax.tree_util.tree_map(jnp.sign, params_t), *inputs_t)
    ...         return nn.custom_vjp(f, fwd, bwd)(nn.Dense(1), x).sum()
    >>> variables = SignGrad().init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
    >>> g = jax.grad(lambda v: SignGrad().apply(v, jnp.ones((1, 2))))(variables)
    >>> g['params']['Dense_0']['kernel'].tolist()
    [[1.0], [1.0]]
    """
    for f in (fn, forward_fn):
        if is_module_class(f) or not callable(f):
            raise DirectTransformTargetError(f, "custom_vjp")
    return decorator_lift_transform(
        lift.custom_vjp, (fn, forward_fn), backward_fn=backward_fn, grad_vars=grad_vars,
        nondiff_argnums=nondiff_argnums, multi_scope=False)


# --- control flow ---------------------------------------------------------------------------


def while_loop(
    cond_fn: Callable[[Any, C], bool],
    body_fn: Callable[[Any, C], C],
    mdl: Any,
    init: C,
    carry_variables: CollectionFilter = False,
    broadcast_variables: CollectionFilter = True,
    split_rngs: Mapping[PRNGSequenceFilter, bool] = FrozenDict(),
) -> C:
    """``jax.lax.while_loop`` over ``body_fn(mdl, c)`` while ``cond_fn(mdl, c)``.

    ``carry_variables`` may be updated in the body (same shapes); ``broadcast_variables``
    are read-only. Variables cannot be created inside the loop: run the body once before
    it during init.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Doubler(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x):
    ...         return nn.while_loop(lambda mdl, c: c[0] < 3,
    ...                              lambda mdl, c: (c[0] + 1, c[1] * 2), self, (0, x))[1]
    >>> float(Doubler().apply({}, 1.0))
    8.0
    """
    return lift_direct_transform(
        lift.while_loop, (cond_fn, body_fn), mdl, init, carry_variables,
        broadcast_variables, split_rngs)


def _cond_wrapper(t_fn: Callable, f_fn: Callable, scope: Any, pred: Any, *ops: Any,
                  variables: CollectionFilter, rngs: PRNGSequenceFilter) -> Any:
    return lift.cond(pred, t_fn, f_fn, scope, *ops, variables=variables, rngs=rngs)


_cond_wrapper.__name__ = "cond"  # named in error messages


def cond(
    pred: Any,
    true_fun: Callable[..., C],
    false_fun: Callable[..., C],
    mdl: Any,
    *operands: Any,
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> C:
    """``jax.lax.cond`` over ``branch(mdl, *operands)``.

    Both branches must return the same structure and create/update variables of the same
    structure (create submodules in both, or before the ``cond``).

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     def setup(self):
    ...         self.dense = nn.Dense(2)
    ...     def __call__(self, x, pred):
    ...         # reach submodules through the Module argument, never by closure
    ...         return nn.cond(pred, lambda mdl, x: mdl.dense(x),
    ...                        lambda mdl, x: -mdl.dense(x), self, x)
    >>> variables = Foo().init(jax.random.PRNGKey(0), jnp.ones((1, 3)), True)
    >>> Foo().apply(variables, jnp.ones((1, 3)), False).shape
    (1, 2)
    """
    return lift_direct_transform(
        _cond_wrapper, (true_fun, false_fun), mdl, pred, *operands, variables=variables,
        rngs=rngs)


def switch(
    index: Any,
    branches: Sequence[Callable[..., C]],
    mdl: Any,
    *operands: Any,
    variables: CollectionFilter = True,
    rngs: PRNGSequenceFilter = True,
) -> C:
    """``jax.lax.switch`` over ``branches[index](mdl, *operands)``.

    All branches must return the same structure and create/update variables of the same
    structure; for branches with different submodules, run every branch during init.

    >>> import jax, jax.numpy as jnp
    >>> import flaxen.linen as nn
    >>> class Foo(nn.Module):
    ...     @nn.compact
    ...     def __call__(self, x, i):
    ...         return nn.switch(i, [lambda m, x: x + 1, lambda m, x: x * 10], self, x)
    >>> float(Foo().apply({}, 2.0, 1))
    20.0
    """
    n = len(branches)

    def wrapper(*args: Any, variables: CollectionFilter, rngs: PRNGSequenceFilter) -> Any:
        fns, (scope, idx, *ops) = args[:n], args[n:]
        return lift.switch(idx, fns, scope, *ops, variables=variables, rngs=rngs)

    wrapper.__name__ = "switch"
    return lift_direct_transform(wrapper, tuple(branches), mdl, index, *operands,
                                 variables=variables, rngs=rngs)

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen import core, serialization, struct, traceback_util  # noqa: E402, F401
from flaxen.core._rng import LazyRng  # noqa: E402, F401
from flaxen.core.scope import Scope, Variable  # noqa: E402, F401
from flaxen.ids import FlaxId  # noqa: E402, F401
from flaxen.linen import module as linen_module  # noqa: E402, F401
from flaxen.linen.module import Module, wrap_method_once  # noqa: E402, F401
