"""Today's NNX/Linen wrappers: ``ToNNX`` / ``lazy_init`` and ``ToLinen`` / ``to_linen``.

- ``ToNNX(linen_module, rngs=...)`` is an NNX module running a Linen module. Its variables are
  plain attributes named after their Linen paths (``model.kernel``, ``model.dot['w']``), each
  a Variable of its collection's type; they are created by :func:`lazy_init` (``init`` on the
  given inputs) and used and updated by every later call (``apply``; ``mutable=`` as Linen's,
  else the mutability of the enclosing bridge/Linen module).
- ``ToLinen(nnx_class, args=, kwargs=)`` / ``to_linen(nnx_class, *args, **kwargs)`` is a
  Linen module building the NNX module in ``init`` (``rngs`` from the Linen RNG streams) and
  rebuilding it from the variables in ``apply``; Variables go to the collection of their type
  (:mod:`flaxen.nnx._variable_names`), with metadata boxed as :class:`~.variables.NNXMeta`.
- ``functional(nnx_class)(*args)`` gives ``init(rngs=)`` / ``apply(state)`` functions.

>>> import jax, jax.numpy as jnp
>>> from flaxen import linen as nn, nnx
>>> model = nnx.bridge.lazy_init(nnx.bridge.ToNNX(nn.Dense(3), rngs=nnx.Rngs(0)),
...                              jnp.ones((1, 2)))
>>> model.kernel.shape, model(jnp.ones((4, 2))).shape
((2, 3), (4, 3))
>>> layer = nnx.bridge.to_linen(nnx.Linear, 2, 3)
>>> variables = layer.init(jax.random.key(0), jnp.ones((1, 2)))
>>> layer.apply(variables, jnp.ones((4, 2))).shape
(4, 3)
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import typing as tp
import warnings
from collections.abc import Mapping

import jax

from flaxen import linen
from flaxen.core import meta
from flaxen.core.frozen_dict import FrozenDict
from flaxen.nnx import _graph_ops as graphlib
from flaxen.nnx._variable_names import variable_name_from_type
from flaxen.nnx.bridge import variables as bv
from flaxen.nnx.module import Module
from flaxen.nnx.pytreelib import chains_bookkeeping
from flaxen.nnx.rnglib import Rngs, RngState
from flaxen.nnx.variablelib import Variable

M = tp.TypeVar("M", bound=Module)


# -- functional --------------------------------------------------------------------------------


@dataclasses.dataclass
class Functional(tp.Generic[M]):
    """``init`` builds the module and returns its state; ``apply(*states)`` calls it."""

    module_type: type[M]
    graphdef: tp.Any
    args: tuple
    kwargs: dict

    def init(self, *, rngs: Rngs | None = None) -> tp.Any:
        extra = {} if rngs is None else {"rngs": rngs}
        module = self.module_type(*self.args, **self.kwargs, **extra)
        self.graphdef, state = graphlib.split(module)
        return state

    def apply(self, *states: tp.Any) -> tp.Any:
        if self.graphdef is None:
            raise ValueError("Functional.apply: call init() first (it records the graphdef).")
        return self.graphdef.apply(*states)


def functional(cls: type[M]) -> tp.Callable[..., Functional[M]]:
    """``functional(nnx.Linear)(2, 3)`` -> a :class:`Functional` for ``nnx.Linear(2, 3)``."""

    def make(*args: tp.Any, **kwargs: tp.Any) -> Functional[M]:
        return Functional(cls, None, args, kwargs)

    return make


# -- ToNNX -------------------------------------------------------------------------------------


class _LazyInit(threading.local):
    def __init__(self) -> None:
        self.roots: list[int] = []


_LAZY = _LazyInit()


def _initializing(module: Module) -> bool:
    # every ToNNX called while a lazy_init runs initializes (also copies made by transforms),
    # and so does one inside a bridge.Module being initialized
    if _LAZY.roots:
        return True
    from flaxen.nnx.bridge.module import MODULE_CONTEXT

    return bool(MODULE_CONTEXT.initializing and MODULE_CONTEXT.initializing[-1])


def lazy_init(fn: tp.Any, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
    """Calls ``fn`` (an NNX module, or a method of one) once with initialization on, so every
    ``ToNNX`` inside creates its variables from the inputs it sees; returns ``fn``."""
    root: tp.Any
    if isinstance(fn, Module):
        root = fn
    else:
        root = getattr(fn, "__self__", None)
        if not isinstance(root, Module):
            raise ValueError(
                f"lazy_init expects an nnx.Module or a method of one, got {fn!r}; pass the "
                "module (or e.g. model.method) and the sample inputs.")
    from flaxen.nnx import module as module_lib

    flag = getattr(module_lib, "_INITIALIZING", None)
    before = flag[0] if flag is not None else None
    _LAZY.roots.append(id(root))
    if flag is not None:
        flag[0] = True
    try:
        fn(*args, **kwargs)
    finally:
        _LAZY.roots.pop()
        if flag is not None:
            flag[0] = before
    return fn


def current_linen_module() -> linen.Module | None:
    """The Linen module whose method is running, if any."""
    from flaxen.linen._state import context

    return context.module_stack[-1] if context.module_stack else None


def _rng_dict(rngs: tp.Any) -> dict[str, tp.Any]:
    if isinstance(rngs, Rngs):
        out = {}
        for name in list(_stream_names(rngs)):
            out[name] = rngs[name]()
    elif isinstance(rngs, jax.Array):
        out = {"params": rngs}
    elif isinstance(rngs, Mapping):
        out = dict(rngs)
    else:
        out = {}
    if "params" not in out and "default" in out:
        out["params"] = out.pop("default")
    return out


def _stream_names(rngs: Rngs) -> tp.Iterable[str]:
    items = getattr(rngs, "items", None)
    if callable(items):
        return [k for k, _ in items()]
    return [k for k in vars(rngs) if not k.startswith("_")]


def _merge_into(old: tp.Any, new: tp.Any) -> tp.Any:
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for k, v in new.items():
            merged[k] = _merge_into(merged.get(k), v)
        return merged
    return new


# today's Module is a JAX pytree with data/static checks; the wrappers opt out as Flax's do
NO_PYTREE: dict[str, bool] = {"pytree": False} if hasattr(Module, "_pytree__is_pytree") else {}


class ToNNX(Module, **NO_PYTREE):
    """An NNX module running a Linen module (see the module docstring).

    >>> import jax.numpy as jnp
    >>> from flaxen import linen as nn, nnx
    >>> model = nnx.bridge.ToNNX(nn.Dense(4), rngs=nnx.Rngs(0)).lazy_init(jnp.ones((1, 3)))
    >>> model.kernel.shape
    (3, 4)
    """

    def __init__(self, module: linen.Module, rngs: Rngs | jax.Array | None = None) -> None:
        self.to_nnx__module = module
        if isinstance(rngs, jax.Array):
            rngs = Rngs(params=rngs)
        elif isinstance(rngs, Rngs):
            fork = getattr(rngs, "fork", None)
            rngs = fork() if callable(fork) else rngs
        self.to_nnx__rngs = rngs

    @property
    def module(self) -> linen.Module:
        """The wrapped Linen module."""
        return self.to_nnx__module

    @property
    def rngs(self) -> Rngs | None:
        """The ``Rngs`` the Linen module draws from when called without ``rngs=``."""
        return self.to_nnx__rngs

    def lazy_init(self, *args: tp.Any, **kwargs: tp.Any) -> ToNNX:
        """``lazy_init(self, *args, **kwargs)``."""
        return lazy_init(self, *args, **kwargs)

    @chains_bookkeeping
    def __getattr__(self, name: str) -> tp.Any:
        if name.startswith("_") or name.startswith("to_nnx__"):
            parent = getattr(super(), "__getattr__", None)
            if parent is not None:
                return parent(name)
            raise AttributeError(name)
        module = self.__dict__.get("to_nnx__module")
        method = getattr(type(module), name, None) if module is not None else None
        if callable(method) and not isinstance(method, type):
            bound = functools.partial(self.__call__, method=method)
            bound.__self__ = self  # type: ignore[attr-defined]
            return bound
        raise AttributeError(
            f"{type(self).__name__} has no attribute {name!r} (nor does the wrapped "
            f"{type(module).__name__} have a method of that name); call lazy_init first if "
            "it is a variable")

    def _linen_variables(self) -> dict:
        attrs = {k: v for k, v in self.__dict__.items()
                 if not k.startswith("to_nnx__") and not k.startswith("_")
                 and (isinstance(v, (Variable, dict)))}
        return bv.nnx_attrs_to_linen_vars(attrs)

    def __call__(self, *args: tp.Any, rngs: tp.Any = None, method: tp.Any = None,
                 mutable: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        streams = _rng_dict(self.to_nnx__rngs if rngs is None else rngs)
        module = self.to_nnx__module
        if _initializing(self):
            out, updates = module.init_with_output(streams, *args, method=method, **kwargs)
        else:
            if mutable is None:
                mutable = _enclosing_mutable()
            out = module.apply(self._linen_variables(), *args, rngs=streams, method=method,
                               mutable=mutable, **kwargs)
            if mutable is not False:
                out, updates = out
            else:
                updates = None
        if updates:
            for name, value in bv.linen_vars_to_nnx_attrs(updates).items():
                old = self.__dict__.get(name)
                setattr(self, name, _merge_into(old, value) if isinstance(old, dict)
                        else value)
        return out


def _enclosing_mutable() -> tp.Any:
    from flaxen.nnx.bridge.module import current_module

    bridge_module = current_module()
    if bridge_module is not None and bridge_module.scope is not None:
        return bridge_module.scope.mutable
    linen_module = current_linen_module()
    if linen_module is not None and linen_module.scope is not None:
        return linen_module.scope.mutable
    return False


# -- ToLinen -----------------------------------------------------------------------------------


def linen_rngs_dict(linen_module: linen.Module, add_default: bool = False) -> dict[str, tp.Any]:
    """One fresh key per RNG stream the Linen module was given (plus a ``default`` placeholder
    with ``add_default``); call inside a Linen method."""
    if linen_module.scope is None:
        raise ValueError("linen_rngs_dict() must be called inside a bound Linen module method.")
    rngs: dict[str, tp.Any] = {name: linen_module.make_rng(name)
                               for name in linen_module.scope.rngs.keys()}
    if add_default and "default" not in rngs:
        rngs["default"] = 0
    return rngs


def _module_method(module: tp.Any, method: tp.Any) -> tp.Callable[..., tp.Any]:
    if method is None:
        method = "__call__"
    if isinstance(method, str):
        name = method
        method = getattr(type(module), name, None)
        if not callable(method):
            raise TypeError(f"'{type(module).__name__}.{name}' must be a callable, got "
                            f"{type(method).__name__}.")
    if not callable(method):
        raise TypeError(f"'{method}' must be a callable, got {type(method).__name__}.")
    return method


def _set_raw(var: Variable, value: tp.Any) -> None:
    setter = getattr(var, "set_raw_value", None)
    if callable(setter):
        setter(value)
    else:
        object.__setattr__(var, "raw_value", value)


def _flat_linen(variables: tp.Mapping) -> dict[tuple, tp.Any]:
    flat: dict[tuple, tp.Any] = {}

    def walk(node: tp.Any, path: tuple) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, (*path, k))
        else:
            flat[path] = node

    for col, tree in variables.items():
        walk(tree, (col,))
    return flat


class ToLinen(linen.Module):
    """A Linen module around an NNX module class (see the module docstring)."""

    nnx_class: tp.Callable[..., Module]
    args: tp.Sequence = ()
    kwargs: tp.Mapping[str, tp.Any] = FrozenDict({})  # noqa: RUF009 - immutable default
    skip_rng: bool = False
    metadata_fn: tp.Callable[[Variable], tp.Any] | None = bv.to_linen_var

    def _build(self) -> Module:
        kwargs = dict(self.kwargs)
        if not self.skip_rng:
            kwargs["rngs"] = Rngs(**linen_rngs_dict(self, add_default=not self.is_initializing()))
        return self.nnx_class(*self.args, **kwargs)

    @linen.compact
    def __call__(self, *args: tp.Any, nnx_method: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        module = self._build()
        if self.is_initializing():
            self._update_variables(module)
            return _module_method(module, nnx_method)(module, *args, **kwargs)
        flat = _flat_linen(self.variables)
        known = set()
        for path, var in graphlib.iter_graph(module):
            if not isinstance(var, Variable) or isinstance(var, RngState):
                continue
            key = (variable_name_from_type(type(var), allow_register=True), *path)
            known.add(key)
            if key in flat:
                leaf = flat[key]
                _set_raw(var, leaf.unbox() if isinstance(leaf, meta.AxisMetadata) else leaf)
        unknown = [k for k in flat if k not in known]
        if unknown:
            warnings.warn(
                "Found unknown module paths in incoming state:"
                + "".join(f"\n  - {'/'.join(map(str, k[1:]))}" for k in unknown),
                stacklevel=2)
        out = _module_method(module, nnx_method)(module, *args, **kwargs)
        self._update_variables(module)
        return out

    def __getattr__(self, name: str) -> tp.Any:
        if name.startswith("_"):
            return super().__getattr__(name)  # type: ignore[misc]
        kwargs = self.__dict__.get("kwargs")
        if kwargs is not None and name in kwargs:
            return kwargs[name]
        nnx_class = self.__dict__.get("nnx_class")
        method = getattr(nnx_class, name, None) if nnx_class is not None else None
        if callable(method) and not isinstance(method, type):
            bound = functools.partial(self.__call__, nnx_method=method)
            bound.__self__ = self  # type: ignore[attr-defined]
            return bound
        return super().__getattr__(name)  # type: ignore[misc]

    def _update_variables(self, module: Module) -> None:
        """Stores the NNX module's Variables (RNG state excepted) in Linen collections."""
        groups: dict[str, dict] = {}
        for path, var in graphlib.iter_graph(module):
            if not isinstance(var, Variable) or isinstance(var, RngState):
                continue
            col = variable_name_from_type(type(var), allow_register=True)
            leaf = self.metadata_fn(var) if self.metadata_fn is not None else bv._var_value(var)
            node = groups.setdefault(col, {})
            for k in path[:-1]:
                node = node.setdefault(str(k) if not isinstance(k, str) else k, {})
            node[path[-1] if isinstance(path[-1], str) else str(path[-1])] = leaf
        for col, tree in groups.items():
            if self.is_mutable_collection(col):
                for k, v in tree.items():
                    self.put_variable(col, k, v)


def to_linen(nnx_class: tp.Callable[..., Module], *args: tp.Any,
             metadata_fn: tp.Callable[[Variable], tp.Any] | None = bv.to_linen_var,
             name: str | None = None, skip_rng: bool = False, abstract_init: bool = True,
             **kwargs: tp.Any) -> ToLinen:
    """``ToLinen(nnx_class, args=args, kwargs=FrozenDict(kwargs), ...)``."""
    return ToLinen(nnx_class, args=args, kwargs=FrozenDict(kwargs), metadata_fn=metadata_fn,
                   skip_rng=skip_rng, name=name)


def to_linen_class(base_nnx_class: type[M],
                   base_metadata_fn: tp.Callable[[Variable], tp.Any] | None = bv.to_linen_var,
                   base_skip_rng: bool = False, **partial_kwargs: tp.Any) -> type[ToLinen]:
    """A ``ToLinen`` subclass for ``base_nnx_class`` whose constructor takes the NNX module's
    keyword arguments directly (``partial_kwargs`` are defaults)."""

    def make(*, name: str | None = None, parent: tp.Any = None, args: tp.Sequence = (),
             **kwargs: tp.Any) -> ToLinen:
        extra = {} if parent is None else {"parent": parent}
        return ToLinen(base_nnx_class, args=tuple(args),
                       kwargs=FrozenDict({**partial_kwargs, **kwargs}),
                       metadata_fn=base_metadata_fn, skip_rng=base_skip_rng, name=name,
                       **extra)

    return make  # type: ignore[return-value]


__all__ = ["Functional", "ToLinen", "ToNNX", "functional", "lazy_init", "linen_rngs_dict",
           "to_linen", "to_linen_class"]
