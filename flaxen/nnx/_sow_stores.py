"""``nnx.capture``: what Modules sow (and perturb) during one call, returned next to its output.

While a captured call runs, every Module reachable from it holds one extra attribute,
``__captures__``: a tuple with one Variable per captured type, whose value is a dict
``{name: value}``. :meth:`Module.sow <flaxen.nnx.Module.sow>` and ``perturb`` write into that
dict instead of adding attributes. Because the stores are ordinary Variables of the sown
type, every transform (``nnx.jit``, ``nnx.vmap``, ``nnx.scan``, ``nnx.grad``, ...) carries
them like any other state: a ``StateAxes({nnx.Intermediate: 0, ...})`` prefix scans them,
copies made inside a transform write into them and the results come back out. When the call
returns, the stores are read into a ``State`` nested by module path and the attribute is
removed (an outer capture's stores are put back).

``method_outputs=T`` also records the output of every public method (and ``__call__``) of
those Modules under the method's name, as if the method ended with ``self.sow(T, name, out)``.
The instances are given a cached subclass of their own class for the duration of the call,
so copies made inside transforms record too.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> class Double(nnx.Module):
...     def __call__(self, x):
...         y = 2 * x
...         self.sow(nnx.Intermediate, 'y', y)
...         return y
>>> model = Double()
>>> out, sown = nnx.capture(model, nnx.Intermediate)(jnp.ones(2))
>>> sown['y'][0].tolist(), hasattr(model, 'y'), hasattr(model, '__captures__')
([2.0, 2.0], False, False)
"""

from __future__ import annotations

import typing as tp
from collections.abc import Mapping

from flaxen.nnx import _trace
from flaxen.nnx.variablelib import Variable

CAPTURES = "__captures__"

_SUBCLASSES: dict[tuple[type, type], type] = {}  # (class, variable type) -> recording class


def store_for(stores: tuple[Variable, ...], variable_type: type) -> Variable | None:
    """The store of exactly ``variable_type`` (a subclass has its own store)."""
    for var in stores:
        if type(var) is variable_type:
            return var
    return None


def put(var: Variable, name: str, value: tp.Any) -> None:
    """Stores ``value`` under ``name`` in a capture Variable (a new dict: the old one may be
    shared with a copy outside the current trace)."""
    new = dict(var.raw_value)
    new[name] = value
    var.set_raw_value(new)


def capture(fn: tp.Any, *var_types: type[Variable], init: tp.Any = None,
            method_outputs: type[Variable] | None = None) -> tp.Callable[..., tp.Any]:
    """Wraps ``fn`` (a Module, a bound Module method, or a function taking Modules) so that
    calling it also returns what the Modules :meth:`~flaxen.nnx.Module.sow` (and
    ``perturb``) for ``var_types`` during the call.

    The wrapped call returns, as Flax's does, ``output`` alone when no type is given,
    ``(output, state)`` for one type and ``(output, state_1, state_2, ...)`` for several,
    each ``state`` a ``State`` nested by module path. ``init`` (a State nested the same
    way, e.g. the perturbations of an earlier capture) seeds the stores.
    ``method_outputs=T`` records the output of every method call under the method's name
    in the ``T`` store. With a Variable type in place of ``fn`` (``@nnx.capture(
    nnx.Intermediate)``) it returns a decorator.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> lin = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    >>> y, outs = nnx.capture(lin, nnx.Intermediate, method_outputs=nnx.Intermediate)(
    ...     jnp.ones(2))
    >>> bool((outs['__call__'][0] == y).all())
    True
    >>> @nnx.capture(nnx.Intermediate)
    ... def forward(model, x):
    ...     return model(x)
    >>> y, outs = forward(lin, jnp.ones(2))
    >>> sorted(outs)
    []
    """
    if isinstance(fn, type) and issubclass(fn, Variable):
        types = (fn, *var_types)

        def decorator(actual: tp.Any) -> tp.Callable[..., tp.Any]:
            return capture(actual, *types, init=init, method_outputs=method_outputs)

        return decorator
    returned = [_as_type(vt) for vt in var_types]
    recorded = _as_type(method_outputs) if method_outputs is not None else None
    wanted: list[type] = []
    for vt in (*returned, *((recorded,) if recorded is not None else ())):
        if vt not in wanted:
            wanted.append(vt)

    def run(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        roots = _roots(fn, args, kwargs)
        modules = _modules(roots)
        installed = [(path, m, m.__dict__.get(CAPTURES, _NONE), type(m))
                     for path, m in modules]
        call = fn
        try:
            for path, m, _, cls in installed:
                _set_captures(m, _new_stores(wanted, _lookup(init, path)))
                if recorded is not None:
                    object.__setattr__(m, "__class__", _recording_class(cls, recorded))
            if recorded is not None:
                call = _rebind(fn)
            if recorded is not None or installed:
                _trace.bump()
            out = call(*args, **kwargs)
            found = [(path, m.__dict__.get(CAPTURES, ())) for path, m, _, _ in installed]
        finally:
            for _, m, previous, cls in installed:
                if type(m) is not cls:
                    object.__setattr__(m, "__class__", cls)
                _restore(m, previous)
            if installed:
                _trace.bump()
        # only the types named in var_types come back (a method_outputs type alone does not)
        results = [_collect(found, vt) for vt in returned]
        return out if not results else (out, *results)

    return run


class _NoneType:
    pass


_NONE = _NoneType()


def _as_type(t: tp.Any) -> type:
    if isinstance(t, str):
        from flaxen.nnx._variable_names import variable_type_from_name

        return variable_type_from_name(t, allow_register=True)
    return t


def _roots(fn: tp.Any, args: tuple, kwargs: dict) -> list:
    # upward: capture is installed on Modules, which import this file
    from flaxen.nnx.module import Module

    if isinstance(fn, Module):
        return [fn]
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, Module):
        return [owner]
    import jax

    leaves = jax.tree_util.tree_leaves((args, kwargs), is_leaf=lambda x: isinstance(x, Module))
    return [x for x in leaves if isinstance(x, Module)]


def _modules(roots: list) -> list[tuple[tuple, tp.Any]]:
    """``(path, module)`` of every Module that can hold stores, each once."""
    # upward: the walk over modules belongs to graphlib, above this file
    from flaxen.nnx.graphlib import iter_modules

    # upward: capture is installed on Modules, which import this file
    from flaxen.nnx.module import Dict, List

    seen: set[int] = set()
    out = []
    for root in roots:
        for path, m in iter_modules(root, graph=True):
            # nnx.Dict / nnx.List keep their items in __dict__: an extra attribute would
            # show up as an item
            if id(m) in seen or isinstance(m, (Dict, List)):
                continue
            seen.add(id(m))
            out.append((path, m))
    return out


def _new_stores(wanted: list[type], seed: tp.Mapping) -> tuple:
    """One Variable per wanted type, plus one per other type found in ``seed``."""
    values: dict[type, dict] = {vt: {} for vt in wanted}
    for name, v in seed.items():
        if isinstance(v, Variable):
            values.setdefault(type(v), {})[name] = v.get_raw_value()
        elif not isinstance(v, Mapping) and wanted:
            values[wanted[0]][name] = v
    return tuple(vt(d) for vt, d in values.items())


def _set_captures(m: tp.Any, stores: tuple) -> None:
    # upward: Pytree (above this file) marks the stores as data
    from flaxen.nnx.pytreelib import data

    setattr(m, CAPTURES, data(stores))


def _restore(m: tp.Any, previous: tp.Any) -> None:
    if previous is _NONE:
        if CAPTURES in m.__dict__:
            object.__delattr__(m, CAPTURES)
            status = m._pytree__status
            if CAPTURES in status:
                object.__setattr__(m, "_pytree__status", status.without(CAPTURES))
    else:
        object.__setattr__(m, CAPTURES, previous)


def _lookup(init: tp.Any, path: tuple) -> tp.Mapping:
    d = init
    for k in path:
        if not isinstance(d, Mapping):
            return {}
        try:
            d = d[k]
        except (KeyError, TypeError, IndexError):
            return {}
    return d if isinstance(d, Mapping) else {}


def _collect(found: list[tuple[tuple, tuple]], vt: type) -> tp.Any:
    from flaxen.nnx.statelib import State

    tree: dict = {}
    for path, stores in found:
        var = store_for(stores, vt)
        if var is None or not var.raw_value:
            continue
        node = tree
        for k in path:
            node = node.setdefault(k, {})
        for name, value in var.raw_value.items():
            node[name] = vt(value)
    return State(tree, _copy=False)


# -- method_outputs ----------------------------------------------------------------------------

def _method_names(cls: type) -> list[str]:
    """Public methods (and ``__call__``) that ``cls`` and its Module bases define, without
    the methods of flaxen's base classes."""
    # upward: capture is installed on Modules, which import this file
    from flaxen.nnx.module import Module

    names: list[str] = []
    for klass in cls.__mro__:
        # the library's own Module classes (today's and the 0.8.3 face's) mark themselves
        if vars(klass).get("_nnx_base_module") or not issubclass(klass, Module):
            continue
        for name, value in vars(klass).items():
            if name in names or (name.startswith("_") and name != "__call__"):
                continue
            if isinstance(value, (staticmethod, classmethod, property, type)):
                continue
            if callable(value) and hasattr(value, "__get__"):
                names.append(name)
    return names


def _recording_class(cls: type, vt: type) -> type:
    key = (cls, vt)
    sub = _SUBCLASSES.get(key)
    if sub is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                     "_capture_base": cls}
        sub = type(cls)(cls.__name__, (cls,), namespace,
                        pytree=getattr(cls, "_pytree__is_pytree", True))
        for name in _method_names(cls):
            setattr(sub, name, _recorder(sub, name, vt))
        _SUBCLASSES[key] = sub
    return sub


def _recorder(sub: type, name: str, vt: type) -> tp.Callable:
    def method(self: tp.Any, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        out = getattr(super(sub, self), name)(*args, **kwargs)
        self.sow(vt, name, out)
        return out

    method.__name__ = name
    method.__qualname__ = f"{sub.__qualname__}.{name}"
    return method


def _rebind(fn: tp.Any) -> tp.Any:
    """A bound method of a recording instance, looked up again so that it records too."""
    owner = getattr(fn, "__self__", None)
    func = getattr(fn, "__func__", None)
    name = getattr(func, "__name__", None)
    base = getattr(type(owner), "_capture_base", None)
    if base is not None and name and getattr(base, name, None) is func:
        return getattr(owner, name)
    return fn
