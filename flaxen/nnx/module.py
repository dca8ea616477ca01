"""``nnx.Module``: a plain Python object whose Variables and submodules form a graph.

Attributes are ordinary: assign Variables (``self.w = nnx.Param(...)``), submodules, lists
and dicts of them, or static values. Transforms and ``nnx.split`` walk them.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> class Block(nnx.Module):
...     def __init__(self, rngs):
...         self.linear = nnx.Linear(2, 2, rngs=rngs)
...         self.dropout = nnx.Dropout(0.5)
...     def __call__(self, x, *, rngs=None):
...         return self.dropout(self.linear(x), rngs=rngs)
>>> block = Block(nnx.Rngs(0))
>>> block.eval()
>>> block.dropout.deterministic
True
>>> [p for p, _ in nnx.iter_modules(block)]
[('dropout',), ('linear',), ()]
"""

from __future__ import annotations

import operator
import typing as tp
import warnings
from collections.abc import MutableMapping, MutableSequence

import jax

from flaxen.errors import SetAttributesNotFoundError, SowTypeError
from flaxen.nnx import _graph_walk, _trace, filterlib, pytreelib, reprlib
from flaxen.nnx._graph_views import set_on_modules
from flaxen.nnx._sow_stores import CAPTURES, capture, put, store_for
from flaxen.nnx.pytreelib import Pytree, PytreeMeta, _is_tag, has_data, is_data
from flaxen.nnx.variablelib import Intermediate, Variable

# Flax imports these here from flax.typing; some user code imports them from this module
from flaxen.typing import Path as Path
from flaxen.typing import PathParts as PathParts

M = tp.TypeVar("M", bound="Module")
T = tp.TypeVar("T")

_INITIALIZING = [False]


def _append(acc: tuple, value: tp.Any) -> tuple:
    return (*acc, value)


def _empty_tuple() -> tuple:
    return ()


class ModuleMeta(PytreeMeta):
    """The metaclass of :class:`Module` (Flax's name; it adds nothing to ``PytreeMeta``).

    >>> from flaxen import nnx
    >>> type(nnx.Linear) is ModuleMeta or issubclass(type(nnx.Linear), ModuleMeta)
    True
    """


class Module(Pytree, metaclass=ModuleMeta):
    """Base class of NNX layers and models (see the module docstring).

    A Module is an :class:`~flaxen.nnx.Pytree`: arrays, Variables and submodules are its data
    (pytree children), everything else static. ``class M(nnx.Module, pytree=False)`` keeps
    it out of ``jax.tree_util``.
    """

    _nnx_base_module = True  # capture wraps methods of subclasses only

    def sow(
        self,
        variable_type: type[Variable] | str,
        name: str,
        value: tp.Any,
        reduce_fn: tp.Callable[[tp.Any, tp.Any], tp.Any] = _append,
        init_fn: tp.Callable[[], tp.Any] = _empty_tuple,
    ) -> bool:
        """Records ``value`` in a ``variable_type`` attribute ``name`` (a tuple by default).

        Inside :func:`flaxen.nnx.capture` the value goes to the capture instead.
        """
        variable_type = _variable_type(variable_type)
        stores = self.__dict__.get(CAPTURES)
        if stores is not None:  # inside nnx.capture: into its store of this type, if any
            store = store_for(stores, variable_type)
            if store is None:
                return False
            held = store.raw_value
            put(store, name, reduce_fn(held[name] if name in held else init_fn(), value))
            return True
        if name in self.__dict__:
            var = self.__dict__[name]
            if not isinstance(var, Variable):
                raise SowTypeError(
                    f"/{name}", f"sow: expected {name!r} of {type(self).__name__} to be a "
                    f"Variable, got a {type(var).__name__}")
            if type(var) is not variable_type:
                raise SowTypeError(
                    f"/{name}", f"sow: expected {name!r} of {type(self).__name__} to be of type "
                    f"{variable_type.__name__}, got a {type(var).__name__}")
            var.value = reduce_fn(var.value, value)
        else:
            setattr(self, name, variable_type(reduce_fn(init_fn(), value)))
        return True

    def perturb(self, name: str, value: tp.Any,
                variable_type: type[Variable] | str | None = None) -> tp.Any:
        """``value`` plus the perturbation stored under ``name`` (zeros the first time); its
        gradient is the gradient with respect to this intermediate value."""
        import jax.numpy as jnp

        if variable_type is None:
            from flaxen.nnx import variablelib as _v

            variable_type = getattr(_v, "Perturbation", Intermediate)
        variable_type = _variable_type(variable_type)
        stores = self.__dict__.get(CAPTURES)
        if stores is not None:  # inside nnx.capture: the perturbation lives in its store
            store = store_for(stores, variable_type)
            if store is None:
                return value
            held = store.raw_value
            if name not in held:
                put(store, name, jax.tree.map(jnp.zeros_like, value))
                held = store.raw_value
            return jax.tree.map(lambda a, b: a + b, held[name], value)
        if name in self.__dict__:
            var = self.__dict__[name]
            if not isinstance(var, variable_type):
                raise SowTypeError(
                    f"/{name}", f"perturb: expected {name!r} of {type(self).__name__} to be "
                    f"of type {variable_type.__name__}, got a {type(var).__name__}")
            old = var.value
        else:
            old = jax.tree.map(jnp.zeros_like, value)
            setattr(self, name, variable_type(old))
        return old + value

    def iter_modules(self) -> tp.Iterator[tuple[tuple, Module]]:
        """Deprecated alias of ``nnx.iter_modules(self)`` (every Module reachable from this
        one, children first, this one last), as in Flax 0.12.8."""
        warnings.warn("Module.iter_modules() is deprecated: call the function "
                      "nnx.iter_modules(module) instead (same pairs, same order).",
                      DeprecationWarning, stacklevel=2)
        yield from _graph_walk.iter_modules(self)

    def iter_children(self) -> tp.Iterator[tuple[tp.Any, Module]]:
        """Deprecated alias of ``nnx.iter_children(self)`` (the graph nodes held directly),
        as in Flax 0.12.8."""
        warnings.warn("Module.iter_children() is deprecated: call the function "
                      "nnx.iter_children(module) instead (same pairs, same order).",
                      DeprecationWarning, stacklevel=2)
        yield from _graph_walk.iter_children(self)

    def set_attributes(self, *filters: filterlib.Filter, raise_if_not_found: bool = True,
                       graph: bool | None = None, **attributes: tp.Any) -> None:
        """Sets ``attributes`` on every submodule (matching ``filters``) that has them."""
        preds = [filterlib.to_predicate(f) for f in filters]
        remaining = set_on_modules(
            _graph_walk.iter_modules(self),
            lambda path, m: not preds or any(p(path, m) for p in preds),
            attributes)
        if remaining and raise_if_not_found:
            raise SetAttributesNotFoundError(
                "", f"set_attributes on {type(self).__name__}: Could not find at least one "
                f"instance of the following attributes: {sorted(remaining)}")

    def train(self, **attributes: tp.Any) -> None:
        """Training mode: ``deterministic=False``, ``use_running_average=False`` where present."""
        self.set_attributes(**{"deterministic": False, "use_running_average": False,
                               **attributes}, raise_if_not_found=False)

    def eval(self, **attributes: tp.Any) -> None:
        """Evaluation mode: ``deterministic=True``, ``use_running_average=True`` where present."""
        self.set_attributes(**{"deterministic": True, "use_running_average": True,
                               **attributes}, raise_if_not_found=False)

    def is_initializing(self) -> bool:
        return _INITIALIZING[0]

    @property
    def init(self: M) -> M:
        """``model.init(x)`` calls the model with :meth:`is_initializing` true."""
        return _InitCaller(self)  # type: ignore[return-value]


def _variable_type(t: tp.Any) -> type:
    if isinstance(t, str):

        from flaxen.nnx._variable_names import variable_type_from_name

        return variable_type_from_name(t, allow_register=True)
    return t


class _InitCaller:
    __slots__ = ("_module",)

    def __init__(self, module: Module) -> None:
        self._module = module

    def _run(self, fn: tp.Any, args: tuple, kwargs: dict) -> tp.Any:  # fn: a callable
        prev = _INITIALIZING[0]
        _INITIALIZING[0] = True
        try:
            return fn(*args, **kwargs)
        finally:
            _INITIALIZING[0] = prev

    def __call__(self, *args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        return self._run(self._module, args, kwargs)

    def __getattr__(self, name: str) -> tp.Callable:
        fn = getattr(self._module, name)
        return lambda *a, **k: self._run(fn, a, k)


def _write(node: Pytree, key: str, value: tp.Any, as_data: bool | None = None) -> None:
    """Sets item ``key`` of an nnx.Dict / nnx.List (checks the trace, records data status)."""
    node.check_valid_context(
        f"Cannot mutate '{type(node).__name__}' from different trace level: it was created "
        "in another JAX trace; pass it as an argument of the nnx transform instead."
    )
    if _is_tag(value):
        as_data = not value.metadata["static"]
        value = value.metadata["nnx_value"]
    if as_data is None:
        as_data = is_data(value) or bool(has_data(value))
    status = node._pytree__status
    if status.get(key) is not as_data:
        object.__setattr__(node, "_pytree__status", status.with_(key, as_data))
    node.__dict__[key] = value
    _trace.bump()


class Dict(reprlib.MappingReprMixin, Module, MutableMapping):
    """A Module that is also a dict: ``nnx.Dict(a=layer, b=other)``; items are attributes.

    Items holding arrays, Variables or Modules (also inside containers) are data. As in Flax
    it compares as a mapping (by its items) yet hashes by identity.

    >>> from flaxen import nnx
    >>> d = nnx.Dict(a=1)
    >>> d == {'a': 1}, {d: 'key'}[d]
    (True, 'key')
    """

    def __init__(self, *args: tp.Any, **kwargs: tp.Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            _write(self, k, v)

    def __setattr__(self, name: str, value: tp.Any) -> None:
        _write(self, name, value)

    def __getitem__(self, key: str) -> tp.Any:
        return self.__dict__[key]

    def __setitem__(self, key: str, value: tp.Any) -> None:
        _write(self, key, value)

    def __delitem__(self, key: str) -> None:
        self.check_valid_context("Cannot mutate 'Dict' from different trace level.")
        del self.__dict__[key]
        object.__setattr__(self, "_pytree__status", self._pytree__status.without(key))
        _trace.bump()

    def __iter__(self) -> tp.Iterator[str]:
        return iter(self.__dict__)

    def __len__(self) -> int:
        return len(self.__dict__)

    @pytreelib.chains_bookkeeping
    def __getattr__(self, name: str) -> tp.Any:
        if name in pytreelib.BOOKKEEPING:
            return Module.__getattr__(self, name)
        raise AttributeError(f"nnx.Dict has no key or attribute {name!r}")

    def __hash__(self) -> int:
        return id(self)

    def __nnx_repr__(self) -> tp.Iterator[tp.Any]:
        # printed as a mapping (``Dict({'a': ...})``), without the size comment of Modules
        yield from reprlib.MappingReprMixin.__nnx_repr__(self)


class List(reprlib.SequenceReprMixin, Module, MutableSequence[T]):
    """A Module that is also a list: ``nnx.List([layer1, nnx.relu, layer2])``.

    As in Flax, an item holding arrays, Variables or Modules (also inside containers) is
    data; any other (a function, a number, a string) is static, so ``jax.jit`` of a Module
    holding ``nnx.Sequential(layer, jax.nn.relu)`` keeps the function out of its leaves.

    Items are attributes named ``'0'``, ``'1'``, ... (``vars(lst)['0']``); graph paths and
    State keys use the integer index (``state[0]``). Other attributes (``lst.tag = 'x'``)
    are ordinary Module attributes. ``nnx.List[int]`` works in annotations, as in Flax.
    It compares by its items and, like Flax's (and ``list``), is unhashable.

    >>> from flaxen import nnx
    >>> layers: nnx.List[int] = nnx.List([1, 2])
    >>> layers.tag = 'mlp'
    >>> layers += [3]
    >>> len(layers), list(reversed(layers)), layers.tag
    (3, [3, 2, 1], 'mlp')
    """

    _graph_int_keys = True

    def __init__(self, iterable: tp.Iterable[tp.Any] = (), /) -> None:
        for i, v in enumerate(iterable):
            _write(self, str(i), v)

    def __len__(self) -> int:
        d = self.__dict__
        n = len(d)
        # items are '0'..'n-1' without gaps, so the last one present means no other
        # attributes (``lst.tag = ...``) share the dict: the usual case, O(1)
        if not n or str(n - 1) in d:
            return n
        return sum(1 for k in d if k.isdigit())

    def _index(self, i: int) -> int:
        if type(i) is not int:
            try:
                i = operator.index(i)  # NumPy and other integer types
            except TypeError:
                raise TypeError(
                    f"Invalid index type: nnx.List indices must be integers or slices, not "
                    f"{type(i).__name__}.") from None
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"nnx.List index {i} out of range for length {n}")
        return j

    def __getitem__(self, i: int | slice) -> tp.Any:
        d = self.__dict__
        if isinstance(i, slice):
            return [d[str(j)] for j in range(*i.indices(len(self)))]
        return d[str(self._index(i))]

    def __setitem__(self, i: int | slice, value: tp.Any) -> None:
        if isinstance(i, slice):
            items = list(self)
            new = list(value)
            n_old = len(range(*i.indices(len(items))))
            if len(new) != n_old:
                # as Flax's List: slice assignment replaces items, it never resizes
                raise ValueError(
                    f"Length mismatch: the slice selects {n_old} items of the nnx.List but "
                    f"{len(new)} values were given. Give one value per selected item; use "
                    "append/insert/del to change the length.")
            items[i] = new
            self._reset(items)
            return
        _write(self, str(self._index(i)), value)

    def __delitem__(self, i: int | slice) -> None:
        items = list(self)
        del items[i]
        self._reset(items)

    def __iter__(self) -> tp.Iterator[tp.Any]:
        d = self.__dict__
        return (d[str(i)] for i in range(len(self)))

    def __contains__(self, value: object) -> bool:
        return any(v is value or v == value for v in self)

    def __eq__(self, other: object) -> bool:
        # Flax 0.12.8's List takes its __eq__ from a field-less dataclass mixin: equal to any
        # object of exactly its class whatever the items, never to a list
        if other.__class__ is self.__class__:
            return True
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def append(self, value: tp.Any) -> None:
        _write(self, str(len(self)), value)

    def extend(self, values: tp.Iterable[tp.Any]) -> None:
        for v in values:
            self.append(v)

    def insert(self, index: int, value: tp.Any) -> None:
        items = list(self)
        items.insert(index, value)
        self._reset(items)

    def pop(self, i: int = -1) -> tp.Any:
        items = list(self)
        value = items.pop(self._index(i))
        self._reset(items)
        return value

    def _reset(self, items: list) -> None:
        self.check_valid_context("Cannot mutate 'List' from different trace level.")
        d = self.__dict__
        status = self._pytree__status
        for k in [k for k in d if k.isdigit()]:
            del d[k]
            status = status.without(k)
        object.__setattr__(self, "_pytree__status", status)
        for j, v in enumerate(items):
            _write(self, str(j), v)

    def __nnx_repr__(self) -> tp.Iterator[tp.Any]:
        # printed as a sequence (``List([...])``), without the size comment of Modules
        yield from reprlib.SequenceReprMixin.__nnx_repr__(self)


class Sequential(Module):
    """Calls its layers in order: ``Sequential(l1, l2)(x) == l2(l1(x))``.

    The call's arguments go to the first layer; a layer returning a tuple passes it on as the
    next layer's positional arguments, a dict as its keyword arguments. ``rngs=`` reaches
    every layer with an ``rngs`` parameter.

    >>> from flaxen import nnx
    >>> nnx.Sequential(lambda a: (a, a + 1), lambda a, b: {'c': a * b}, lambda c: c)(2)
    6
    """

    def __init__(self, *layers: tp.Any) -> None:
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        self.layers: List[tp.Any] = List(layers)

    def __call__(self, *args: tp.Any, rngs: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        if not self.layers:  # identity: one argument, the arguments, the keywords, or None
            return args[0] if len(args) == 1 else args if args else kwargs or None
        out: tp.Any = None
        for i, layer in enumerate(self.layers):
            if not callable(layer):
                raise TypeError(
                    f"Sequence[{i}] is not callable: {layer!r}. Every layer of a Sequential "
                    "must be a callable (a Module, a function such as nnx.relu, a lambda).")
            if i:
                # as Flax: a tuple output is the next layer's positional arguments, a dict
                # its keyword arguments
                if isinstance(out, tuple):
                    args, kwargs = out, {}
                elif isinstance(out, dict):
                    args, kwargs = (), dict(out)
                else:
                    args, kwargs = (out,), {}
            if rngs is not None and _has_keyword(layer, "rngs"):
                kwargs["rngs"] = rngs
            out = layer(*args, **kwargs)
        return out


def _has_keyword(fn: tp.Any, name: str) -> bool:
    # Flax's rule: a parameter of that name that can be passed by keyword; a **kwargs catch-all
    # does not count
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    p = params.get(name)
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


# -- Flax 0.12.8's other names in nnx.module ---------------------------------------------------
# graphlib sits below this file: these are the very objects flaxen.nnx exports
from flaxen.nnx.graphlib import iter_children as iter_children  # noqa: E402
from flaxen.nnx.graphlib import iter_module_children as iter_module_children  # noqa: E402
from flaxen.nnx.graphlib import iter_modules as iter_modules  # noqa: E402
from flaxen.nnx.graphlib import view as view  # noqa: E402
from flaxen.nnx.graphlib import view_info as view_info  # noqa: E402
from flaxen.nnx.graphlib import with_attributes as with_attributes  # noqa: E402
from flaxen.nnx.statelib import State as _State  # noqa: E402

A = tp.TypeVar("A")
B = tp.TypeVar("B")
S = tp.TypeVar("S", bound=tp.Union[_State, tuple[_State, ...]])  # noqa: UP007
V = tp.TypeVar("V", bound=Variable)
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
P = tp.ParamSpec("P")
R = tp.TypeVar("R")
StateMapping = tp.Mapping[tuple, tp.Any]


def tuple_reduce(xs: tuple, x: tp.Any) -> tuple:
    """``xs`` with ``x`` appended: the reducer ``Module.sow`` uses by default.

    >>> tuple_reduce((1,), 2)
    (1, 2)
    """
    return (*xs, x)


def tuple_init() -> tuple:
    """The empty tuple: the initial value ``Module.sow`` reduces onto by default.

    >>> tuple_init()
    ()
    """
    return ()


def first_from(*args: A | None, error_msg: str) -> A:
    """The first argument that is not ``None``; ``ValueError(error_msg)`` when all are.

    Layers use it to pick a call-time override over a constructor default.

    >>> first_from(None, 0, 5, error_msg="no value")
    0
    """
    for arg in args:
        if arg is not None:
            return arg
    raise ValueError(error_msg)


__all__ = ["Dict", "Intermediate", "List", "Module", "ModuleMeta", "Sequential", "capture",
           "first_from", "iter_children", "iter_module_children", "iter_modules",
           "tuple_init", "tuple_reduce", "view", "view_info", "with_attributes"]
