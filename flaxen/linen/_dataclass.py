"""The dataclass transform applied to every Module subclass.

``class Foo(nn.Module)`` becomes a dataclass whose annotated attributes are constructor
arguments, with the reserved fields ``parent`` and ``name`` keyword-only and last. Equality
and hashing compare the fields (as Flax: ``unsafe_hash`` unless the class defines
``__hash__``); ``repr`` is the Module's own. ``class Foo(nn.Module, kw_only=True)`` makes
Foo's own fields keyword-only (not inherited by subclasses).

The constructor is generated here rather than by ``dataclasses``: it writes the fields
straight into the instance ``__dict__``, so constructing a Module does not pay for the
frozen-module ``__setattr__`` once per field. Methods are wrapped (see
``_interception.wrap_method``) so that calling them on a bound Module runs ``setup`` first
and tracks the compact method.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import sys
import types
from typing import Any

from flaxen import errors
from flaxen.linen._interception import is_wrapped, wrap_descriptor, wrap_method, wrap_setup
from flaxen.linen._naming import adopt_after_init

_RESERVED = ("parent", "name")
_MISSING = dataclasses.MISSING


def _check_annotations(cls: type) -> None:
    annotations = cls.__dict__.get("__annotations__", {})
    if any(k in annotations for k in _RESERVED):
        raise errors.ReservedModuleAttributeError(annotations)


def _generate_init(cls: Any, fields: list[dataclasses.Field]) -> Any:
    """An ``__init__`` equivalent to the dataclass one, writing to ``__dict__`` directly."""
    # The helpers reach the body as closure cells, so the function can keep the module's
    # globals (as dataclasses' __init__ does: typing.get_type_hints resolves string
    # annotations there).
    globs: dict[str, Any] = {"_MISSING": _MISSING}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        dflt = f"_dflt_{f.name}"
        if f.init:
            if f.default is not _MISSING:
                globs[dflt] = f.default
                param = f"{f.name}={dflt}"
                value = f.name
            elif f.default_factory is not _MISSING:
                globs[dflt] = f.default_factory
                param = f"{f.name}=_MISSING"
                value = f"{dflt}() if {f.name} is _MISSING else {f.name}"
            else:
                param = f.name
                value = f.name
            # parent and name are keyword-only when called, whatever their field says
            (keyword if f.kw_only or f.name in _RESERVED else positional).append(param)
        elif f.default is not _MISSING:
            globs[dflt] = f.default
            value = dflt
        elif f.default_factory is not _MISSING:
            globs[dflt] = f.default_factory
            value = f"{dflt}()"
        else:
            continue
        body.append(f"    _d[{f.name!r}] = {value}")
    params = ["self", *positional]
    if keyword:
        params += ["*", *keyword]
    check = ""
    if cls.__post_init__ is not _module_post_init[0]:
        # A custom __post_init__ may change fields after super().__post_init__(): adopt
        # submodule fields only once it has returned. One that never called super() is
        # reported by init/apply (IncorrectPostInitOverrideError).
        globs["_adopt"] = adopt_after_init
        check = "    if '_state' in _d:\n        _adopt(self)\n"
    inner = (
        f"def __init__({', '.join(params)}):\n"
        "    _d = self.__dict__\n"
        + "\n".join(body) + "\n"
        "    self.__post_init__()\n"
        + check
    )
    names = list(globs)
    src = (f"def _factory({', '.join(names)}):\n"
           + "".join(f"    {line}\n" for line in inner.splitlines())
           + "    return __init__\n")
    namespace: dict[str, Any] = {}
    exec(src, namespace)  # noqa: S102 - generated from the class's own field list
    made = namespace["_factory"](*(globs[n] for n in names))
    module = sys.modules.get(cls.__module__)
    init: Any = types.FunctionType(made.__code__, module.__dict__ if module else {},
                                   "__init__", made.__defaults__, made.__closure__)
    init.__kwdefaults__ = made.__kwdefaults__
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    shown = [f.name for f in fields if f.init and f.name in _RESERVED and not f.kw_only]
    if shown:
        init.__signature__ = _flax_signature(init, shown)
    return init


def _flax_signature(init: Any, shown: list[str]) -> inspect.Signature:
    """The signature Flax reports for a Module's ``__init__``: parent and name listed as
    positional-or-keyword after the other positional fields (Flax's ``__init__`` still
    refuses them by position, as this one does)."""
    sig = inspect.signature(init)
    params = [p for p in sig.parameters.values() if p.name not in shown]
    cut = sum(p.kind is not inspect.Parameter.KEYWORD_ONLY for p in params)
    moved = [sig.parameters[n].replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
             for n in shown]
    return sig.replace(parameters=params[:cut] + moved + params[cut:])


def _unbound_only_hash(field_hash: Any) -> Any:
    """The generated field hash, refused for a bound Module (its variables can change)."""

    def __hash__(self) -> int:
        if self.__dict__.get("scope") is not None:
            raise TypeError("Can't call __hash__ on modules that hold variables.")
        return field_hash(self)

    setattr(__hash__, "_flaxen_field_hash", field_hash)  # noqa: B010 - read by clone
    return __hash__


# dataclasses' field kinds (private, stable since 3.7): InitVars need dataclasses' __init__.
_FIELD = dataclasses._FIELD  # type: ignore[attr-defined]
_FIELD_INITVAR = dataclasses._FIELD_INITVAR  # type: ignore[attr-defined]

# Set by _module.py once Module exists: (Module.__post_init__,).
_module_post_init: list[Any] = [None]
# Set by _module.py once Module exists: the (evaluated) types of the parent and name fields.
_reserved_types: dict[str, Any] = {}


def _resolve_own_types(cls: Any, fields: list[dataclasses.Field]) -> None:
    """Evaluates the string annotations of one of flaxen's own Modules.

    Flax's layers are written without ``from __future__ import annotations``, so their
    field types, class annotations and ``__init__`` signature hold objects; flaxen's
    modules postpone annotations. A name that cannot be evaluated yet keeps its string.
    """
    module = sys.modules.get(cls.__module__)
    own = cls.__dict__.get("__annotations__")
    if module is None or not own:
        return
    local = dict(vars(cls))
    for f in fields:
        if not isinstance(f.type, str) or own.get(f.name) != f.type:
            continue
        try:
            value = eval(f.type, module.__dict__, local)  # noqa: S307 - flaxen's own source
        except Exception:  # noqa: BLE001 - a forward reference: keep the string
            continue
        f.type = own[f.name] = value


def make_dataclass(cls: Any, kw_only: bool = False) -> None:
    """Turns ``cls`` into a dataclass with the Module conventions, in place."""
    own_setattr = cls.__dict__.get("__setattr__")
    own_hash = "__hash__" in cls.__dict__
    # Bases list parent/name as positional (below); dataclasses would then see defaulted
    # positional fields before this class's own required ones. They are keyword-only while
    # dataclasses builds the class, as Module declares them.
    inherited = [
        f for base in cls.__mro__[1:]
        for k, f in base.__dict__.get("__dataclass_fields__", {}).items()
        if k in _RESERVED and not f.kw_only
    ]
    for f in inherited:
        f.kw_only = True
    try:
        dataclasses.dataclass(
            cls,
            eq=True,
            repr=False,
            unsafe_hash=not own_hash,
            kw_only=kw_only,
        )
    finally:
        for f in inherited:
            f.kw_only = False
    if not own_hash:
        cls.__hash__ = _unbound_only_hash(cls.__hash__)
    if own_setattr is not None:
        cls.__setattr__ = own_setattr
    # The base Module declares parent and name, so dataclasses lists them first; Flax lists
    # them last (dataclasses.fields, astuple, the keyword order of __init__).
    declared = cls.__dataclass_fields__
    has_initvar = any(f._field_type is _FIELD_INITVAR for f in declared.values())
    # a ``_: KW_ONLY`` marker in this class's own annotations makes parent and name
    # keyword-only too, as in Flax (a subclass without its own marker does not)
    kw_marker = any(
        a is dataclasses.KW_ONLY or (isinstance(a, str) and a.split(".")[-1] == "KW_ONLY")
        for a in cls.__dict__.get("__annotations__", {}).values())
    if any(n in declared for n in _RESERVED):
        reordered = {k: f for k, f in declared.items() if k not in _RESERVED}
        for k in _RESERVED:
            if k not in declared:
                continue
            # Flax appends parent and name as positional fields (``Dense(3, True, ...,
            # parent, name)``) unless the class is kw_only. Each class gets its own copy:
            # the Field objects of bases are shared with them.
            f = copy.copy(declared[k])
            f.kw_only = kw_only or has_initvar or kw_marker
            reordered[k] = f
        cls.__dataclass_fields__ = reordered
    fields = list(cls.__dataclass_fields__.values())
    if cls.__module__.startswith("flaxen."):
        _resolve_own_types(cls, fields)
    for f in fields:
        if f.name in _RESERVED and f.name in _reserved_types:
            f.type = _reserved_types[f.name]
    if _reserved_types and any(n in declared for n in _RESERVED):
        # Flax adds parent and name to each Module class's own annotations, and lists
        # them in __match_args__ unless they are keyword-only.
        if "__annotations__" not in cls.__dict__:
            cls.__annotations__ = {}
        for f in fields:
            if f.name in _RESERVED:
                cls.__dict__["__annotations__"][f.name] = f.type
        cls.__match_args__ = tuple(  # type: ignore[misc]
            f.name for f in fields if f.init and not f.kw_only)
    if not has_initvar:  # InitVars need dataclasses' own __init__ (rare)
        init_fields = [f for f in fields if f._field_type is _FIELD]
        cls.__init__ = _generate_init(cls, init_fields)
    cls._flaxen_custom_post_init = cls.__post_init__ is not _module_post_init[0]
    cls._flaxen_fields = tuple(
        f.name for f in fields
        if f.init and f.name not in _RESERVED and f._field_type is _FIELD
    )


def transform_subclass(cls: Any, kw_only: bool, base_names: frozenset) -> None:
    """The whole ``__init_subclass__`` work: checks, dataclass, method wrapping."""
    # several @compact methods are allowed, as in today's Flax: their submodules share one
    # auto-naming count (Dense_0 in one, Dense_1 in the next)
    _check_annotations(cls)
    make_dataclass(cls, kw_only=kw_only)
    for attr, value in list(cls.__dict__.items()):
        if attr == "setup":
            if inspect.isfunction(value) and not is_wrapped(value):
                setattr(cls, attr, wrap_setup(value))
            continue
        if attr.startswith("__") and attr != "__call__":
            continue
        if attr in base_names or attr in cls._flaxen_fields:
            continue
        if isinstance(value, property):
            setattr(cls, attr, wrap_descriptor(value))
        elif inspect.isfunction(value):
            if getattr(value, "nowrap", False) or is_wrapped(value):
                continue
            setattr(cls, attr, wrap_method(value, getattr(value, "compact", False) is True))
    scoped: dict[str, None] = {}
    for klass in cls.__mro__:
        for n, v in klass.__dict__.items():
            if getattr(v, "compact_name_scope", False) is True:
                scoped[n] = None
    cls._compact_name_scope_methods = tuple(scoped)
    setup = cls.setup
    raw = getattr(setup, "_flaxen_raw", setup)
    cls._flaxen_setup = None if raw is _default_setup[0] else raw


# Set by _module.py: (Module.setup,), the no-op default.
_default_setup: list[Any] = [None]
