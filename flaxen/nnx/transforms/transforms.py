"""Today's general transforms (``eval_shape``, ``checkify``, ``make_jaxpr``, ``cond``,
``switch``; ``flax.nnx.transforms.transforms``). The checks every transform shares (modes,
bound methods, prefix arguments) are in :mod:`flaxen.nnx.transforms._common`.

Each transform takes ``graph=`` / ``graph_updates=`` (``None``: the defaults of
``nnx.set_graph_mode`` / ``nnx.set_graph_updates``). ``graph=True, graph_updates=True`` is
the graph mode of :mod:`flaxen.nnx._lift` (structure changes written back); the other
combinations take the primitive's functional branch and write back Variable values only.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
>>> abstract.kernel.value.shape
(2, 3)
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import inspect
import typing as tp

import jax
from jax.experimental import checkify as _checkify

from flaxen import traceback_util
from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift
from flaxen.nnx.proxy_caller import CallableProxy, DelayedAccessor
from flaxen.nnx.spmd import _abstract_value, _set_raw
from flaxen.nnx.transforms import _functional
from flaxen.nnx.transforms._branches import cond, switch
from flaxen.nnx.transforms._callable_types import (
    CheckifyFn,
    SimpleCheckifyFn,
    SimpleCondFn,
    SimpleEvalShapeFn,
    SimpleMakeJaxprFn,
)
from flaxen.nnx.transforms._common import (
    PrefixMapping,
    check_prefix,
    resolve_bound,
    resolve_modes,
)
from flaxen.nnx.variablelib import Variable

__all__ = ["check_prefix", "checkify", "CheckifyFn", "cond", "eval_shape", "make_jaxpr",
    "PrefixMapping", "resolve_bound", "resolve_modes", "SimpleCheckifyFn", "SimpleCondFn",
    "SimpleEvalShapeFn", "SimpleMakeJaxprFn", "switch"]


_MISSING: tp.Any = object()


# -- eval_shape -------------------------------------------------------------------------------

@traceback_util.api_boundary
def eval_shape(f: tp.Callable[..., tp.Any], *args: tp.Any, graph: bool | None = None,
               graph_updates: bool | None = None, **kwargs: tp.Any) -> tp.Any:
    """Like ``jax.eval_shape``; graph nodes in the output hold ``ShapeDtypeStruct`` values.

    The inputs are never updated.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> nnx.eval_shape(lambda m, x: m(x), m, jnp.ones((4, 2))).shape
    (4, 3)
    """
    resolve_bound(f, "eval_shape")
    graph, graph_updates = resolve_modes(graph, graph_updates)
    lift = _lift.Lift(args, kwargs)
    if not (graph and graph_updates):  # both functional modes: each input object once
        _functional.check_no_shared(lift.static, "eval_shape")
    inner = lift.pure(f, functional=None if graph and graph_updates else "eval_shape")

    def pure(values: list, leaves: list) -> tuple:
        out = inner(values, leaves)
        return _functional.unref(out, ())[0] if _functional.has_refs(*out) else out

    values, out_leaves = jax.eval_shape(pure, lift.values, lift.leaves)
    out = lift.finish(lift.out, values, out_leaves,  # type: ignore[arg-type]  # traced
                      update_inputs=False)
    if graph and graph_updates and lift.built:
        _shard_abstract(lift.built.values())
    return out


def _shard_abstract(objects: tp.Iterable[tp.Any]) -> None:
    """Gives each abstract Variable among ``objects`` (all fresh, built by eval_shape) the
    ``NamedSharding`` its ``out_sharding`` names (``P()`` without) on its ``mesh`` metadata
    or the mesh set by ``jax.set_mesh``, as Flax's eval_shape does; nothing without a mesh,
    and nothing where JAX already gave a sharding (an Explicit mesh)."""
    for var in objects:
        if isinstance(var, Variable):
            new = _abstract_value(var, unannotated=True)
            if new is not None:
                _set_raw(var, new)


# -- checkify ---------------------------------------------------------------------------------

def checkify(f: tp.Callable[..., tp.Any], errors: frozenset = _checkify.user_checks,
             graph: bool | None = None, graph_updates: bool | None = None
             ) -> tp.Callable[..., tuple[tp.Any, tp.Any]]:
    """Lifted ``jax.experimental.checkify.checkify``: returns ``(error, out)`` and writes
    the function's Variable updates back.

    >>> import jax.numpy as jnp
    >>> from jax.experimental import checkify as jc
    >>> from flaxen import nnx
    >>> err, out = nnx.checkify(lambda x: jnp.log(x), errors=jc.float_checks)(jnp.array(-1.))
    >>> err.get() is not None
    True
    """
    resolve_bound(f, "checkify")
    g, gu = resolve_modes(graph, graph_updates)  # when applied, as in Flax

    @traceback_util.api_boundary
    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tuple[tp.Any, tp.Any]:
        lift = _lift.Lift(args, kwargs, check=g and gu)
        if not g:
            _functional.check_no_shared(lift.static, "checkify")
        pure = lift.pure(f, functional=None if g and gu else "checkify")
        err, (values, out_leaves) = _checkify.checkify(pure, errors=errors)(
            lift.values, lift.leaves)
        return err, lift.finish(lift.out, values, out_leaves)  # type: ignore[arg-type]  # traced

    return wrapper


# -- make_jaxpr -------------------------------------------------------------------------------

def make_jaxpr(f: tp.Callable[..., tp.Any] = _MISSING, *, graph: bool | None = None,
               graph_updates: bool | None = None, static_argnums: int | tp.Iterable[int] = (),
               **jax_kwargs: tp.Any) -> tp.Callable[..., tp.Any]:
    """Lifted ``jax.make_jaxpr`` (functional modes only): the inputs are not updated.

    ``static_argnums`` positions are passed to ``f`` as Python values (not traced); without
    ``f``, a decorator.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> jaxpr = nnx.make_jaxpr(lambda m, x: m(x), graph_updates=False)(m, jnp.ones((1, 2)))
    >>> 'dot_general' in str(jaxpr)
    True
    >>> @nnx.make_jaxpr(graph_updates=False, static_argnums=1)
    ... def scale(x, k):
    ...     return x * k
    >>> 'mul' in str(scale(jnp.ones(2), 3))
    True
    """
    if f is _MISSING:
        return functools.partial(make_jaxpr, graph=graph, graph_updates=graph_updates,
                                 static_argnums=static_argnums, **jax_kwargs)
    resolve_bound(f, "make_jaxpr")
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(f)
    def wrapper(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        g, gu = resolve_modes(graph, graph_updates)
        if g and gu:
            raise NNXTransformError(
                "", "nnx.make_jaxpr does not support graph_updates=True.",
                "Pass graph_updates=False (Variable updates are traced, not applied).")
        fun = f
        if statics:
            n = len(args)
            pos = sorted({i % n if -n <= i < n else i for i in statics})
            if any(i >= n for i in pos):
                raise NNXTransformError(
                    "", f"nnx.make_jaxpr: static_argnums {statics} out of range for "
                    f"{n} positional arguments", "Pass an index of a positional argument.")
            static_vals = {i: args[i] for i in pos}
            args = tuple(a for i, a in enumerate(args) if i not in static_vals)

            def fun(*dyn: tp.Any, **kw: tp.Any) -> tp.Any:
                it = iter(dyn)
                full = [static_vals[i] if i in static_vals else next(it) for i in range(n)]
                return f(*full, **kw)

        lift = _lift.Lift(args, kwargs)
        if not g:
            _functional.check_no_shared(lift.static, "make_jaxpr")

        inner = lift.pure(fun, functional="make_jaxpr")

        def pure(values: list, leaves: list) -> tuple:
            # the traced outputs: the input Variables' new values, the output's node values,
            # the output's other leaves
            new_values, out_leaves = inner(values, leaves)
            n_in = lift.out.n_input_leaves  # type: ignore[union-attr]  # set by inner
            return new_values[:n_in], new_values[n_in:], out_leaves

        return jax.make_jaxpr(pure, **jax_kwargs)(lift.values, lift.leaves)

    return wrapper


# -- Flax 0.12.8's type variables and aliases of nnx.transforms.transforms ---------------------
from flaxen.nnx.module import Module as _Module  # noqa: E402

A = tp.TypeVar("A")
B = tp.TypeVar("B")
C = tp.TypeVar("C")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
G = tp.TypeVar("G", bound=tp.Callable[..., tp.Any])
M = tp.TypeVar("M", bound=_Module)
MA = tp.TypeVar("MA", bound=_Module)
N = tp.TypeVar("N", bound=_Module)
StrInt = tp.TypeVar("StrInt", str, int)
AxisName = tp.Hashable
Leaves = list[tp.Any]
Index = int
from flaxen.typing import Leaf as Leaf  # noqa: E402  (Flax's module imports it from flax.typing)


def _resolve_bound_callable(
    f: tp.Callable[..., tp.Any],
) -> tuple[tp.Callable[..., tp.Any], tp.Any | None, bool]:
    """Splits a Module's bound method, possibly inside ``functools.partial`` layers, into
    ``(unbound_fn, module, True)``; any other callable gives ``(f, None, False)``.

    Flax's private helper (code that builds its own transform on NNX imports it): a bound
    method of a Module must be lifted with its ``self`` as an argument, not captured. The
    partial layers are rebuilt around the unbound function, innermost first (their positional
    arguments thus stay ahead of everything else); only a method bound to an ``nnx.Module``
    counts.

    >>> from flaxen import nnx
    >>> class Doubler(nnx.Module):
    ...     def run(self, x):
    ...         return 2 * x
    >>> m = Doubler()
    >>> fn, bound, was_bound = _resolve_bound_callable(functools.partial(m.run, x=3))
    >>> bound is m, was_bound, fn(m)
    (True, True, 6)
    """
    layers: list[functools.partial] = []
    inner: tp.Any = f
    while isinstance(inner, functools.partial):
        layers.append(inner)
        inner = inner.func
    owner = getattr(inner, "__self__", None)
    was_bound = inspect.ismethod(inner) and isinstance(owner, _Module)
    if was_bound:
        inner = inner.__func__
    # rebuilt even when nothing was unbound, as Flax does: the caller gets fresh partials
    for layer in reversed(layers):
        inner = functools.partial(inner, *layer.args, **(layer.keywords or {}))
    return inner, (owner if was_bound else None), was_bound



def resolve_kwargs(fun: tp.Callable[..., tp.Any] = _MISSING, args: tuple = _MISSING,
                   kwargs: dict[str, tp.Any] = _MISSING) -> tp.Any:
    """``args`` with ``kwargs`` moved to their positions in ``fun``'s signature (defaults
    filled in); called with no argument, a decorator that makes a function take keywords this way.

    Transforms whose per-argument axes are positional use it so keyword arguments get axes too.

    >>> def f(x, y=2):
    ...     return x + y
    >>> resolve_kwargs(f, (1,), {"y": 5})
    (1, 5)
    >>> resolve_kwargs()(f)(1, y=10)
    11
    """
    if fun is _MISSING:
        def decorator(f: F) -> F:
            @functools.wraps(f)
            def positional(*a: tp.Any, **k: tp.Any) -> tp.Any:
                return f(*_resolve(f, a, k))

            return tp.cast(F, positional)

        return decorator
    if args is _MISSING or kwargs is _MISSING:
        raise ValueError("resolve_kwargs(fun, args, kwargs): args and kwargs must be provided "
                         "with fun (got only part of them); call resolve_kwargs() without "
                         "arguments for the decorator form.")
    return _resolve(fun, args, kwargs)


from flaxen.nnx.transforms._common import resolve_kwargs as _resolve  # noqa: E402

# -- lifted modules and abstract Variable values ------------------------------------------------


class LiftedModule(tp.Generic[M], _Module):
    """A Module that runs a wrapped submodule through a transform.

    Subclasses give ``_submodule`` (the wrapped Module) and ``_call(accessor, *args)``,
    which applies the transform to ``accessor(submodule)(*args)``. ``m(x)`` calls the
    submodule itself; ``m.call.method(x)`` calls one of its methods (through nested
    LiftedModules too: the accessor reaches the innermost submodule's method).

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> class Doubled(LiftedModule):
    ...     def __init__(self, inner):
    ...         self.inner = inner
    ...     @property
    ...     def _submodule(self):
    ...         return self.inner
    ...     def _call(self, accessor, *args):
    ...         return accessor(self.inner)(*args) * 2
    >>> m = Doubled(nnx.Linear(2, 1, use_bias=False, rngs=nnx.Rngs(0)))
    >>> bool(jnp.allclose(m(jnp.ones((1, 2))), 2 * m.inner(jnp.ones((1, 2)))))
    True
    """

    @abc.abstractmethod
    def _call(self, accessor: DelayedAccessor, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        ...

    @property
    @abc.abstractmethod
    def _submodule(self) -> M:
        ...

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return self.call(*args, **kwargs)

    @property
    def call(self) -> tp.Any:
        """A proxy: ``m.call(x)`` calls the submodule, ``m.call.f(x)`` its method ``f``."""
        proxy = CallableProxy(self._call)
        module: tp.Any = self
        # each nested LiftedModule is reached through its own `.call` proxy
        while isinstance(module._submodule, LiftedModule):
            module = module._submodule
            proxy = proxy.call
        return proxy


@dataclasses.dataclass(frozen=True)
class ValueMetadata:
    """A Variable taken apart for a trip through a JAX transform: its type, its value and
    its metadata; :meth:`from_variable` / :meth:`to_variable` convert. It is a pytree whose
    only leaf is ``value`` (so ``jax.eval_shape`` turns it into a shape description).

    >>> import jax, jax.numpy as jnp
    >>> from flaxen import nnx
    >>> vm = ValueMetadata.from_variable(nnx.Param(jnp.ones(3)))
    >>> abstract = jax.eval_shape(lambda v: v, vm)
    >>> abstract.var_type.__name__, abstract.value.shape
    ('Param', (3,))
    >>> type(vm.to_variable()).__name__
    'Param'
    """

    var_type: type[Variable]
    value: tp.Any
    metadata: dict[str, tp.Any]

    @classmethod
    def from_variable(cls, variable: Variable) -> ValueMetadata:
        """Type, raw value and metadata of ``variable``."""
        return cls(type(variable), variable.get_raw_value(), dict(variable.get_metadata()))

    def to_variable(self) -> Variable:
        """A new Variable of ``var_type`` holding ``value`` with ``metadata``."""
        return self.var_type.from_metadata(self.value, dict(self.metadata))


jax.tree_util.register_pytree_node(
    ValueMetadata,
    lambda v: ((v.value,), (v.var_type, tuple(sorted(v.metadata.items(), key=lambda kv: kv[0])))),
    lambda aux, ch: ValueMetadata(aux[0], ch[0], dict(aux[1])),
)
