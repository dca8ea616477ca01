"""The parts of a Variable that stand without the Variable class.

:mod:`flaxen.nnx.variablelib` builds ``Variable`` from these and re-exports every name here;
the public ones (``Empty``/``EMPTY``, ``is_array_ref``, ``variable_repr_items``) report
``variablelib`` as their ``__module__``, their public home (``MISSING`` is
:data:`flaxen.typing.MISSING`, as in Flax). The parts:

- markers: ``EMPTY`` (a Variable slot whose value is absent), ``MISSING`` (an argument not
  given), and the metadata every Variable carries with its defaults (``hijax``, ``ref``,
  ``eager_sharding``);
- hooks: the metadata keys of Flax 0.8.3's hooks and of today's, turning either spelling into
  a tuple, running them, and the two argument orders of the axis hooks;
- metadata: renaming the old spellings of ``out_sharding``, taking an entry given both by an
  initializer and to the constructor, comparing values, and the items of a Variable's repr;
- ``jax.Ref``: telling one apart cheaply, reading it, and refusing one as a constructor value.

``VariableMetadata`` stays in ``variablelib``: its hook fields are typed by ``Variable``.
"""

from __future__ import annotations

import typing as tp
import warnings

import jax

from flaxen.errors import InvalidNNXValueError
from flaxen.nnx import reprlib as _reprlib
from flaxen.typing import MISSING, Missing, SizeBytes  # noqa: F401 - Missing: as in Flax

# the public names' home: they are imported and re-exported by it
_HOME = "flaxen.nnx.variablelib"


# -- markers -------------------------------------------------------------------------------

class Empty:
    """Marks a Variable slot whose value is absent (see :meth:`GraphDef.make_empty`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Empty"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Empty)

    def __hash__(self) -> int:
        return hash(Empty)


Empty.__module__ = _HOME  # public as variablelib.Empty; the surface check reads __module__
EMPTY = Empty()
jax.tree_util.register_pytree_node(Empty, lambda e: ((), None), lambda aux, c: EMPTY)


_DEFAULT_REQUIRED = {"hijax": False, "ref": False, "eager_sharding": True}


# -- hooks ---------------------------------------------------------------------------------

# Flax 0.8.3's hook arguments (the 0.8.3 face spells them so): stored under these metadata
# keys as tuples; axis hooks get ``(variable, axis_name, axis_index)``
_HOOK_NAMES = (
    "set_value_hooks",
    "get_value_hooks",
    "create_value_hooks",
    "add_axis_hooks",
    "remove_axis_hooks",
)
# today's hook metadata (a callable or a tuple); axis hooks get ``(variable, index, name)``
_ON_NAMES = ("on_set_value", "on_get_value", "on_create_value", "on_add_axis",
             "on_remove_axis")
_HOOKS_DEPRECATED = ("Variable hooks are deprecated. Create your own Variable type and "
                     "overload `get_value` and `set_value` instead.")


def _as_hooks(h: tp.Any) -> tuple:
    if h is None:
        return ()
    if callable(h):
        return (h,)
    return tuple(h)


def _run_hooks(var: tp.Any, value: tp.Any, meta: dict, legacy: str, key: str) -> tp.Any:
    """Passes ``value`` through the 0.8.3 ``legacy`` hooks, then today's ``key`` hooks."""
    for hook in meta.get(legacy, ()):
        value = hook(var, value)
    hooks = meta.get(key)
    if hooks is not None:
        for hook in _as_hooks(hooks):
            value = hook(var, value)
    return value


def _axis_args(a: tp.Any, b: tp.Any) -> tuple[tp.Any, tp.Any]:
    # today: (axis_index: int, axis_name); Flax 0.8.3: (axis_name, axis_index: int)
    if isinstance(b, int) and not isinstance(b, bool) and not isinstance(a, int):
        return b, a
    return a, b


# -- metadata ------------------------------------------------------------------------------

_SHARDING_NAMES_DEPRECATED = "'sharding_names' is deprecated, use 'out_sharding' instead."


def _remap_sharding(metadata: dict) -> None:
    """Renames the old spellings of the sharding names to ``out_sharding`` in place."""
    if "sharding" in metadata:
        # the Flax 0.8.3 face shares this constructor and spells it `sharding`, so this
        # rename is silent (Flax 0.12.8 warns); its readers accept `out_sharding`
        metadata["out_sharding"] = metadata.pop("sharding")
    if "sharding_names" in metadata:
        warnings.warn(_SHARDING_NAMES_DEPRECATED, DeprecationWarning, stacklevel=4)
        metadata["out_sharding"] = metadata.pop("sharding_names")


def _pick(meta: dict, key: str, given: tp.Any, *, keep: bool = False) -> tp.Any:
    if key not in meta:
        return given
    found = meta[key] if keep else meta.pop(key)
    if given is not None and given != found:
        raise ValueError(
            f"`{key}` is given both by the initializer's metadata ({found}) and to the "
            f"Variable constructor ({given}); give it in one place.")
    return found


def _leaves_equal(a: tp.Any, b: tp.Any) -> bool:
    """Same tree structure and equal leaves (arrays compared by shape and every element)."""
    ta: tp.Any  # jaxlib's PyTreeDef is untyped here
    tb: tp.Any
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb:
        return False
    for x, y in zip(la, lb):
        if x is y:
            continue
        if hasattr(x, "shape") or hasattr(y, "shape"):
            import numpy as np

            if not (np.shape(x) == np.shape(y) and bool(np.all(np.asarray(x) == np.asarray(y)))):
                return False
        elif x != y:
            return False
    return True


def variable_repr_items(type_name: str, value: tp.Any, metadata: tp.Mapping[str, tp.Any],
                        raw_value: tp.Any = MISSING) -> tp.Iterator[tp.Any]:
    """The ``__nnx_repr__`` items of a Variable: a ``# count (bytes)`` header comment (of
    ``raw_value`` when given, else of ``value``), the value, then the metadata that differs
    from the defaults every Variable carries."""
    from flaxen import config

    stats = SizeBytes.from_any(value if raw_value is MISSING else raw_value)
    yield _reprlib.Object(type=type_name, comment=f" # {stats}" if stats else "")
    yield _reprlib.Attr("value", value)
    # left out at the configured defaults (as Flax: flax_hijax_variable and
    # flax_always_shard_variable say what a Variable gets when not told)
    defaults = {"hijax": config.flax_hijax_variable, "ref": False,
                "eager_sharding": config.flax_always_shard_variable}
    for key, item in metadata.items():
        if defaults.get(key, MISSING) != item:
            yield _reprlib.Attr(key, item)


variable_repr_items.__module__ = _HOME  # public there; the surface check reads __module__


# -- jax.Ref -------------------------------------------------------------------------------

_REF_TYPE: type = jax.Ref
_TRACER_TYPE: type = jax.core.Tracer


def is_array_ref(x: tp.Any) -> bool:
    """Whether ``x`` is a ``jax.Ref`` (a mutable array), concrete or traced."""
    # jax.Ref's metaclass check costs microseconds (it imports per call): test the concrete
    # class directly and pay the full check only for tracers
    if type.__instancecheck__(_REF_TYPE, x):
        return True
    return isinstance(x, _TRACER_TYPE) and isinstance(x, _REF_TYPE)


is_array_ref.__module__ = _HOME  # public there; the surface check reads __module__


def _ref_read(x: tp.Any) -> tp.Any:
    return x[...] if is_array_ref(x) else x


def _check_hooks_free(value: tp.Any) -> None:
    if any(is_array_ref(leaf) for leaf in jax.tree_util.tree_leaves(value)):
        raise InvalidNNXValueError(
            "", "Cannot pass a jax.Ref directly to a Variable constructor; pass the array "
            "and ref=True instead (the Variable then creates and owns the Ref).")
