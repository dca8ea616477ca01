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
>>> [p for p, _ in block.iter_modules()]
[(), ('dropout',), ('linear',)]
"""

from __future__ import annotations

import typing as tp
from collections.abc import MutableMapping

import jax

from flaxen.errors import SetAttributesNotFoundError, SowTypeError
from flaxen.nnx import _trace, filterlib
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx.graph import iter_graph, merge, split
from flaxen.nnx.variables import Intermediate, Variable

M = tp.TypeVar("M", bound="Module")

_INITIALIZING = [False]


def _append(acc: tuple, value: tp.Any) -> tuple:
    return (*acc, value)


def _empty_tuple() -> tuple:
    return ()


class Module(GraphNode):
    """Base class of NNX layers and models (see the module docstring).

    ``class M(nnx.Module, experimental_pytree=True)`` also registers ``M`` as a JAX pytree
    (its State leaves are the children, its GraphDef the static part), so ``jax.tree_util``
    and ``jax.jit`` accept it directly.
    """

    def __init_subclass__(cls, experimental_pytree: bool = False, **kwargs: tp.Any) -> None:
        super().__init_subclass__(**kwargs)
        if experimental_pytree:
            jax.tree_util.register_pytree_with_keys(
                cls, _module_flatten_with_keys, _module_unflatten, flatten_func=_module_flatten)

    def __post_init__(self) -> None:
        # a dataclass Module runs ``setup`` (when it defines one) after its generated __init__
        setup = getattr(self, "setup", None)
        if callable(setup):
            setup()

    def split(self, *filters: filterlib.Filter) -> tuple:
        """``nnx.split(self, *filters)`` (the spec's method form)."""
        return split(self, *filters)

    def sow(
        self,
        variable_type: type[Variable],
        name: str,
        value: tp.Any,
        reduce_fn: tp.Callable[[tp.Any, tp.Any], tp.Any] = _append,
        init_fn: tp.Callable[[], tp.Any] = _empty_tuple,
    ) -> None:
        """Records ``value`` in a ``variable_type`` attribute ``name`` (a tuple by default)."""
        if name in self.__dict__:
            var = self.__dict__[name]
            if not isinstance(var, Variable):
                raise SowTypeError(
                    f"/{name}", f"sow: expected {name!r} of {type(self).__name__} to be a "
                    f"Variable, got a {type(var).__name__}")
            if not isinstance(var, variable_type):
                raise SowTypeError(
                    f"/{name}", f"sow: expected {name!r} of {type(self).__name__} to be of type "
                    f"{variable_type.__name__}, got a {type(var).__name__}")
            var.value = reduce_fn(var.value, value)
        else:
            setattr(self, name, variable_type(reduce_fn(init_fn(), value)))

    def iter_modules(self) -> tp.Iterator[tuple[tuple, Module]]:
        """``(path, module)`` for every Module reachable from this one (itself first)."""
        for path, obj in iter_graph(self):
            if isinstance(obj, Module):
                yield path, obj

    def set_attributes(self, *filters: filterlib.Filter, raise_if_not_found: bool = True,
                       **attributes: tp.Any) -> None:
        """Sets ``attributes`` on every submodule (matching ``filters``) that has them."""
        preds = [filterlib.to_predicate(f) for f in filters]
        remaining = set(attributes)
        for path, module in self.iter_modules():
            if preds and not any(p(path, module) for p in preds):
                continue
            for name, value in attributes.items():
                if name in module.__dict__:
                    setattr(module, name, value)
                    remaining.discard(name)
        if remaining and raise_if_not_found:
            raise SetAttributesNotFoundError(
                "", f"set_attributes on {type(self).__name__}: Could not find at least one "
                f"instance of the following attributes: {remaining}")

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

    def __repr__(self) -> str:
        from flaxen.nnx.visualization import module_repr

        return module_repr(self)


def _module_flatten(m: Module) -> tuple[tuple, tp.Any]:
    gd, st = split(m)
    return (st,), gd


def _module_flatten_with_keys(m: Module) -> tuple[tuple, tp.Any]:
    gd, st = split(m)
    return ((jax.tree_util.GetAttrKey("state"), st),), gd


def _module_unflatten(gd: tp.Any, children: tp.Sequence[tp.Any]) -> Module:
    return merge(gd, children[0])


class _InitCaller:
    __slots__ = ("_module",)

    def __init__(self, module: Module) -> None:
        self._module = module

    def _run(self, fn: tp.Callable, args: tuple, kwargs: dict) -> tp.Any:
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


def _write(node: GraphNode, key: tp.Any, value: tp.Any) -> None:
    node.check_valid_context(
        f"Cannot modify {type(node).__name__} from a different JAX trace than the one it was "
        "created in; pass it as an argument of the nnx transform instead."
    )
    node.__dict__[key] = value
    _trace.bump()


class Dict(Module, MutableMapping):
    """A Module that is also a dict: ``nnx.Dict(a=layer, b=other)``; items are attributes."""

    def __init__(self, *args: tp.Any, **kwargs: tp.Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            _write(self, k, v)

    def __getitem__(self, key: str) -> tp.Any:
        return self.__dict__[key]

    def __setitem__(self, key: str, value: tp.Any) -> None:
        _write(self, key, value)

    def __delitem__(self, key: str) -> None:
        self.check_valid_context("Cannot modify an nnx.Dict from a different JAX trace.")
        del self.__dict__[key]
        _trace.bump()

    def __iter__(self) -> tp.Iterator[str]:
        return iter(self.__dict__)

    def __len__(self) -> int:
        return len(self.__dict__)

    def __getattr__(self, name: str) -> tp.Any:
        raise AttributeError(f"nnx.Dict has no key or attribute {name!r}")


class List(Module):
    """A Module that is also a list: ``nnx.List([layer1, layer2])``.

    Items are attributes named ``'0'``, ``'1'``, ... (``vars(lst)['0']``); graph paths and
    State keys use the integer index (``state[0]``).
    """

    _graph_int_keys = True

    def __init__(self, iterable: tp.Iterable[tp.Any] = (), /) -> None:
        for i, v in enumerate(iterable):
            self.__dict__[str(i)] = v
        _trace.bump()

    def __len__(self) -> int:
        return len(self.__dict__)

    def _index(self, i: int) -> int:
        n = len(self.__dict__)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"nnx.List index {i} out of range for length {n}")
        return j

    def __getitem__(self, i: int | slice) -> tp.Any:
        d = self.__dict__
        if isinstance(i, slice):
            return [d[str(j)] for j in range(*i.indices(len(self)))]
        return d[str(self._index(i))]

    def __setitem__(self, i: int, value: tp.Any) -> None:
        _write(self, str(self._index(i)), value)

    def __iter__(self) -> tp.Iterator[tp.Any]:
        d = self.__dict__
        return (d[str(i)] for i in range(len(d)))

    def append(self, value: tp.Any) -> None:
        _write(self, str(len(self.__dict__)), value)

    def extend(self, values: tp.Iterable[tp.Any]) -> None:
        for v in values:
            self.append(v)

    def pop(self, i: int = -1) -> tp.Any:
        items = list(self)
        value = items.pop(self._index(i))
        self.check_valid_context("Cannot modify an nnx.List from a different JAX trace.")
        self.__dict__.clear()
        self.__dict__.update((str(j), v) for j, v in enumerate(items))
        _trace.bump()
        return value


class Sequential(Module):
    """Calls its layers in order: ``Sequential(l1, l2)(x) == l2(l1(x))``.

    ``rngs=`` (and other keyword arguments) reach the layers whose ``__call__`` accepts them.
    """

    def __init__(self, *layers: tp.Any) -> None:
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        self.layers = List(layers)

    def __call__(self, *args: tp.Any, rngs: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        out: tp.Any = args
        first = True
        for layer in self.layers:
            call_kwargs = dict(kwargs) if first else {}
            if rngs is not None and _accepts(layer, "rngs"):
                call_kwargs["rngs"] = rngs
            out = layer(*out, **call_kwargs) if first else layer(out, **call_kwargs)
            first = False
        return out[0] if first and len(out) == 1 else out


def _accepts(fn: tp.Any, name: str) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


__all__ = ["Module", "Dict", "List", "Sequential", "Intermediate"]
