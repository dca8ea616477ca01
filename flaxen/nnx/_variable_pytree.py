"""How a Variable is a JAX pytree: one child (its value), and an aux that jit can cache.

The aux is a :class:`_VarAux`, a tuple ``(type, sorted metadata items)`` that ``jax.jit``
hashes and compares in C on every call, carrying the metadata dict for unflatten. Flatten and
unflatten run once per Variable on every jitted call (a State of Variables passed to
``jax.jit``), so both do as little as Python allows:

- a Variable keeps the aux it last flattened to (slot ``_var_aux``) while its metadata is
  equal, so flattening it again builds nothing;
- a Variable built by unflatten shares its aux's metadata dict (sorted by key, as Flax
  rebuilds it) until its first metadata write: every in-place write goes through
  :func:`own_metadata`, which copies first;
- unflatten fills a twin of the Variable class that has no attribute hooks and then gives it
  the Variable's class (see :func:`_unflatten_via_twin`).

``variablelib`` calls :func:`bind` once with the Variable class (whose slots the setters
here write) and :func:`register` for each subclass.
"""

from __future__ import annotations

import typing as tp

import jax

from flaxen.nnx import _trace


class _VarAux(tuple):
    """Tree-structure data of a Variable pytree: ``(type, sorted metadata items)``.

    A tuple, so ``jax.jit``'s cache hashes and compares it in C on every call; the metadata
    dict itself rides along as an attribute for unflatten. Each Variable keeps the last aux
    it flattened to (``_var_aux``) and reuses it while its metadata is unchanged, so a
    Variable that came out of a jitted call flattens back to the very object jit cached.
    """

    metadata: dict

    def __new__(cls, typ: type, metadata: dict) -> _VarAux:
        items = tuple(sorted(metadata.items(), key=_first))
        try:
            hash(items)
        except TypeError:  # an unhashable metadata value: compare by type and dict instead
            aux: _VarAux = tuple.__new__(_UnhashableVarAux, (typ, items))
        else:
            aux = tuple.__new__(cls, (typ, items))
        # in key order, as Flax rebuilds it: a Variable out of unflatten (jax.tree.map, a
        # jitted call) lists its metadata sorted
        aux.metadata = dict(items)
        return aux

    @property
    def type(self) -> type:
        return self[0]

    def __repr__(self) -> str:
        return repr(self[1])


class _UnhashableVarAux(_VarAux):
    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self[0])

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _VarAux) and self[0] is other[0]
                                 and self.metadata == other.metadata)


def _first(item: tuple) -> tp.Any:
    return item[0]


def own_metadata(v: tp.Any) -> dict:
    """``v``'s metadata dict for an in-place write: a Variable built by unflatten shares its
    aux's dict (with every other Variable built from the same aux, and with jax.jit's cache
    key), so it gets a copy of its own first."""
    meta = v._var_metadata
    try:
        shared = meta is v._var_aux.metadata
    except AttributeError:  # never flattened: its dict is its own
        return meta
    if shared:
        meta = dict(meta)
        _set_meta(v, meta)
    return meta


def _aux_of(v: tp.Any) -> _VarAux:
    try:
        aux = v._var_aux
        if aux.metadata == v._var_metadata:
            return aux
    except Exception:  # never flattened yet, or metadata values that refuse == (arrays)
        pass
    aux = _VarAux(type(v), v._var_metadata)  # the aux keeps its own sorted copy
    _set_aux(v, aux)
    return aux


def _flatten(v: tp.Any) -> tuple[tuple, _VarAux]:
    # runs for every Variable of every jitted call's arguments: only the common case (a
    # Variable out of unflatten, still sharing its aux's dict) is checked here, by identity;
    # _aux_of compares by value and rebuilds the aux when the metadata changed
    try:
        aux = v._var_aux
        if aux.metadata is v._var_metadata:
            return (v.raw_value,), aux
    except AttributeError:
        pass
    return (v.raw_value,), _aux_of(v)


_VALUE_KEY = jax.tree_util.GetAttrKey("value")


def _flatten_with_keys(v: tp.Any) -> tuple[tuple, _VarAux]:
    return ((_VALUE_KEY, v.raw_value),), _aux_of(v)


def _unflatten(aux: _VarAux, children: tp.Sequence[tp.Any]) -> tp.Any:
    var = _new(aux[0])
    # the aux's own dict, shared until a write (own_metadata): no copy per jitted output
    _set_meta(var, aux.metadata)
    _set_trace(var, _current_trace())
    _set_raw(var, children[0])
    _set_aux(var, aux)
    return var


def _unflatten_via_twin(aux: _VarAux, children: tp.Sequence[tp.Any]) -> tp.Any:
    # Builds what _unflatten builds, in about two thirds of the time (the functional
    # split/jit/merge row of benchmarks/bench_nnx_tree.py runs it 14 times per step). A
    # Variable defines __setattr__, so its slots are written around that hook (descriptor
    # setters), and object.__new__(cls) goes through a checked wrapper; the twin is a plain
    # class with the same slots, whose call and slot stores take CPython's fast paths, and
    # an object may change its class between two classes of the same layout.
    var: tp.Any = _twin()  # type: ignore[misc]  # set by bind before any register
    var._var_metadata = aux.metadata  # shared until a write, as in _unflatten
    var._trace_state = _current_trace()
    var.raw_value = children[0]
    var._var_aux = aux
    var.__class__ = aux[0]
    return var


def _twin_fits(cls: type) -> bool:
    """True when ``cls`` has the layout of the Variable class (no slots or dict of its own
    added), so an instance of the twin may become one."""
    if _twin is None:
        return False
    probe = _twin()
    try:
        probe.__class__ = cls
    except TypeError:
        return False
    return True


def register(cls: type) -> None:
    """Registers Variable class ``cls`` (each subclass too) as a pytree."""
    # A Variable is a pytree whose one child is its value, so jax.numpy functions (which
    # no longer call __jax_array__ while tracing) accept it: jnp.dot(x, module.kernel).
    unflatten = _unflatten_via_twin if _twin_fits(cls) else _unflatten
    jax.tree_util.register_pytree_with_keys(
        cls, _flatten_with_keys,
        unflatten,  # type: ignore[arg-type]  # jax passes the children as a tuple
        flatten_func=_flatten)


def _unbound(obj: tp.Any, value: tp.Any) -> None:
    raise RuntimeError("_variable_pytree.bind(Variable) has not run")


# the slots' own setters (bound to Variable's slots by bind): unflatten runs once per
# Variable on every jitted call's output
_new = object.__new__
_current_trace = _trace.current_trace
_set_meta: tp.Callable[[tp.Any, tp.Any], None] = _unbound
_set_trace: tp.Callable[[tp.Any, tp.Any], None] = _unbound
_set_raw: tp.Callable[[tp.Any, tp.Any], None] = _unbound
_set_aux: tp.Callable[[tp.Any, tp.Any], None] = _unbound
_twin: type | None = None  # the Variable class's twin (see _unflatten_via_twin)


def bind(variable: type) -> None:
    """Takes the slot setters of ``variable`` (the Variable class), makes its hook-free twin
    (same base, same slots) and registers it."""
    global _set_meta, _set_trace, _set_raw, _set_aux, _twin
    _set_meta = variable._var_metadata.__set__  # type: ignore[attr-defined]
    _set_trace = variable._trace_state.__set__  # type: ignore[attr-defined]
    _set_raw = variable.raw_value.__set__  # type: ignore[attr-defined]
    _set_aux = variable._var_aux.__set__  # type: ignore[attr-defined]
    base: type = variable.__base__  # type: ignore[assignment]  # Variable has bases
    _twin = type("_VariableTwin", (base,),
                 {"__slots__": variable.__dict__["__slots__"], "__module__": __name__})
    register(variable)
