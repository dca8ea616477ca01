"""Differential test: Sequential's argument passing, List/Dict equality, iter_children /
iter_module_children and tree-mode iter_graph, flaxen.nnx next to flax.nnx 0.12.8."""

import warnings

import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _outcome(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the builtin class is what is compared
        return [c.__name__ for c in (TypeError, ValueError) if isinstance(e, c)]


def _named(x, rngs=None):
    return rngs is not None


def _catch_all(x, **kw):
    return "rngs" in kw


SEQUENTIAL = {
    "tuple": lambda lib: lib.Sequential(lambda a: (a, a + 1), lambda a, b: a * b)(2),
    "dict": lambda lib: lib.Sequential(lambda a: {"b": a}, lambda b: b * 2)(2),
    "list": lambda lib: lib.Sequential(lambda a: [a, 1], lambda a: a)(2),
    "rngs named": lambda lib: lib.Sequential(lambda x: x, _named)(1, rngs=lib.Rngs(0)),
    "rngs **kw": lambda lib: lib.Sequential(_catch_all)(1, rngs=lib.Rngs(0)),
    "not callable": lambda lib: lib.Sequential(lambda x: x, 3)(1),
    "empty": lambda lib: lib.Sequential()(1, 2),
}


@pytest.mark.parametrize("name", list(SEQUENTIAL))
def test_sequential_as_flax(name):
    assert _outcome(lambda: SEQUENTIAL[name](nnx)) == _outcome(lambda: SEQUENTIAL[name](fnnx))


EQUALITY = {
    "List == list": lambda lib: lib.List([1, 2]) == [1, 2],
    "list == List": lambda lib: [1, 2] == lib.List([1, 2]),
    "List == List": lambda lib: lib.List([1]) == lib.List([2]),
    "List hash": lambda lib: hash(lib.List([1])),
    "Dict == dict": lambda lib: lib.Dict(a=1) == {"a": 1},
    "Dict == Dict": lambda lib: lib.Dict(a=1) == lib.Dict(a=2),
    "Dict hash by id": lambda lib: (lambda d: hash(d) == id(d))(lib.Dict(a=1)),
}


@pytest.mark.parametrize("name", list(EQUALITY))
def test_container_equality_as_flax(name):
    assert _outcome(lambda: EQUALITY[name](nnx)) == _outcome(lambda: EQUALITY[name](fnnx))


def _holder(lib, shared):
    class Holder(lib.Module):
        def __init__(self):
            self.lin = lib.Linear(1, 1, rngs=lib.Rngs(0))
            self.cache = lib.Cache(jnp.zeros(1))
            self.items = lib.List([lib.Param(jnp.ones(1)), 4])
            self.rngs = lib.Rngs(1)
            self.size = 3
            if shared:
                self.again = self.lin

    return Holder()


def _walks(lib):
    out = {}
    for graph in (True, False):
        m = _holder(lib, shared=graph)
        for fn in ("iter_children", "iter_module_children"):
            out[fn, graph] = [(k, type(v).__name__) for k, v in getattr(lib, fn)(m, graph=graph)]
        for leaf in (lib.Param(jnp.ones(1)), 3):
            out["leaf", type(leaf).__name__, graph] = _outcome(
                lambda leaf=leaf, graph=graph: list(lib.iter_children(leaf, graph=graph)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        out["method"] = [k for k, _ in _holder(lib, shared=True).iter_children()]
    tree = lib.iter_graph(_holder(lib, shared=False), graph=False)
    # Flax's own bookkeeping (``_pytree__state``) is no part of the contract
    out["iter_graph tree"] = [(p, type(v).__name__) for p, v in tree
                              if not any(str(k).startswith("_pytree__") for k in p)]
    return out


def test_walks_as_flax():
    ours, ref = _walks(nnx), _walks(fnnx)
    for key in ref:
        assert ours[key] == ref[key], key
