"""Global configuration flags of flaxen (``flaxen.config``).

Every flag has a ``flax_`` prefixed name, a default, and an environment-variable override
``FLAX_<NAME>`` that is read once, when the flag is defined (at import). At run time:

>>> from flaxen import config
>>> config.flax_return_frozendict
False
>>> config.update('flax_return_frozendict', True)
>>> config.flax_return_frozendict
True
>>> config.update('flax_return_frozendict', False)
>>> with config.temp_flip_flag('return_frozendict', True):
...     config.flax_return_frozendict
True

Reading a flag is a plain instance-attribute read, so library code may consult flags on
hot paths. Boolean environment values accept (any case) ``y yes t true on 1`` and
``n no f false off 0``; anything else raises ``ValueError`` naming the variable.
"""

from __future__ import annotations

import contextlib
import operator
import os
from collections.abc import Iterator
from contextlib import contextmanager  # noqa: F401 - importable from here in Flax
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, overload  # noqa: F401

__all__ = [
    "Config",
    "FlagHolder",
    "bool_flag",
    "config",
    "define_bool_state",
    "int_flag",
    "static_bool_env",
    "static_int_env",
    "temp_flip_flag",
]

_T = TypeVar("_T")

_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})


def static_bool_env(varname: str, default: bool) -> bool:
    """Read environment variable ``varname`` as a bool, or return ``default`` if unset.

    True values (any case): ``y yes t true on 1``; false values: ``n no f false off 0``.
    Raises ``ValueError`` for anything else.

    >>> import os
    >>> os.environ['MY_FLAG_EXAMPLE'] = 'Yes'
    >>> static_bool_env('MY_FLAG_EXAMPLE', False)
    True
    >>> static_bool_env('SURELY_UNSET_FLAG_EXAMPLE', True)
    True
    """
    raw = os.environ.get(varname)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(
        f"invalid truth value {raw!r} for environment variable {varname!r}. "
        f"Set it to one of {sorted(_TRUE)} or {sorted(_FALSE)}, or unset it."
    )


def static_int_env(varname: str, default: int | None) -> int | None:
    """Read environment variable ``varname`` as an int, or return ``default`` if unset.

    Raises ``ValueError`` if the variable is set to something that is not an integer.

    >>> import os
    >>> os.environ['MY_DEPTH_EXAMPLE'] = '3'
    >>> static_int_env('MY_DEPTH_EXAMPLE', None)
    3
    """
    raw = os.environ.get(varname)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"invalid integer value {raw!r} for environment variable {varname!r}. "
            "Set it to an integer such as 3, or unset it."
        ) from None


class _UnknownFlagError(LookupError, AttributeError):
    # temp_flip_flag of an unknown flag: a LookupError like update's; an AttributeError too,
    # which is what Flax's (an attribute read of the flag) raises
    pass


class FlagHolder(Generic[_T]):
    """A handle on one flag; ``holder.value`` reads the current value.

    Constructed as in Flax, ``FlagHolder(name, help)``: the value is read from the module's
    ``config``. ``config=`` ties the holder to another :class:`Config` (for private flag sets).
    Deliberately not usable as a bool: ``if holder:`` would always be true, so it raises.

    >>> from flaxen import configurations
    >>> h = configurations.flax_return_frozendict
    >>> h.name, h.__name__, h.value
    ('flax_return_frozendict', '_return_frozendict', False)
    """

    def __init__(self, name: str, help: str, config: Config | None = None) -> None:
        self._config = config
        self.name = name
        self.help = help
        # Flax's holders drop four characters, keeping the underscore: '_profile'
        self.__name__ = name[4:] if name.startswith("flax_") else name
        self.__doc__ = f"Flag holder for `{name}`.\n\n{help}"

    @property
    def value(self) -> _T:
        return (config if self._config is None else self._config)._read(self.name)

    def __bool__(self):
        raise TypeError(
            f"bool() is not supported for the flag holder {self.name!r}; "
            f"use {self.name}.value (or flaxen.config.{self.name}) instead."
        )

    def __repr__(self) -> str:
        return f"FlagHolder({self.name}={self.value!r})"


class _Fast:
    """Plain attributes mirroring the flag values, read by each flag's property in C."""


class _DictView:
    """Attribute reads served from a dict: stands in for :class:`_Fast` while ``_values`` is
    swapped for a foreign dict."""

    __slots__ = ("_d",)

    def __init__(self, d: dict) -> None:
        self._d = d

    def __getattr__(self, name: str) -> Any:
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None


def _flag_property(name: str, help: str) -> property:
    # Flax makes each flag a read-only property of Config. The getter is a C-level attrgetter
    # on the mirror object, so a flag read stays cheap enough for hot paths; the setter and
    # deleter only exist to point at config.update in their error.
    def refuse_set(self: Config, value: Any) -> None:
        raise AttributeError(
            f"Set config options with flaxen.config.update({name!r}, {value!r}), "
            "not by assignment."
        )

    def refuse_del(self: Config) -> None:
        raise AttributeError(f"Config option {name!r} cannot be deleted.")

    return property(operator.attrgetter(f"_fast.{name}"), refuse_set, refuse_del, help)


class _Values(dict):
    """The flag values; every write is mirrored into the owning Config's fast attributes."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Config) -> None:
        super().__init__()
        self._owner = owner

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        if self._owner._values is self:
            setattr(self._owner._fast, name, value)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self._owner._fast.__dict__.pop(name, None)


def _get_values(self: Config) -> dict[str, Any]:
    return self.__dict__["_values"]


def _set_values(self: Config, values: Any) -> None:
    # `mock.patch.object(config, '_values', {})` swaps the store: flags then read that dict
    if not isinstance(values, dict):
        raise TypeError(
            f"config._values must be a dict of option values, got {type(values).__name__}."
        )
    self.__dict__["_values"] = values
    if isinstance(values, _Values) and values._owner is self:
        fast = _Fast()
        fast.__dict__.update(values)
        self.__dict__["_fast"] = fast
    else:
        self.__dict__["_fast"] = _DictView(values)


class Config:
    """The set of flaxen flags; values are attributes (``config.flax_profile``).

    Set them with :meth:`update` (or temporarily with :meth:`temp_flip_flag`), never by
    assignment, so that typos and wrong types are caught.

    Each flag is a read-only property of the class, as in Flax. The values live in the
    mapping ``config._values`` (as in Flax) and are mirrored into a plain object the properties
    read, so a flag read on a hot path costs one C-level attribute lookup. Code that swaps
    ``_values`` for another dict (``mock.patch.object(config, '_values', {})``) gets a config
    backed by that dict until the original is put back. Other attributes may be set freely.
    """

    _values = property(_get_values, _set_values)
    _fast: Any
    # Metadata needed only when defining/updating flags.
    _kinds: dict[str, type]
    _helps: dict[str, str]

    def __init__(self) -> None:
        self._kinds = {}
        self._helps = {}
        self._values = _Values(self)

    def _define(self, name: str, kind: type, value: Any, help: str) -> FlagHolder:
        if name in self._values:
            raise RuntimeError(
                f"Config option {name!r} is already defined; pick another name, or update "
                f"the existing one with config.update({name!r}, value)."
            )
        self._kinds[name] = kind
        self._helps[name] = help
        self._values[name] = value
        if not isinstance(Config.__dict__.get(name), property):
            setattr(Config, name, _flag_property(name, help))
        return FlagHolder(name, help, self)

    def _read(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise LookupError(
                f"Unrecognized config option: {name!r}. Known options: {self._known()}."
            ) from None

    def _known(self) -> str:
        return ", ".join(sorted(self._values))

    def _check(self, name: str, value: Any) -> Any:
        # Flax stores whatever it is given; flaxen does too, except that values meaning a bool
        # (0/1, numpy bools, the strings the environment variables accept) become real bools,
        # and integer strings become ints, so `update('flax_profile', 'false')` turns the flag
        # off instead of storing a truthy string.
        kind = self._kinds.get(name)
        if kind is bool:
            if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
                return bool(value)
            if getattr(value, "shape", None) == () and getattr(
                    getattr(value, "dtype", None), "kind", None) == "b":
                return bool(value)
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
        elif kind is int and isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        return value

    def update(self, name_or_holder: str | FlagHolder, value: Any, /) -> None:
        """Set a flag by name (``'flax_<name>'``) or by its :class:`FlagHolder`.

        Raises ``LookupError`` for an unknown name (the message lists the known flags). Values
        are stored as given (as in Flax), except that for a bool flag ``0``/``1``, numpy bools
        and the strings an environment variable accepts (``'yes'``, ``'off'``, ...) become
        ``True``/``False``, and for an int flag an integer string becomes an int.
        """
        name = (name_or_holder.name if isinstance(name_or_holder, FlagHolder)
                else name_or_holder)
        if name not in self._values:
            raise LookupError(
                f"Unrecognized config option: {name!r}. Known options: {self._known()}."
            )
        self._values[name] = self._check(name, value)

    @contextlib.contextmanager
    def temp_flip_flag(self, var_name: str, var_value: bool) -> Iterator[None]:
        """Set flag ``flax_<var_name>`` to ``var_value`` inside a ``with`` block.

        ``var_name`` may be given with or without the ``flax_`` prefix. The previous value
        is restored on exit, also when the block raises.
        """
        name = var_name if var_name in self._values else f"flax_{var_name}"
        if name not in self._values:
            raise _UnknownFlagError(
                f"Unrecognized config option: {var_name!r}. Known options: {self._known()}."
            )
        old = self._values[name]
        self.update(name, var_value)
        try:
            yield
        finally:
            self._values[name] = old

    def __getattr__(self, name: str) -> Any:
        # Reached when normal lookup fails: an option put into `_values` directly (it has no
        # property), a flag missing from a swapped-in dict, or an unknown name.
        if name.startswith("_"):
            raise AttributeError(name)
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(
            f"flaxen.config has no option {name!r}. Known options: {self._known()}."
        )

    def __repr__(self) -> str:
        # Flax's layout, to the character (one flag a line, in definition order, each comma
        # followed by a space before the line break).
        items = ", ".join(f"\n  {n}={v!r}" for n, v in self._values.items())
        return f"Config({items}\n)"


config = Config()


def temp_flip_flag(var_name: str, var_value: bool) -> contextlib.AbstractContextManager[None]:
    """``config.temp_flip_flag`` as a module function; also usable as a test decorator.

    >>> @temp_flip_flag('return_frozendict', True)
    ... def check():
    ...     return config.flax_return_frozendict
    >>> check(), config.flax_return_frozendict
    (True, False)
    """
    return config.temp_flip_flag(var_name, var_value)


def bool_flag(name: str, *, default: bool, help: str) -> FlagHolder[bool]:
    """Define a boolean flag ``name``; environment variable ``NAME.upper()`` overrides it.

    >>> holder = bool_flag('flax_my_feature', default=False, help='...')  # doctest: +SKIP
    >>> config.flax_my_feature  # doctest: +SKIP
    False
    """
    name = name.lower()
    return config._define(name, bool, static_bool_env(name.upper(), default), help)


def int_flag(name: str, *, default: int | None, help: str) -> FlagHolder[int]:
    """Define an integer (or None) flag ``name``; env ``NAME.upper()`` overrides it."""
    name = name.lower()
    return config._define(name, int, static_int_env(name.upper(), default), help)


def define_bool_state(name: str, default: bool, help: str) -> FlagHolder[bool]:
    """Define the boolean flag ``flax_<name>``, overridable by env var ``FLAX_<NAME>``.

    Change it at run time with ``flaxen.config.update('flax_<name>', value)``.

    >>> holder = define_bool_state('my_state', True, '...')  # doctest: +SKIP
    >>> holder.name, config.flax_my_state  # doctest: +SKIP
    ('flax_my_state', True)
    """
    return bool_flag(f"flax_{name}", default=default, help=help)


# --- The flags -------------------------------------------------------------------------
# Defaults follow Flax 0.12 (the documented 0.6 behaviour of `init` returning FrozenDict
# is available through flax_return_frozendict=True).

flax_filter_frames = bool_flag(
    "flax_filter_frames", default=True,
    help="Hide flaxen's internal frames from tracebacks of errors raised through JAX.")
flax_profile = bool_flag(
    "flax_profile", default=True,
    help="Run Module methods under jax.named_scope so they show up named in profiles.")
flax_use_orbax_checkpointing = bool_flag(
    "flax_use_orbax_checkpointing", default=True,
    help="Make flaxen.training.checkpoints save and restore through Orbax.")
flax_preserve_adopted_names = bool_flag(
    "flax_preserve_adopted_names", default=False,
    help="Keep the names of submodules adopted by a parent Module outside setup/compact.")
flax_return_frozendict = bool_flag(
    "flax_return_frozendict", default=False,
    help="Return FrozenDict (as documented for Flax 0.6) instead of dict from init/apply.")
flax_fix_rng = bool_flag(
    "flax_fix_rng_separator", default=False,
    help="Insert a separator byte between path items when deriving RNG keys, avoiding "
         "collisions such as ('ab', 'c') vs ('a', 'bc'). Changes all derived keys.")
flax_use_flaxlib = bool_flag(
    "flax_use_flaxlib", default=False,
    help="Use Flax's C++ extension (flaxlib) to speed up NNX graph traversal. Accepted for "
    "compatibility; no effect in flaxen, which has no compiled extension.")
flax_array_ref = bool_flag(
    "flax_array_ref", default=False,
    help="Let NNX Variables hold mutable array references (jax.Ref). Accepted for "
    "compatibility; no effect in flaxen, where a Variable holds a reference only when "
    "created with ref=True.")
flax_pytree_module = bool_flag(
    "flax_pytree_module", default=True,
    help="Make NNX Modules pytrees by default (the default of `class M(nnx.Module, pytree=...)`). "
    "As in Flax it is read once, when flaxen.nnx is imported: set it through the "
    "FLAX_PYTREE_MODULE environment variable.")
flax_max_repr_depth = int_flag(
    "flax_max_repr_depth", default=None,
    help="Maximum nesting depth shown by NNX object reprs (deeper objects print as `...`, "
    "as in Flax); None for no limit.")
flax_always_shard_variable = bool_flag(
    "flax_always_shard_variable", default=True,
    help="Shard an NNX Variable with sharding annotations as soon as it is created: the default "
    "of nnx.use_eager_sharding() when no use_eager_sharding(...) context is active.")
flax_hijax_variable = bool_flag(
    "flax_hijax_variable", default=False,
    help="Make new NNX Variables HiJAX Variables by default: the default of hijax= when no "
    "nnx.var_defaults(hijax=...) is active.")
nnx_graph_mode = bool_flag(
    "nnx_graph_mode", default=True,
    help="Default of NNX's graph= switch: True walks Modules as graphs (shared references "
    "kept), False as plain pytrees (tree mode).")
nnx_graph_updates = bool_flag(
    "nnx_graph_updates", default=True,
    help="Default of NNX transforms' graph_updates= switch in graph mode: True propagates "
    "structural changes made inside a transform out of it, False does not.")
