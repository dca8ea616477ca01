"""Graph split/merge/update/pop/clone: structure, shared references, cycles, errors."""

import jax.numpy as jnp
import pytest

from flaxen.experimental import nnx


class Pair(nnx.Module):
    def __init__(self, a, b):
        self.a = a
        self.b = b


def test_split_merge_roundtrip_is_independent_copy():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    gd, st = nnx.split(m)
    m2 = nnx.merge(gd, st)
    assert m2 is not m and m2.kernel is not m.kernel
    assert jnp.array_equal(m2.kernel.value, m.kernel.value)
    m2.kernel.value = m2.kernel.value + 1
    assert not jnp.array_equal(m2.kernel.value, m.kernel.value)
    assert nnx.graphdef(m2) == gd and hash(nnx.graphdef(m2)) == hash(gd)


def test_shared_submodule_and_variable_stay_shared():
    shared = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    m = Pair(shared, shared)
    m.w = shared.kernel
    st = nnx.state(m)
    assert set(dict(st.flat_state())) == {("a", "bias"), ("a", "kernel")}
    m2 = nnx.clone(m)
    assert m2.a is m2.b and m2.w is m2.a.kernel and m2.a is not shared


def test_reference_cycle():
    a = Pair(None, None)
    a.a = a
    a.v = nnx.Param(jnp.ones(2))
    b = nnx.clone(a)
    assert b.a is b and jnp.array_equal(b.v.value, jnp.ones(2))


def test_split_with_filters_and_coverage_error():
    bn = nnx.BatchNorm(3, rngs=nnx.Rngs(0))
    _, params, stats = nnx.split(bn, nnx.Param, nnx.BatchStat)
    assert set(dict(params.flat_state())) == {("scale",), ("bias",)}
    assert set(dict(stats.flat_state())) == {("mean",), ("var",)}
    with pytest.raises(ValueError, match="/mean.*matches none"):
        nnx.split(bn, nnx.Param)
    with pytest.raises(ValueError, match="can only be used as the last filters"):
        nnx.split(bn, ..., nnx.Param)


def test_merge_with_other_structure_names_path():
    gd, _ = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    _, other = nnx.split(nnx.BatchNorm(3, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="/kernel"):
        nnx.merge(gd, other)
    _, st = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    st["extra"] = nnx.Param.state(jnp.ones(1))
    with pytest.raises(ValueError, match="/extra"):
        nnx.merge(gd, st)


def test_update_and_pop_and_lists():
    class Net(nnx.Module):
        def __init__(self):
            self.layers = [nnx.Linear(2, 2, rngs=nnx.Rngs(i)) for i in range(2)]
            self.count = nnx.Intermediate(jnp.zeros(()))

    net = Net()
    st = nnx.state(net)
    assert ("layers", 1, "kernel") in dict(st.flat_state())
    new = jax_tree_add(st, 1.0)
    nnx.update(net, new)
    assert jnp.array_equal(net.layers[0].bias.value, jnp.ones(2))
    popped = nnx.pop(net, nnx.Intermediate)
    assert set(dict(popped.flat_state())) == {("count",)} and not hasattr(net, "count")
    # a list mutated in place is seen by the next walk
    net.layers.append(nnx.Linear(2, 2, rngs=nnx.Rngs(5)))
    assert ("layers", 2, "kernel") in dict(nnx.state(net).flat_state())


def jax_tree_add(tree, x):
    import jax

    return jax.tree_util.tree_map(lambda a: a + x, tree)


def test_bare_array_attribute_is_state():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    m.extra = jnp.ones(2)
    gd, st = nnx.split(m)
    assert isinstance(st["extra"], jnp.ndarray)  # a plain array leaf, not a VariableState
    m2 = nnx.merge(gd, jax_tree_add(st, 1.0))
    assert float(m2.extra[0]) == 2.0
    nnx.update(m, jax_tree_add(st, 2.0))
    assert float(m.extra[0]) == 3.0


def test_graphdef_apply_and_make_empty():
    m = nnx.BatchNorm(2, rngs=nnx.Rngs(0))
    gd, st = nnx.split(m)
    y, (gd2, st2) = gd.apply(st)(jnp.arange(4.0).reshape(2, 2))
    assert y.shape == (2, 2) and gd2 == gd
    assert not jnp.array_equal(st2.mean.value, st.mean.value)
    empty = gd.make_empty()
    assert empty.mean.value is nnx.EMPTY


def test_trace_context_error_on_captured_module():
    import jax

    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    @jax.jit
    def f(x):
        m.kernel.value = x
        return x

    with pytest.raises(nnx.TraceContextError, match="different JAX trace"):
        f(jnp.ones((2, 2)))

    @jax.jit
    def g(x):
        m.new = 1
        return x

    with pytest.raises(nnx.TraceContextError, match="'new'"):
        g(jnp.ones(1))
