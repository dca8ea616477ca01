"""``split_inputs`` / ``merge_inputs``: use plain JAX transforms on functions of graph nodes.

``merge_inputs(f)`` takes pure inputs (each graph node as a :class:`PureNode`, a pytree of
its state), rebuilds the nodes, calls ``f`` and returns ``(pure inputs after the call,
output)``. ``split_inputs(t)`` calls ``t`` (typically a JAX transform of a merged function)
with its graph-node arguments made pure, then writes the returned state back into the
original nodes and returns only the output.

>>> import jax, jax.numpy as jnp
>>> from flaxen import nnx
>>> from flaxen.nnx.transforms import general
>>> count = nnx.Variable(jnp.array(0))
>>> @general.split_inputs
... @jax.jit
... @general.merge_inputs
... def inc(c):
...     c.value += 1
>>> inc(count); int(count.value)
1
"""

from __future__ import annotations

import functools
import typing as tp

import jax

from flaxen.errors import NNXTransformError
from flaxen.nnx import _graph_engine as eng
from flaxen.nnx import _lift
from flaxen.nnx._graph_ops import GraphDef
from flaxen.nnx.variablelib import Variable

__all__ = ["PureNode", "merge_inputs", "split_inputs"]

_setattr = object.__setattr__


class PureNode:
    """A graph node as a pytree: its (static) definition, its State's leaves, and the
    ``ctxtag`` of the :func:`split_inputs` that made it."""

    __slots__ = ("graphdef", "values", "ctxtag")

    def __init__(self, graphdef: GraphDef, values: tuple,
                 ctxtag: tp.Hashable = "split_merge_inputs") -> None:
        self.graphdef = graphdef
        self.values = values
        self.ctxtag = ctxtag

    def __repr__(self) -> str:
        return f"PureNode({self.graphdef!r}, {len(self.values)} values, ctxtag={self.ctxtag!r})"


jax.tree_util.register_pytree_node(
    PureNode, lambda p: (p.values, (p.graphdef, p.ctxtag)),
    lambda aux, vals: PureNode(aux[0], tuple(vals), aux[1]))


def _to_pure(tree: tp.Any, ctxtag: tp.Hashable) -> tp.Any:
    def one(x: tp.Any) -> tp.Any:
        if not _lift.is_node(x):
            return x
        fg = eng.flatten([x])
        return PureNode(GraphDef(fg.defs), tuple(fg.values()), ctxtag)

    return jax.tree_util.tree_map(one, tree, is_leaf=_lift.is_node)


def _from_pure(tree: tp.Any, ctxtag: tp.Hashable) -> tp.Any:
    def one(x: tp.Any) -> tp.Any:
        if type(x) is not PureNode:
            return x
        if x.ctxtag != ctxtag:
            raise NNXTransformError(
                "", f"merge_inputs(ctxtag={ctxtag!r}) got a node split by "
                f"split_inputs(ctxtag={x.ctxtag!r})",
                "Give the split_inputs/merge_inputs pair the same ctxtag.")
        return eng.unflatten(x.graphdef.defs, x.values)[0][0]

    return jax.tree_util.tree_map(one, tree, is_leaf=lambda x: type(x) is PureNode)


def _write_back(original: tp.Any, pure: tp.Any) -> None:
    nodes = jax.tree_util.tree_leaves(original, is_leaf=_lift.is_node)
    pures = jax.tree_util.tree_leaves(pure, is_leaf=lambda x: type(x) is PureNode)
    pures = [p for p in pures if type(p) is PureNode]
    for node, p in zip([n for n in nodes if _lift.is_node(n)], pures):
        fg = eng.flatten([node])
        if fg.defs == p.graphdef.defs:
            for var, x in zip(fg.leaves, p.values):
                if isinstance(var, Variable):
                    _setattr(var, "raw_value", x)
        else:  # the structure changed inside: rebuild in place over the old objects
            eng.unflatten(p.graphdef.defs, p.values, dict(enumerate(fg.refs)))


_MISSING: tp.Any = object()


def merge_inputs(f: tp.Callable[..., tp.Any] = _MISSING, *,
                 ctxtag: tp.Hashable = "split_merge_inputs") -> tp.Callable[..., tp.Any]:
    """Wraps ``f`` to take pure inputs and return ``(pure inputs after, output)``.

    Without ``f``, a decorator (``@merge_inputs(ctxtag='t')``); ``ctxtag`` must match the
    :func:`split_inputs` that produced the pure inputs.
    """
    if f is _MISSING:
        return functools.partial(merge_inputs, ctxtag=ctxtag)

    @functools.wraps(f)
    def merged(*args: tp.Any, **kwargs: tp.Any) -> tuple[tp.Any, tp.Any]:
        args, kwargs = _from_pure((args, kwargs), ctxtag)
        out = f(*args, **kwargs)
        new_args, new_kwargs = _to_pure((args, kwargs), ctxtag)
        return ((new_args, new_kwargs) if new_kwargs else new_args), out

    return merged


def split_inputs(f: tp.Callable[..., tp.Any] = _MISSING, *,
                 ctxtag: tp.Hashable = "split_merge_inputs") -> tp.Callable[..., tp.Any]:
    """Wraps ``f`` (which returns ``(pure inputs, output)``, e.g. a transformed
    :func:`merge_inputs` function) to take graph nodes and update them in place.

    Without ``f``, a decorator factory:

    >>> import jax, jax.numpy as jnp
    >>> from flaxen import nnx
    >>> count = nnx.Variable(jnp.array(0))
    >>> @split_inputs(ctxtag='inc')
    ... @jax.jit
    ... @merge_inputs(ctxtag='inc')
    ... def inc(c):
    ...     c.value += 1
    >>> inc(count); int(count.value)
    1
    """
    if f is _MISSING:
        return functools.partial(split_inputs, ctxtag=ctxtag)

    @functools.wraps(f)
    def split(*args: tp.Any, **kwargs: tp.Any) -> tp.Any:
        pure_args, pure_kwargs = _to_pure((args, kwargs), ctxtag)
        new_inputs, out = f(*pure_args, **pure_kwargs)
        if kwargs:
            new_args, new_kwargs = new_inputs
        else:
            new_args, new_kwargs = new_inputs, {}
        _write_back((args, kwargs), (tuple(new_args), new_kwargs))
        return out

    return split


# Flax 0.12.8's type variables of nnx.transforms.general
A = tp.TypeVar("A")
F = tp.TypeVar("F", bound=tp.Callable[..., tp.Any])
