"""Lifted-transform helpers Flax exposes from ``flax.linen.transforms``: the cached
(retrace-free) lifting that ``nn.jit`` uses, ``fork_rngs`` and ``clean_clone``.

The cached lifting passes the Module to the core transform as a static argument that is
equal for equal configurations (class, fields, name, scope position), so a second call of
an equal Module reuses the trace.

>>> import jax, jax.numpy as jnp
>>> import flaxen.linen as nn
>>> from flaxen.core import lift
>>> JitDense = lift_transform_cached(lift.jit, nn.Dense)
>>> v = JitDense(2).init(jax.random.key(0), jnp.ones((1, 3)))
>>> JitDense(2).apply(v, jnp.ones((1, 3))).shape
(1, 2)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, Union

from flaxen import errors
from flaxen.core._rng import LazyRng
from flaxen.linen._module import Module
from flaxen.linen._transform_jit import jit_lift_transform
from flaxen.linen._transform_wrap import is_module_class

TransformTarget = Union[type[Module], Callable[..., Any]]  # noqa: UP007 (Flax's alias form)
ModuleT = TypeVar("ModuleT", bound=Module)


def clean_clone(x: Any) -> Any:
    """Detaches ``x`` (a Module) and its children from their scopes, in place; other values
    are returned as they are.

    >>> import flaxen.linen as nn
    >>> clean_clone(nn.Dense(2)).scope is None
    True
    """
    if isinstance(x, Module):
        st = x.__dict__.get("_state")
        if st is not None:
            st.children = {k: clean_clone(v) for k, v in st.children.items()}
        x.__dict__["scope"] = None
    return x


@contextlib.contextmanager
def fork_rngs(module: Module) -> Iterator[None]:
    """Inside the block, each RNG stream of ``module`` starts from a key drawn from it.

    Keys drawn inside differ from those drawn outside, and the block draws one key per
    stream from the outer streams. An unbound Module is left alone.

    >>> import jax
    >>> import flaxen.linen as nn
    >>> class M(nn.Module):
    ...     def __call__(self):
    ...         with fork_rngs(self):
    ...             inner = self.make_rng('params')
    ...         return inner, self.make_rng('params')
    >>> a, b = M().apply({}, rngs={'params': jax.random.key(0)})
    >>> bool((jax.random.key_data(a) != jax.random.key_data(b)).any())
    True
    """
    scope = module.scope
    if scope is None:
        yield
        return
    saved = dict(scope.rngs)
    scope.rngs = {name: LazyRng.create(module.make_rng(name)) for name in saved}
    try:
        yield
    finally:
        scope.rngs = saved


def _check_no_args(trafo_args: tuple) -> None:
    if trafo_args:
        raise TypeError(
            f"cached lifted transforms take keyword arguments only (got positional "
            f"{trafo_args!r}); pass them by name, e.g. static_argnums=(1,)."
        )


def module_class_lift_transform_cached(transform: Callable[..., Any], module_class: Any,
                                       methods: Any = None, **trafo_kwargs: Any) -> Any:
    """A subclass of ``module_class`` whose ``methods`` (default ``__call__``) run through
    ``transform`` (``lift.jit`` or one with its static/donate arguments), one trace per
    Module configuration."""
    return jit_lift_transform(module_class, methods, transform, **trafo_kwargs)


def decorator_lift_transform_cached(transform: Callable[..., Any], class_fn: Any,
                                    **trafo_kwargs: Any) -> Callable[..., Any]:
    """A Module method that runs ``class_fn`` through ``transform``, one trace per Module
    configuration (the method decorator form of :func:`lift_transform_cached`)."""
    if isinstance(class_fn, tuple):
        if len(class_fn) != 1:
            raise NotImplementedError(
                "cached lifted transforms take one method; got a tuple of "
                f"{len(class_fn)}. Transform each method separately."
            )
        class_fn = class_fn[0]
    return jit_lift_transform(class_fn, None, transform, **trafo_kwargs)


def lift_transform_cached(transform: Callable[..., Any], target: Any, *trafo_args: Any,
                          methods: Any = None, **trafo_kwargs: Any) -> Any:
    """Lifts core ``transform`` onto a Module class (``methods`` chooses which methods) or
    a Module method, reusing traces between calls of equally configured Modules."""
    _check_no_args(trafo_args)
    if is_module_class(target):
        return module_class_lift_transform_cached(transform, target, methods=methods,
                                                  **trafo_kwargs)
    if callable(target) and not isinstance(target, Module):
        return decorator_lift_transform_cached(transform, target, **trafo_kwargs)
    raise errors.TransformTargetError(target)


__all__ = [
    "ModuleT", "TransformTarget", "clean_clone", "decorator_lift_transform_cached",
    "fork_rngs", "lift_transform_cached", "module_class_lift_transform_cached",
]
