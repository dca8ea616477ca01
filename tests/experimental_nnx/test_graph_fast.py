"""The generated split/merge code and the cached walk agree with the general path.

Each case is split and merged often enough for the definition to get its generated code,
then compared with the interpreter's result (``_COMPILE_AT`` raised so it never compiles).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.experimental import nnx
from flaxen.nnx import _graph_ops as graph_mod
from flaxen.nnx import rnglib


class Pair(nnx.Module):
    def __init__(self, a, b):
        self.a = a
        self.b = b


class Empty(nnx.Module):
    def __init__(self):
        self.rate = 0.5


def _shared():
    lin = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    m = Pair(lin, lin)
    m.w = lin.kernel
    return m


def _cycle():
    m = Pair(None, None)
    m.a = m
    m.v = nnx.Param(jnp.ones(2), sharding=("x",))
    return m


def _containers():
    m = Pair([nnx.Linear(1, 2, rngs=nnx.Rngs(1)), 3, {"s": nnx.BatchStat(jnp.zeros(2))}],
             (nnx.Param(jnp.ones(1)), "static"))
    m.empty = Empty()
    m.rngs = nnx.Rngs(0, dropout=1)
    m.lst = nnx.List([nnx.Linear(1, 1, rngs=nnx.Rngs(2)), Empty()])
    return m


CASES = [
    lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)),
    _shared,
    _cycle,
    _containers,
    lambda: nnx.BatchNorm(3, rngs=nnx.Rngs(0)),
    lambda: Pair(None, Empty()),
]


def _fast(model):
    for _ in range(graph_mod._COMPILE_AT + 1):
        gd, st = nnx.split(model)
        out = nnx.merge(gd, st)
    # this face's States hold VariableStates: its generated code is kept per snapshot class
    assert graph_mod._generated(gd, nnx.VariableState, "states") is not None
    assert graph_mod._generated(gd, nnx.VariableState, "merge") is not None
    return gd, st, out


def _slow(model, monkeypatch):
    monkeypatch.setattr(graph_mod, "_COMPILE_AT", 10**9)
    nnx.graph.eng.clear_cache()
    gd, st = nnx.split(model)
    out = nnx.merge(gd, st)
    monkeypatch.undo()
    return gd, st, out


def _val(x):
    if jnp.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x).tolist()


def _describe(node):
    """Structure of a graph with object identities replaced by first-seen indices."""
    seen = {}

    def walk(x):
        if isinstance(x, (nnx.GraphNode, nnx.Variable)):
            if id(x) in seen:
                return ("ref", seen[id(x)])
            seen[id(x)] = len(seen)
            if isinstance(x, nnx.Variable):
                return (type(x), x.get_metadata(), _val(x.raw_value))
            return (type(x), [(k, walk(v)) for k, v in x.__dict__.items()])
        if isinstance(x, (list, tuple)):
            return (type(x), [walk(v) for v in x])
        if isinstance(x, dict):
            return (dict, [(k, walk(v)) for k, v in x.items()])
        return x

    return walk(node)


def _flat(st):
    return {p: (v.type, v.get_metadata(), _val(v.value))
            for p, v in dict(st.flat_state()).items()}


@pytest.mark.parametrize("make", CASES)
def test_generated_code_matches_interpreter(make, monkeypatch):
    model = make()
    gd_s, st_s, out_s = _slow(model, monkeypatch)
    gd_f, st_f, out_f = _fast(model)
    assert gd_f == gd_s
    assert _flat(st_f) == _flat(st_s)
    assert list(st_f) == list(st_s)  # same key order as well
    assert _describe(out_f) == _describe(out_s)
    assert out_f is not model


def test_fast_merge_keeps_sharing_and_cycles():
    _, _, m = _fast(_shared())
    assert m.a is m.b and m.w is m.a.kernel
    _, _, c = _fast(_cycle())
    assert c.a is c and c.v.out_sharding == ("x",)


def test_fast_split_gives_fresh_states_and_live_values():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    _, st, _ = _fast(model)
    st["kernel"].value = jnp.zeros((2, 3))
    st["bias"].tag = "mutated"
    _, st2 = nnx.split(model)
    assert st2["kernel"] is not st["kernel"]
    assert not jnp.array_equal(st2["kernel"].value, jnp.zeros((2, 3)))
    assert "tag" not in st2["bias"].get_metadata()
    model.bias.value = jnp.full((3,), 7.0)
    assert jnp.array_equal(nnx.split(model)[1]["bias"].value, jnp.full((3,), 7.0))


def test_fast_split_sees_structure_changes():
    model = Pair(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), None)
    gd, _, _ = _fast(model)
    model.b = nnx.Param(jnp.ones(1))
    gd2, st2 = nnx.split(model)
    assert gd2 != gd and ("b",) in dict(st2.flat_state())
    model.a.kernel.sharding = ("y",)
    assert nnx.split(model)[1]["a"]["kernel"].sharding == ("y",)


def test_fast_merge_falls_back_for_errors_and_other_inputs():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    gd, st, _ = _fast(model)
    missing = nnx.State({"kernel": st["kernel"]})
    with pytest.raises(ValueError, match="at /bias: .*Expected key for Variable"):
        nnx.merge(gd, missing)
    extra = nnx.State({**st.raw_mapping, "extra": nnx.Param.state(jnp.ones(1))})
    with pytest.raises(ValueError, match="/extra"):
        nnx.merge(gd, extra)
    raw = nnx.State({"kernel": jnp.zeros((2, 3)), "bias": jnp.ones(3)})
    m = nnx.merge(gd, raw)
    assert isinstance(m.kernel, nnx.Param) and jnp.array_equal(m.bias.value, jnp.ones(3))
    params, rest = nnx.split(model, nnx.Param, ...)[1:]
    m = nnx.merge(gd, params, rest)
    assert jnp.array_equal(m.kernel.value, model.kernel.value)
    mapped = jax.tree_util.tree_map(lambda x: x * 2, st)
    assert jnp.array_equal(nnx.merge(gd, mapped).kernel.value, model.kernel.value * 2)


def test_rng_stream_keys_match_fold_in():
    rngs = nnx.Rngs(3)
    base = jax.random.key(3)
    for i in range(3):
        got = rngs.params()
        want = jax.random.fold_in(base, i)
        assert jnp.array_equal(jax.random.key_data(got), jax.random.key_data(want))
    assert rngs.default.count.value == 3 and type(rngs.default.count.value) is np.uint32

    @nnx.jit
    def draw(rngs):
        return rngs.params()

    traced = draw(rngs)
    assert jnp.array_equal(jax.random.key_data(traced),
                           jax.random.key_data(jax.random.fold_in(base, 3)))
    assert rnglib._fold_in_jit is not None
