"""Moving variables between Linen collections and NNX Variables, keeping their metadata.

- A Linen leaf becomes a Variable of its collection's type (``params`` -> ``Param``, see
  :mod:`flaxen.nnx._variable_names`); a Linen ``Partitioned`` box becomes ``out_sharding``
  (and ``sharding_rules`` / ``mesh``) metadata and remembers its box type, so the way back
  rebuilds the same box.
- A Variable with metadata of its own goes to Linen as an :class:`NNXMeta` box (a Linen
  ``AxisMetadata``: ``nn.get_partition_spec`` reads its ``out_sharding``); a plain one as
  its bare array.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> from flaxen.nnx.bridge import variables as bv
>>> v = bv.to_nnx_var('params', jnp.ones(2))
>>> type(v).__name__, bv.to_linen_var(v).shape
('Param', (2,))
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax

from flaxen import struct
from flaxen.core import meta
from flaxen.nnx import spmd
from flaxen.nnx._variable_names import variable_name_from_type, variable_type_from_name
from flaxen.nnx.variablelib import Variable
from flaxen.typing import LogicalNames as LogicalNames  # Flax imports it from flax.typing

A = tp.TypeVar("A")
B = tp.TypeVar("B")

# metadata every Variable may carry for its own machinery (not a reason to box)
_PLAIN_KEYS = frozenset({"hijax", "ref", "eager_sharding"})


def _var_value(v: Variable) -> tp.Any:
    getter = getattr(type(v), "get_value", None)
    return getter(v) if getter is not None else v.value


class NNXMeta(struct.PyTreeNode, meta.AxisMetadata[A]):
    """A Linen box for an NNX Variable's value, keeping its type and metadata."""

    var_type: type = struct.field(pytree_node=False)
    value: tp.Any = struct.field(pytree_node=True)
    metadata: dict = struct.field(pytree_node=False)

    def unbox(self) -> A:
        return self.value

    def replace_boxed(self, val: tp.Any) -> NNXMeta:
        return self.replace(value=val)

    def add_axis(self, index: int, params: dict) -> NNXMeta:
        return self

    def remove_axis(self, index: int, params: dict) -> NNXMeta:
        return self

    def get_partition_spec(self) -> jax.sharding.PartitionSpec:
        """The ``PartitionSpec`` of the Variable's ``out_sharding`` (``P()`` without)."""
        spec = spmd.get_var_pspec(self.to_nnx_variable())
        return spec if spec is not None else jax.sharding.PartitionSpec()

    def get_sharding(self, mesh: tp.Any) -> jax.sharding.Sharding:
        return jax.sharding.NamedSharding(mesh, self.get_partition_spec())

    def to_nnx_variable(self) -> Variable:
        return self.var_type(self.value, **self.metadata)


def sort_variable_types(types: tp.Iterable[type]) -> list[type]:
    """``types`` with the most derived Variable types first (a stable sort on the number of
    Variable classes in each type's MRO), so a subclass is matched before its base.

    >>> from flaxen import nnx
    >>> class Special(nnx.Param): ...
    >>> [t.__name__ for t in sort_variable_types([nnx.Variable, nnx.Param, Special])]
    ['Special', 'Param', 'Variable']
    """
    types = list(types)

    def depth(t: type) -> int:
        return sum(1 for base in t.__mro__
                   if isinstance(base, type) and issubclass(base, Variable))

    return sorted(types, key=lambda t: -depth(t))


def get_col_name(keypath: tp.Sequence[tp.Any]) -> str:
    """The Linen collection a leaf of a Linen variables dict belongs to, from its JAX key path
    (the first key names the collection).

    >>> import jax, jax.numpy as jnp
    >>> [(path, _)] = jax.tree_util.tree_flatten_with_path({'params': {'w': jnp.ones(1)}})[0]
    >>> get_col_name(path)
    'params'
    """
    if not keypath or not isinstance(keypath[0], jax.tree_util.DictKey):
        raise ValueError(
            f"get_col_name expects the key path of a leaf of a Linen variables dict "
            f"({{collection: {{...}}}}), whose first key is a jax.tree_util.DictKey; got "
            f"{tuple(keypath)!r}. Flatten the variables dict with "
            "jax.tree_util.tree_flatten_with_path to get such paths.")
    return str(keypath[0].key)


def _own_metadata(v: Variable) -> dict:
    return {k: val for k, val in v.get_metadata().items()
            if k not in _PLAIN_KEYS and not (k.endswith("_hooks") and not val)}


def is_vanilla_variable(vs: Variable) -> bool:
    """True when ``vs`` has no metadata of its own (only the built-in keys, empty hooks)."""
    return not _own_metadata(vs)


def _box_fields(box_type: type) -> set[str]:
    if dataclasses.is_dataclass(box_type):
        return {f.name for f in dataclasses.fields(box_type)}
    return set()


def to_linen_var(vs: Variable) -> tp.Any:
    """The Linen leaf for Variable ``vs`` (see the module docstring)."""
    v = vs
    metadata = v.get_metadata()
    value = _var_value(v)
    box_type = metadata.get("linen_meta_type")
    if box_type is not None:
        fields = _box_fields(box_type)
        kwargs: dict[str, tp.Any] = {"value": value}
        if "names" in fields:
            kwargs["names"] = tuple(metadata.get("out_sharding") or ())
        if "mesh" in fields:
            kwargs["mesh"] = metadata.get("mesh")
        if "rules" in fields and metadata.get("sharding_rules") is not None:
            kwargs["rules"] = metadata["sharding_rules"]
        return box_type(**kwargs)
    if is_vanilla_variable(v):
        return value
    # the whole metadata, the modes included (as Flax): the Variable rebuilt from the box
    # (``to_nnx_variable``, e.g. by ``nn.get_partition_spec``) is created as this one was,
    # with eager sharding off if it was off here
    return NNXMeta(type(v), value, {k: val for k, val in metadata.items()
                                    if not (k.endswith("_hooks") and not val)})


def to_nnx_var(col: str, x: tp.Any) -> Variable:
    """The Variable for Linen leaf ``x`` of collection ``col``."""
    vtype = variable_type_from_name(col, allow_register=True)
    if isinstance(x, NNXMeta):
        return x.to_nnx_variable()
    if isinstance(x, meta.Partitioned) or (
            isinstance(x, meta.AxisMetadata) and hasattr(x, "names")):
        metadata: dict[str, tp.Any] = {"out_sharding": tuple(x.names),
                                       "linen_meta_type": type(x)}
        # a Partitioned-like box: mesh, rules and value are its dataclass fields
        if getattr(x, "mesh", None) is not None:
            metadata["mesh"] = x.mesh  # type: ignore[attr-defined]
        if getattr(x, "rules", None) is not None:
            metadata["sharding_rules"] = tuple(x.rules)  # type: ignore[attr-defined]
        return vtype(x.value, **metadata)  # type: ignore[attr-defined]
    if isinstance(x, meta.AxisMetadata):
        return vtype(x.unbox(), linen_meta_type=type(x))
    return vtype(x)


def _sorted_keys(tree: tp.Mapping) -> list:
    try:
        return sorted(tree)
    except TypeError:  # keys of mixed types: their own order
        return list(tree)


def _flatten(tree: tp.Mapping, prefix: tuple = (), *, sort: bool = False
             ) -> dict[tuple, tp.Any]:
    flat: dict[tuple, tp.Any] = {}
    for k in _sorted_keys(tree) if sort else tree:
        v = tree[k]
        if isinstance(v, tp.Mapping) and v:
            flat.update(_flatten(v, (*prefix, k), sort=sort))
        else:
            flat[(*prefix, k)] = v
    return flat


def _unflatten(flat: tp.Mapping[tuple, tp.Any]) -> dict:
    out: dict = {}
    for path, v in flat.items():
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = v
    return out


def linen_vars_to_nnx_attrs(variables: tp.Mapping[str, tp.Any]) -> dict[str, tp.Any]:
    """Linen ``{collection: {path...: leaf}}`` -> ``{path...: Variable}`` (collections merged:
    the Variable's type records the collection)."""
    flat: dict[tuple, Variable] = {}
    # collections and names in sorted order (as a pytree map of the variables gives them in
    # Flax): the wrapper's attributes, and so its repr, come in Flax's order
    for col in _sorted_keys(variables):
        tree = variables[col]
        if not isinstance(tree, tp.Mapping):
            tree = {}
        for path, leaf in _flatten(tree, sort=True).items():
            if path in flat:
                raise ValueError(
                    f"Variable path {'/'.join(map(str, path))!r} is in both collection "
                    f"{variable_name_from_type(type(flat[path]))!r} and {col!r}; NNX keeps one "
                    "Variable per path: rename one of them in the Linen module.")
            flat[path] = to_nnx_var(col, leaf)
    return _unflatten(flat)


def nnx_attrs_to_linen_vars(nnx_attrs: tp.Mapping[str, tp.Any]) -> dict:
    """The inverse of :func:`linen_vars_to_nnx_attrs`."""
    flat: dict[tuple, tp.Any] = {}
    for path, v in _flatten(nnx_attrs).items():
        if not isinstance(v, Variable):
            raise ValueError(
                f"Cannot tell the Linen collection of {'/'.join(map(str, path))!r}: expected "
                f"an nnx.Variable, got a {type(v).__name__}.")
        col = variable_name_from_type(type(v), allow_register=True)
        flat[(col, *path)] = to_linen_var(v)
    return _unflatten(flat)


def with_partitioning(fn: tp.Callable[..., tp.Any], names: tp.Sequence[tp.Any],
                      mesh: tp.Any = None) -> tp.Callable[..., tp.Any]:
    """Linen's ``with_partitioning`` signature, producing NNX ``out_sharding`` metadata; the
    variable goes back to Linen as an ``nn.Partitioned`` box."""
    return spmd.with_partitioning(fn, tuple(names), mesh, linen_meta_type=meta.Partitioned)
