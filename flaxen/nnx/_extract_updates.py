"""Variable updates across a transform, as Flax 0.12.8's ``nnx.extract`` computes them in
tree mode (``graph_updates=False``): snapshot the arguments, run the function, collect the
Variables whose value changed (:func:`get_updates`, one :class:`Updates` per prefix value)
and write them into the outer Variables (:func:`apply_updates`). :func:`check_no_aliases`
refuses a Variable reached twice (tree mode cannot express sharing) and returns every
Variable by key path, the map :func:`apply_updates` writes through.

>>> import jax.numpy as jnp
>>> from flaxen import nnx
>>> from flaxen.nnx import extract
>>> m = nnx.Dict(w=nnx.Param(jnp.zeros(2)), n=nnx.BatchStat(jnp.zeros(2)))
>>> args = extract.labeled(args=(m,))
>>> variables = extract.check_no_aliases('demo', **args)
>>> current, snap = extract.snapshot(args)
>>> current.args[0]['n'][...] = jnp.ones(2)  # what a function would do inside
>>> updates = extract.get_updates(current, snap)
>>> [jax.tree_util.keystr(p) for p in updates[0].paths]
['.args[0].n']
>>> extract.apply_updates(variables, updates)
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx import reprlib
from flaxen.nnx._extract_args import labeled
from flaxen.nnx._extract_prefix import Mask, broadcast_prefix_map
from flaxen.nnx._tree_convert import can_update
from flaxen.nnx.variablelib import Variable

__all__ = [
    "KeepFn", "Updates", "apply_updates", "check_no_aliases", "check_same_variables",
    "copy_var_structure", "get_updates", "snapshot", "to_masked", "update_carry_variables",
    "variable_changed",
]

A = tp.TypeVar("A")
KeyPath = tuple[tp.Any, ...]

KeepFn = tp.Callable[[tuple[tp.Any, ...], tp.Any, Variable, Variable], bool]


def _is_var(x: tp.Any) -> bool:
    return isinstance(x, Variable)


def snapshot(args: A) -> tuple[A, A]:
    """``(current, snapshot)``: ``current`` has fresh containers around the same Variables;
    ``snapshot`` has new Variable objects holding the same values (so a later
    :func:`variable_changed` sees what was assigned since).

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> (cur,), (snap,) = snapshot((v,))
    >>> cur is v, snap is v, snap[...] is v[...]
    (True, False, True)
    """
    current = jax.tree_util.tree_map(lambda x: x, args, is_leaf=_is_var)
    copied = jax.tree_util.tree_map(lambda x: x, args)
    return current, copied


def copy_var_structure(tree: A) -> A:
    """``tree`` with fresh containers around the same Variables (and leaves).

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> tree = {'a': [v]}
    >>> out = copy_var_structure(tree)
    >>> out['a'] is tree['a'], out['a'][0] is v
    (False, True)
    """
    return jax.tree_util.tree_map(lambda x: x, tree, is_leaf=_is_var)


def variable_changed(post: Variable, pre: Variable) -> bool:
    """Whether ``post`` holds another value than ``pre`` (a leaf that is not the same
    object, or another structure, metadata included).

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> (_,), (snap,) = snapshot((v,))
    >>> before = variable_changed(v, snap)
    >>> v[...] = 2.0
    >>> before, variable_changed(v, snap)
    (False, True)
    """
    post_def: tp.Any  # jaxlib's PyTreeDef is untyped here
    pre_def: tp.Any
    post_leaves, post_def = jax.tree_util.tree_flatten(post)
    pre_leaves, pre_def = jax.tree_util.tree_flatten(pre)
    return bool(post_def != pre_def) or any(a is not b for a, b in zip(post_leaves, pre_leaves))


@dataclasses.dataclass(slots=True)
class Updates(tp.Sequence[tuple[KeyPath, Variable]], reprlib.Representable):
    """Changed Variables by JAX key path, in order: a sequence of ``(path, Variable)``
    pairs, also indexed by path (``updates[path]``). A pytree whose leaves are the
    Variables (the paths are static).

    >>> from flaxen import nnx
    >>> u = Updates.create([(('a',), nnx.Param(1.0))])
    >>> u.append(('b',), nnx.Param(2.0))
    >>> len(u), u.paths, float(u[('b',)][...]), u[0][0]
    (2, [('a',), ('b',)], 2.0, ('a',))
    """

    _keys: list[tp.Any] = dataclasses.field(default_factory=list)
    _values: list[Variable] = dataclasses.field(default_factory=list)

    @classmethod
    def create(cls, items: tp.Iterable[tuple[KeyPath, Variable]] = ()) -> Updates:
        """From ``(path, Variable)`` pairs."""
        out = cls()
        for key, value in items:
            out.append(key, value)
        return out

    def append(self, key: tp.Any, value: Variable) -> None:
        self._keys.append(key)
        self._values.append(value)

    @property
    def paths(self) -> list[KeyPath]:
        return self._keys

    @property
    def leaves(self) -> list[Variable]:
        return self._values

    def __getitem__(self, key: tp.Any) -> tp.Any:
        if isinstance(key, int):
            return self._keys[key], self._values[key]
        if isinstance(key, slice):
            raise NotImplementedError("Slicing is not supported for Updates; iterate over it "
                                      "or index it by position or key path.")
        try:
            return self._values[self._keys.index(key)]
        except ValueError:
            raise KeyError(f"No update at key path {key!r}; the paths are {self._keys}.") from None

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> tp.Iterator[tuple[KeyPath, Variable]]:
        return zip(self._keys, self._values)

    def __nnx_repr__(self) -> tp.Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type=type(self), kv_sep=": ", start="({", end="})")
        for path, value in self:
            yield reprlib.Attr(jax.tree_util.keystr(path), value, use_raw_key=True)


jax.tree_util.register_dataclass(Updates, data_fields=["_values"], meta_fields=["_keys"])


def get_updates(current_tree: A, snapshot_tree: A, *, prefix: tp.Any = None,
                keep_fn: KeepFn | None = None,
                known_prefixes: tp.Iterable[tp.Any] = (None,)) -> list[Updates]:
    """One :class:`Updates` per entry of ``known_prefixes``: the Variables of
    ``current_tree`` that ``keep_fn(path, prefix, current, snapshot)`` keeps (by default,
    those :func:`variable_changed` since :func:`snapshot`), each filed under its prefix
    (``prefix`` is broadcast over ``current_tree``, None leaves are prefix leaves).
    Ref-backed and hijax Variables are skipped: they update in place.

    >>> from flaxen import nnx
    >>> a, b = nnx.Param(1.0), nnx.Param(2.0)
    >>> cur, snap = snapshot((a, b))
    >>> a[...], b[...] = 5.0, 6.0
    >>> by_axis = get_updates(cur, snap, prefix=(0, 1), known_prefixes=(0, 1))
    >>> [u.paths for u in by_axis]
    [[(SequenceKey(idx=0),)], [(SequenceKey(idx=1),)]]
    """
    keep: KeepFn = keep_fn if keep_fn is not None else (
        lambda _path, _p, cur, snap: variable_changed(cur, snap))
    updates = {p: Updates.create() for p in known_prefixes}

    def one(path: tuple, p: tp.Any, current: tp.Any, snap: tp.Any) -> None:
        if not isinstance(current, Variable) or current.hijax or current.ref:
            return
        if keep(path, p, current, snap):
            if p not in updates:
                raise NNXTransformError(
                    jax.tree_util.keystr(path),
                    f"get_updates: the prefix {p!r} of this changed "
                    f"{type(current).__name__} is not one of known_prefixes "
                    f"{tuple(updates)}", "Add it to known_prefixes.")
            updates[p].append(path, current)

    broadcast_prefix_map(one, prefix, current_tree, snapshot_tree, is_leaf=_is_var,
                         prefix_leaf=lambda x: x is None)
    return list(updates.values())


class _MissingUpdateTarget(NNXTransformError, RuntimeError):
    """An update's path names no Variable (Flax raises RuntimeError here)."""


def apply_updates(variables: dict[KeyPath, Variable], updates: list[Updates]) -> None:
    """Writes each update into the Variable of ``variables`` (key path -> Variable, as
    :func:`check_no_aliases` returns) at its path, with ``update_from_state``.

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> apply_updates({('w',): v}, [Updates.create([(('w',), nnx.Param(3.0))])])
    >>> float(v[...])
    3.0
    """
    for group in updates:
        for path, update in group:
            if path not in variables:
                raise _MissingUpdateTarget(
                    jax.tree_util.keystr(path),
                    f"apply_updates: no Variable at this path to take the update {update!r}",
                    "Pass the key path -> Variable map of the same arguments the updates "
                    "were computed from (check_no_aliases returns it).")
            variables[path].update_from_state(update)


def to_masked(tree: tp.Any, all_updates: list[Updates]) -> tp.Any:
    """``tree`` with each leaf (None included) replaced by the update at its key path, or
    None where there is none.

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> u = Updates.create([((jax.tree_util.SequenceKey(1),), v)])
    >>> out = to_masked((None, None), [u])
    >>> out[0], out[1] is v
    (None, True)
    """
    combined: dict[tp.Any, tp.Any] = {}
    for updates in all_updates:
        combined.update(updates)
    return jax.tree_util.tree_map_with_path(lambda path, _: combined.get(path), tree,
                                            is_leaf=lambda x: x is None)


def check_no_aliases(fn_name: str, /, *, check: tp.Iterable[str] = (), **kwargs: tp.Any
                     ) -> dict[KeyPath, Variable]:
    """Every Variable under the keyword arguments, by key path (starting ``.name``); raises
    when one Variable is reached twice (tree mode, ``graph_updates=False``, cannot share)
    or when one under an argument named in ``check`` was created under another trace.

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> list(check_no_aliases('vmap', args=(v,)))
    [(GetAttrKey(name='args'), SequenceKey(idx=0))]
    >>> try:
    ...     check_no_aliases('vmap', args=(v,), out=v)
    ... except ValueError as e:
    ...     print(str(e).splitlines()[3:5])
    ['  - .args[0]', '  - .out']
    """
    names = set(check)
    container = labeled(**kwargs)
    seen: dict[int, tuple] = {}
    found: dict[KeyPath, Variable] = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(container, is_leaf=_is_var):
        if not isinstance(leaf, Variable):
            continue
        where = jax.tree_util.keystr(path)
        if path[0].name in names and not can_update(leaf):
            raise NNXTransformError(
                where, f"Cannot return captured Variable of type {type(leaf).__name__} from "
                f"nnx.{fn_name} (it was created outside the transform)",
                f"Pass it to nnx.{fn_name} as an argument instead of capturing it.")
        if id(leaf) in seen:
            raise NNXTransformError(
                "", f"Duplicate {type(leaf).__name__}\nfound at paths:\n\n"
                f"  - {jax.tree_util.keystr(seen[id(leaf)])}\n  - {where}\n\n"
                f"nnx.{fn_name} with graph_updates=False does not support Variable aliasing "
                "(duplicate inputs, duplicate outputs, or input Variables returned as "
                "outputs)",
                "Remove the duplicates, make new Variables with nnx.clone(), or enable "
                f"graph updates: nnx.{fn_name}(..., graph=True, graph_updates=True) or "
                f"nnx.compat.{fn_name}(...).")
        seen[id(leaf)] = path
        found[path] = leaf
    return found


def check_same_variables(inputs: tp.Any, outputs: tp.Any, transform_name: str = '') -> None:
    """Raises unless every Variable of ``inputs`` is the very object at the same place of
    ``outputs`` (a loop body must give back the Variables it got).

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> check_same_variables((v, 1), (v, 2))
    >>> try:
    ...     check_same_variables((v,), (nnx.Param(1.0),), 'while_loop')
    ... except ValueError as e:
    ...     print(str(e).split(':')[:2])
    ['at [0]', ' while_loop Variable identity must be preserved across iterations']
    """
    def one(path: tuple, a: tp.Any, b: tp.Any) -> None:
        if isinstance(a, Variable) and a is not b:
            raise NNXTransformError(
                jax.tree_util.keystr(path),
                f"{transform_name} Variable identity must be preserved across iterations: "
                f"the {type(a).__name__} given was replaced by a {type(b).__name__}".lstrip(),
                "Return the same Variable objects the function received (update their "
                "values in place instead of creating new ones).")

    jax.tree_util.tree_map_with_path(one, inputs, outputs,
                                     is_leaf=lambda x: isinstance(x, (Mask, Variable)))


def update_carry_variables(init_val: tp.Any, val_out: tp.Any) -> tp.Any:
    """``val_out`` with the Variables of ``init_val`` in place of their counterparts, each
    updated (``update_from_state``) from it: a loop's output carries the input Variables.

    >>> from flaxen import nnx
    >>> v = nnx.Param(1.0)
    >>> (out, n) = update_carry_variables((v, 0), (nnx.Param(4.0), 1))
    >>> out is v, float(v[...]), n
    (True, 4.0, 1)
    """
    def one(a: tp.Any, b: tp.Any) -> tp.Any:
        if isinstance(a, Variable):
            a.update_from_state(b)
            return a
        return b

    return jax.tree_util.tree_map(one, init_val, val_out, is_leaf=_is_var)
