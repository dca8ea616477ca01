"""Interop between NNX and Linen: each kind of module used inside the other.

- :class:`LinenWrapper` is an NNX module around a Linen module. It initializes the Linen module
  from ``rngs`` and sample inputs at construction and keeps every collection as Variables, one
  per array, under an attribute named after the collection: ``wrapper.params[...]`` holds
  :class:`~flaxen.nnx.Param` s, ``wrapper.batch_stats[...]`` :class:`~flaxen.nnx.BatchStat` s,
  ``cache`` :class:`~flaxen.nnx.Cache`, ``intermediates`` :class:`~flaxen.nnx.Intermediate`, any
  other collection a Variable type named after it (:func:`variable_type`). Calls run
  ``module.apply`` with every collection but ``params``/``intermediates`` mutable and write the
  updates back, so BatchNorm statistics change in place as they do for NNX layers.
- :class:`NNXWrapper` is a Linen module around an NNX module class. ``init`` builds the NNX
  module (its ``rngs`` made from the Linen RNG streams) and stores its Variables in the
  matching Linen collections (``Param`` in ``params``, ``BatchStat`` in ``batch_stats``, ...);
  ``apply`` rebuilds it from the variables, calls it, and stores updated state in the
  collections that are mutable. RNG state is not stored: each apply draws fresh keys from the
  Linen ``rngs`` (a stream the apply did not get falls back to a fixed ``default`` key).
- :func:`functional` turns an NNX module class into ``init``/``apply`` functions.

>>> import jax, jax.numpy as jnp
>>> from flaxen import linen as nn, nnx
>>> layer = nnx.compatibility.LinenWrapper(nn.Dense(3), jnp.ones((1, 2)), rngs=nnx.Rngs(0))
>>> layer.params['kernel'].value.shape, layer(jnp.ones((4, 2))).shape
((2, 3), (4, 3))
>>> wrapped = nnx.compatibility.NNXWrapper(nnx.Linear, args=(2, 3))
>>> variables = wrapped.init(jax.random.key(0), jnp.ones((1, 2)))
>>> jax.tree_util.tree_map(jnp.shape, variables['params'])
{'bias': (3,), 'kernel': (2, 3)}
"""

from __future__ import annotations

import dataclasses
import inspect
import typing as tp
from collections.abc import Mapping

import jax

from flaxen import linen
from flaxen.core import meta
from flaxen.core.frozen_dict import FrozenDict
from flaxen.errors import NNXInteropError
from flaxen.nnx import _graph_ops as graphlib
from flaxen.nnx import filterlib
from flaxen.nnx.module import Module
from flaxen.nnx.rnglib import Rngs, RngState
from flaxen.nnx.statelib import State
from flaxen.nnx.variablelib import BatchStat, Cache, Intermediate, Param, Variable

M = tp.TypeVar("M", bound=Module)

# -- Linen collection <-> Variable type --------------------------------------------------------

_COLLECTION_TYPES: dict[str, type[Variable]] = {
    "params": Param,
    "batch_stats": BatchStat,
    "cache": Cache,
    "intermediates": Intermediate,
}
_TYPE_COLLECTIONS: dict[type, str] = {t: c for c, t in _COLLECTION_TYPES.items()}


def variable_type(collection: str) -> type[Variable]:
    """The Variable type for a Linen collection; one is made (once) for unknown names.

    >>> from flaxen import nnx
    >>> variable_type('params') is nnx.Param, variable_type('counters').__name__
    (True, 'Counters')
    """
    typ = _COLLECTION_TYPES.get(collection)
    if typ is None:
        name = "".join(part[:1].upper() + part[1:] for part in collection.split("_")) or "Var"
        typ = type(name, (Variable,), {
            "__slots__": (), "__module__": __name__,
            "__doc__": f"Variables of the Linen collection {collection!r}.",
        })
        _COLLECTION_TYPES[collection] = typ
        _TYPE_COLLECTIONS[typ] = collection
    return typ


def collection_name(variable_type: type) -> str:
    """The Linen collection for a Variable type (its own, a base's, or its snake_case name)."""
    for base in variable_type.__mro__:
        name = _TYPE_COLLECTIONS.get(base)
        if name is not None:
            return name
    chars = []
    for i, ch in enumerate(variable_type.__name__):
        if ch.isupper() and i:
            chars.append("_")
        chars.append(ch.lower())
    return "".join(chars)


def _unbox(leaf: tp.Any) -> tuple[tp.Any, dict]:
    """A Linen leaf's array and the Variable metadata it carries (sharding names)."""
    if isinstance(leaf, meta.Partitioned):
        return leaf.value, {"sharding": tuple(leaf.names)}
    if isinstance(leaf, meta.AxisMetadata):
        return leaf.unbox(), {}
    return leaf, {}


def _is_box(x: tp.Any) -> bool:
    return isinstance(x, meta.AxisMetadata)


# -- functional ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Functional(tp.Generic[M]):
    """An NNX module class as ``init(rngs=...) -> State`` and ``apply(*states)``."""

    module_type: type[M]
    graphdef: graphlib.GraphDef[M] | None
    args: tuple[tp.Any, ...]
    kwargs: dict[str, tp.Any]

    def init(self, *, rngs: Rngs | None = None) -> State:
        extra = {} if rngs is None else {"rngs": rngs}
        module = self.module_type(*self.args, **self.kwargs, **extra)
        self.graphdef, state = graphlib.split(module)
        return state

    def apply(self, *states: tp.Any) -> tp.Any:
        """``apply(state)(*args)`` -> ``(output, (graphdef, new_state))``."""
        if self.graphdef is None:
            raise NNXInteropError(
                "",
                f"Functional({self.module_type.__name__}).apply: call init() first; it builds "
                "the module and records its graph definition."
            )
        return self.graphdef.apply(*states)


def functional(cls: type[M]) -> tp.Callable[..., Functional[M]]:
    """``functional(nnx.Linear)(2, 3).init(rngs=nnx.Rngs(0))`` gives the State to apply.

    >>> import jax.numpy as jnp
    >>> from flaxen import nnx
    >>> f = nnx.compatibility.functional(nnx.Linear)(2, 3)
    >>> state = f.init(rngs=nnx.Rngs(0))
    >>> y, (graphdef, state) = f.apply(state)(jnp.ones((1, 2)))
    >>> y.shape
    (1, 3)
    """

    def construct(*args: tp.Any, **kwargs: tp.Any) -> Functional[M]:
        return Functional(cls, None, args, kwargs)

    return construct


# -- Linen inside NNX ----------------------------------------------------------------------------

_RESERVED = frozenset({"module", "rngs", "collections"})


def _linen_rngs(rngs: tp.Any) -> dict[str, tp.Any]:
    """Keys for a Linen call: one fresh key per stream; ``default`` stands in for ``params``."""
    if rngs is None:
        return {}
    if isinstance(rngs, Rngs):
        keys = {name: stream() for name, stream in rngs.items()}
    elif isinstance(rngs, Mapping):
        keys = {name: jax.random.key(k) if isinstance(k, int) else k for name, k in rngs.items()}
    else:
        keys = {"params": jax.random.key(rngs) if isinstance(rngs, int) else rngs}
    if "params" not in keys and "default" in keys:
        keys["params"] = keys.pop("default")
    return keys


def _to_vars(tree: tp.Any, typ: type[Variable]) -> tp.Any:
    if isinstance(tree, Mapping):
        return {k: _to_vars(v, typ) for k, v in tree.items()}
    value, metadata = _unbox(tree)
    return typ(value, **metadata)


def _values(tree: tp.Any) -> tp.Any:
    if isinstance(tree, dict):
        return {k: _values(v) for k, v in tree.items()}
    return tree.value


def _same_keys(vars_tree: tp.Any, tree: tp.Any) -> bool:
    if isinstance(tree, Mapping):
        return (isinstance(vars_tree, dict) and vars_tree.keys() == tree.keys()
                and all(_same_keys(vars_tree[k], tree[k]) for k in tree))
    return isinstance(vars_tree, Variable)


def _assign(vars_tree: dict, tree: Mapping) -> None:
    for k, v in tree.items():
        if isinstance(v, Mapping):
            _assign(vars_tree[k], v)
        else:
            vars_tree[k].value = _unbox(v)[0]


class LinenWrapper(Module, pytree=False):
    """An NNX module around a Linen ``module``: ``LinenWrapper(module, *sample_args,
    rngs=nnx.Rngs(0), **sample_kwargs)`` runs ``module.init`` right away.

    Call it as ``wrapper(*args, rngs=None, method=None, mutable=None, **kwargs)``: ``rngs``
    (an ``nnx.Rngs``, or the one given at construction) supplies one key per stream;
    ``mutable`` defaults to every stored collection except ``params`` and ``intermediates``,
    and whatever Linen returns for the mutable collections is written back into the Variables.
    """

    def __init__(self, module: linen.Module, *args: tp.Any, rngs: Rngs | None = None,
                 **kwargs: tp.Any) -> None:
        self.module = module
        self.rngs = rngs
        self.collections: tuple[str, ...] = ()
        self._initialize(args, kwargs)

    def _initialize(self, args: tuple, kwargs: dict) -> None:
        keys = _linen_rngs(self.rngs)
        variables = self.module.init(keys, *args, **kwargs)
        self._store(variables)

    def _store(self, variables: Mapping[str, tp.Any]) -> None:
        collections = list(self.collections)
        for col, tree in variables.items():
            if col in _RESERVED:
                raise NNXInteropError(
                    "",
                    f"LinenWrapper: the Linen module has a collection named {col!r}, which "
                    "clashes with the wrapper's own attribute of that name. Rename the "
                    "collection."
                )
            current = self.__dict__.get(col)
            if current is not None and _same_keys(current, tree):
                _assign(current, tree)
            else:
                setattr(self, col, _to_vars(tree, variable_type(col)))
            if col not in collections:
                collections.append(col)
        if tuple(collections) != self.collections:
            self.collections = tuple(collections)

    def linen_variables(self) -> dict[str, tp.Any]:
        """The stored collections as the plain nested dicts ``module.apply`` takes."""
        return {col: _values(self.__dict__[col]) for col in self.collections}

    def __call__(self, *args: tp.Any, rngs: Rngs | None = None, method: tp.Any = None,
                 mutable: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        if not self.collections:
            raise NNXInteropError(
                "",
                f"{type(self).__name__}: the Linen module has no variables yet; initialize it "
                "first (LinenWrapper does at construction, ToNNX with lazy_init(...))."
            )
        keys = _linen_rngs(rngs if rngs is not None else self.rngs)
        if mutable is None:
            mutable = [c for c in self.collections if c not in ("params", "intermediates")]
        if isinstance(mutable, (list, tuple)) and not mutable:
            mutable = False
        out = self.module.apply(self.linen_variables(), *args, rngs=keys, method=method,
                                mutable=mutable, **kwargs)
        if mutable is not False:
            out, updates = out
            self._store(updates)
        return out


# -- NNX inside Linen ----------------------------------------------------------------------------

def _accepts_rngs(constructor: tp.Any) -> bool:
    try:
        params = inspect.signature(constructor).parameters
    except (TypeError, ValueError):
        return True
    return "rngs" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


_NOT_RNG = filterlib.Not(RngState)


def _nnx_variables(module: tp.Any) -> list[tuple[tuple, Variable]]:
    """``(path, Variable)`` for every non-RNG Variable of ``module``, once each."""
    return [(p, v) for p, v in graphlib.iter_graph(module)
            if isinstance(v, Variable) and _NOT_RNG(p, v)]


def _boxed(var: Variable) -> tp.Any:
    sharding = var._var_metadata.get("sharding", var._var_metadata.get("out_sharding"))
    if sharding is not None:
        return meta.Partitioned(var.raw_value, names=tuple(sharding))
    return var.raw_value


def _put(lm: linen.Module, items: tp.Sequence[tuple[tuple, Variable]], only: set | None = None,
         skip_immutable: bool = False) -> None:
    """Stores the Variables in ``lm``'s collections, one put per top-level name."""
    groups: dict[tuple[str, str], tp.Any] = {}
    for path, var in items:
        col = collection_name(type(var))
        keys = tuple(str(k) for k in path)
        if not keys:
            raise NNXInteropError(
                "", "NNXWrapper: the wrapped object is itself a Variable; wrap a Module.")
        if only is not None and (col, keys[0]) not in only:
            continue
        if skip_immutable and not lm.is_mutable_collection(col):
            continue
        if len(keys) == 1:
            groups[(col, keys[0])] = _boxed(var)
            continue
        node = groups.setdefault((col, keys[0]), {})
        for k in keys[1:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = _boxed(var)
    for (col, name), value in groups.items():
        lm.put_variable(col, name, value)


def _flat_linen(variables: Mapping) -> dict[tuple, tp.Any]:
    flat: dict[tuple, tp.Any] = {}

    def walk(node: tp.Any, prefix: tuple) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, (*prefix, str(k)))
        else:
            flat[prefix] = node

    walk(variables, ())
    return flat


def _call_nnx(lm: linen.Module, constructor: tp.Any, args: tuple, kwargs: Mapping,
              skip_rng: bool, method: tp.Any, call_args: tuple, call_kwargs: dict) -> tp.Any:
    init = lm.is_initializing()
    module_kwargs = dict(kwargs)
    if not skip_rng and _accepts_rngs(constructor):
        streams = {name: lm.make_rng(name) for name in lm.scope.rngs}
        if not init and "default" not in streams:
            streams["default"] = 0  # placeholder for streams the apply was not given
        module_kwargs["rngs"] = Rngs(**streams)
    module = constructor(*args, **module_kwargs)
    fn = _method(module, method)
    items = _nnx_variables(module)
    if init:
        _put(lm, items)  # the state as constructed (a Linen init records no call updates)
        before = {id(v) for _, v in items}
        out = fn(*call_args, **call_kwargs)
        sown = [(p, v) for p, v in _nnx_variables(module)
                if id(v) not in before and isinstance(v, Intermediate)]
        _put(lm, sown)
        return out
    flat = _flat_linen(lm.variables)
    missing = []
    originals = {}
    for path, var in items:
        key = (collection_name(type(var)), *map(str, path))
        if key in flat:
            value, _ = _unbox(flat[key])
            object.__setattr__(var, "raw_value", value)
        else:
            missing.append("/" + "/".join(key))
        originals[id(var)] = var.raw_value
    if missing:
        raise NNXInteropError(
            "",
            f"NNXWrapper({getattr(constructor, '__name__', constructor)}): the variables "
            f"passed to apply have no {missing[0]}" + (f" (and {len(missing) - 1} more)"
                                                       if len(missing) > 1 else "")
            + ". Pass all the collections that init returned."
        )
    out = fn(*call_args, **call_kwargs)
    changed = set()
    for path, var in _nnx_variables(module):
        col = collection_name(type(var))
        name = str(path[0])
        if id(var) not in originals:  # created by the call (e.g. sow)
            if lm.is_mutable_collection(col):
                changed.add((col, name))
        elif var.raw_value is not originals[id(var)]:
            if not lm.is_mutable_collection(col):
                raise NNXInteropError(
                    "",
                    f"NNXWrapper: the call updated {col}/{'/'.join(map(str, path))}, but the "
                    f"collection {col!r} is not mutable. Pass mutable=[{col!r}] to apply (or "
                    "put the module in eval mode)."
                )
            changed.add((col, name))
    if changed:
        _put(lm, _nnx_variables(module), only=changed)
    return out


def _method(module: tp.Any, method: tp.Any) -> tp.Callable:
    if method is None:
        return module
    if isinstance(method, str):
        return getattr(module, method)
    return lambda *a, **k: method(module, *a, **k)


class NNXWrapper(linen.Module):
    """A Linen module that builds ``module_type(*args, **kwargs, rngs=...)`` and calls it.

    ``module_type`` is an NNX module class (or any function returning an NNX module);
    ``rngs`` is left out when ``skip_rng`` or the constructor takes none. Call with
    ``nnx_method=`` (a name or ``fn(module, *args)``) to run another method.
    """

    module_type: tp.Any
    args: tuple = ()
    kwargs: Mapping[str, tp.Any] = FrozenDict({})  # noqa: RUF009 - immutable default
    skip_rng: bool = False

    @linen.compact
    def __call__(self, *args: tp.Any, nnx_method: tp.Any = None, **kwargs: tp.Any) -> tp.Any:
        return _call_nnx(self, self.module_type, tuple(self.args), self.kwargs, self.skip_rng,
                         nnx_method, args, kwargs)
