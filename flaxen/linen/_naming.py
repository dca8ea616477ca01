"""Naming and registration of submodules, and lazy ``setup``.

How a Module gets its name and scope:

* built inside a parent's ``@compact`` method: named ``{ClassName}_{k}`` with ``k``
  counted per class (unless ``name=`` is given) and bound at once to a child scope;
* built inside a parent's ``setup``: named after the attribute it is assigned to
  (``self.dense = ...`` -> ``dense``; lists, tuples and dicts give ``layers_0``,
  ``blocks_key``), and bound on assignment;
* passed to a Module as a dataclass field: adopted under the field's name when the Module
  is set up. Modules built outside any Module are cloned first, so the caller's object is
  never modified, and one instance passed twice stays one (shared) submodule.

Submodules, params and variables share one namespace per Module; the Scope's name
reservations enforce it and a clash raises :class:`~flaxen.errors.NameInUseError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flaxen import errors
from flaxen.configurations import config
from flaxen.core.frozen_dict import FrozenDict
from flaxen.core.scope import Scope
from flaxen.linen._state import (
    SETUP_DONE,
    SETUP_FIELDS,
    SETUP_NONE,
    ModuleBase,
    ModuleState,
    _unspecified_parent,
    context,
    hooks,
    run_intercepted,
)


def attach(parent: Any, module: Any, name: str, adopt: bool = True) -> None:
    """Binds ``module`` to the child scope ``name`` of the bound Module ``parent``.

    Submodules passed to ``module`` as fields are adopted right away (``adopt``), so
    ``parent.child.field_module`` is bound without calling a method of ``child`` first.
    """
    pst = parent._state
    try:
        scope = parent.scope.push(name, reuse=pst.reuse_scopes and pst.in_setup)
    except errors.NameInUseError:
        raise errors.NameInUseError("submodule", name, type(parent).__name__) from None
    except TypeError:
        raise TypeError(
            f"Submodule names must be strings, but {type(module).__name__} was given "
            f"name={name!r} inside {type(parent).__name__}. Pass name='...' as a str."
        ) from None
    module.__dict__["scope"] = scope
    parent._state.children[name] = module
    if adopt:
        adopt_fields(module)


def adopt_fields(module: Any) -> None:
    """Adopts the submodules passed to a bound ``module`` as fields (a shallow setup)."""
    d = module.__dict__
    st = d["_state"]
    if st.setup_called != SETUP_NONE or d.get("scope") is None:
        return
    for fname in type(module)._flaxen_fields:
        v = d.get(fname)
        if type(v) in _CONTAINERS or isinstance(v, ModuleBase):
            try_setup(module, shallow=True)
            return
    st.setup_called = SETUP_FIELDS


def bind_new_module(module: Any) -> None:
    """Resolves the parent of a freshly constructed Module and binds it if possible.

    Called from ``Module.__post_init__``: the default parent is the Module whose method is
    running in this thread.
    """
    d = module.__dict__
    d["_state"] = ModuleState()
    parent = d["parent"]
    if parent is _unspecified_parent:
        parent = d["parent"] = context.module_stack[-1]
    if parent is None:
        d["scope"] = None
        return
    if isinstance(parent, ModuleBase):
        pst = parent.__dict__["_state"]
        name = d["name"]
        adopt = not type(module)._flaxen_custom_post_init  # else after __post_init__
        if pst.in_setup:
            if name is None:
                d["scope"] = None  # named (and bound) when assigned to an attribute
            else:
                attach(parent, module, name, adopt)
        elif pst.in_compact:
            if name is None:
                cursor = pst.autoname_cursor
                if cursor is None:
                    cursor = pst.autoname_cursor = {}
                prefix = type(module).__name__
                k = cursor.get(prefix, 0)
                cursor[prefix] = k + 1
                name = d["name"] = f"{prefix}_{k}"
            attach(parent, module, name, adopt)
        else:
            raise errors.AssignSubModuleError(type(module).__name__)
    elif isinstance(parent, Scope):
        d["scope"] = parent
    else:
        raise TypeError(
            f"The parent of {type(module).__name__} must be a Module, a Scope or None, "
            f"got {parent!r} of type {type(parent).__name__}. Leave parent= unset to "
            "attach it to the Module whose method is running."
        )


def adopt_after_init(module: Any) -> None:
    """``adopt_fields`` for a class with its own ``__post_init__``, once that has run."""
    if isinstance(module.__dict__.get("parent"), ModuleBase):
        adopt_fields(module)


def _root_state(module: Any) -> ModuleState:
    while isinstance(module.parent, ModuleBase):
        module = module.parent
    return module._state


def _adopt_outside(parent: Any, module: Any) -> Any:
    """A clone of a Module built outside any Module, shared per original instance."""
    root = _root_state(parent)
    cache = root.adopt_cache
    if cache is None:
        cache = root.adopt_cache = {}
    hit = cache.get(id(module))
    if hit is not None:
        return hit[1]
    # The adopting class may decide (class attribute), else the global config.
    keep_name = getattr(type(parent), "preserve_adopted_names", None)
    if keep_name is None:
        keep_name = config.flax_preserve_adopted_names
    clone = module.clone(parent=None, name=None)
    if keep_name and module.name is not None:
        clone.__dict__["name"] = module.name
        clone.__dict__["_adopted_name"] = True
    cache[id(module)] = (module, clone)  # holding the original keeps its id unique
    return clone


def register_submodules(parent: Any, attr: str, value: Any) -> Any:
    """Names and binds every Module inside ``value`` (assigned to ``parent.attr``).

    Returns ``value`` frozen the way Flax stores setup attributes and fields: lists
    become tuples and dicts become FrozenDicts.
    """
    queue: list[Any] = []

    def visit(v: Any, suffix: str) -> Any:
        if isinstance(v, ModuleBase):
            vd = v.__dict__
            if vd["parent"] is None:
                v = _adopt_outside(parent, v)
                vd = v.__dict__
                if vd.pop("_adopted_name", False):
                    vd["parent"] = parent
                    queue.append(v)
                    return v
            if vd["name"] is None:
                vd["parent"] = parent
                vd["name"] = attr + suffix
                queue.append(v)
            return v
        t = type(v)
        if t is list or t is tuple:
            return tuple([visit(x, f"{suffix}_{i}") for i, x in enumerate(v)])
        if isinstance(v, tuple) and hasattr(v, "_fields"):  # namedtuple: keep its type
            return t(*[visit(x, f"{suffix}_{i}") for i, x in enumerate(v)])
        if isinstance(v, Mapping) and not isinstance(v, ModuleBase):
            keys = list(v)
            try:  # name in key order, as a pytree flattens a dict
                keys.sort()
            except TypeError:
                pass
            return FrozenDict({k: visit(v[k], f"{suffix}_{k}") for k in keys})
        return v

    frozen = visit(value, "")
    for m in queue:
        if m.__dict__.get("scope") is None:
            attach(parent, m, m.name)
    return frozen


_CONTAINERS = (list, tuple, dict, FrozenDict)


def try_setup(module: Any, shallow: bool = False) -> None:
    """Runs ``setup`` once, after adopting submodules passed as fields.

    ``shallow=True`` only adopts the fields (what ``bind`` does eagerly). A no-op on an
    unbound Module or while setup is already running.
    """
    d = module.__dict__
    st = d["_state"]
    if st.in_setup or d.get("scope") is None:
        return
    cls = type(module)
    st.in_setup = True
    stack = context.module_stack
    stack.append(module)
    try:
        if st.setup_called == SETUP_NONE:
            for fname in cls._flaxen_fields:
                v = d.get(fname)
                if type(v) in _CONTAINERS or isinstance(v, ModuleBase):
                    d[fname] = register_submodules(module, fname, v)
            st.setup_called = SETUP_FIELDS
        if not shallow and st.setup_called != SETUP_DONE:
            raw = cls._flaxen_setup
            if raw is not None:
                if hooks.active:
                    run_intercepted(module, raw, "setup", (), {})
                else:
                    raw(module)
            st.setup_called = SETUP_DONE
    finally:
        st.in_setup = False
        stack.pop()
