"""Today's (Flax 0.12.8) vmap / pmap / shard_map / remat / cond / switch, StateAxes and
nnx.prefix at ``flaxen.nnx``, in the three modes (graph + updates, graph functional, tree)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

MODES = [(True, True), (True, False), (False, False)]


class Counter(nnx.Variable):
    pass


class Counted(nnx.Module):
    def __init__(self, rngs):
        self.w = nnx.Param(jax.random.normal(rngs.params(), (2, 3)))
        self.count = Counter(jnp.array(0))

    def __call__(self, x):
        self.count[...] += 1
        return x @ self.w


@pytest.mark.parametrize("graph,graph_updates", MODES)
def test_vmap_broadcast_module_updates_its_counter(graph, graph_updates):
    m = Counted(nnx.Rngs(0))
    f = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0), graph=graph,
                 graph_updates=graph_updates)
    y = f(m, jnp.ones((4, 2)))
    assert y.shape == (4, 3)
    assert int(m.count[...]) == 1
    np.testing.assert_allclose(y[0], jnp.ones(2) @ m.w[...], rtol=1e-6)


@pytest.mark.parametrize("graph,graph_updates", MODES)
def test_vmap_creates_stacked_module_and_maps_it(graph, graph_updates):
    make = nnx.vmap(lambda r: nnx.Linear(2, 3, rngs=r), in_axes=0, graph=graph,
                    graph_updates=graph_updates)
    ens = make(nnx.Rngs(0).split(5))
    assert ens.kernel.shape == (5, 2, 3)
    assert not np.allclose(ens.kernel[0], ens.kernel[1])
    fwd = nnx.vmap(lambda m, x: m(x), in_axes=(0, None), out_axes=1, graph=graph,
                   graph_updates=graph_updates)
    assert fwd(ens, jnp.ones((7, 2))).shape == (7, 5, 3)


def test_state_axes_map_by_filter_and_write_back():
    m = Counted(nnx.Rngs(0))
    m.w = nnx.Param(jnp.ones((4, 2, 3)))
    axes = nnx.StateAxes({nnx.Param: 0, ...: None})

    @nnx.vmap(in_axes=(axes, None), graph=True, graph_updates=True)
    def f(m, x):
        assert m.w.shape == (2, 3)
        return m(x)

    assert f(m, jnp.ones((2,))).shape == (4, 3)
    assert int(m.count[...]) == 1


def test_state_axes_from_state_and_lookup():
    sa = nnx.StateAxes(nnx.State({"a": {"b": 1}, "c": None}))
    assert sa.map_prefix(("a", "b"), None) == 1
    assert sa.map_prefix(("c",), None) is None
    with pytest.raises(ValueError, match="No axis found"):
        sa.map_prefix(("zzz",), nnx.Param(1))


@pytest.mark.parametrize("graph", [True, False])
def test_prefix_gives_per_path_axes_in_every_mode(graph):
    m = nnx.vmap(lambda r: nnx.Linear(2, 3, rngs=r))(nnx.Rngs(0).split(3))
    m.bias = nnx.Param(jnp.zeros((3,)))  # shared by the three members
    axes = nnx.prefix(m, {nnx.PathContains("kernel"): 0, ...: None}, graph=graph)
    f = nnx.vmap(lambda m, x: m(x), in_axes=(axes, None), graph=graph, graph_updates=False)
    assert f(m, jnp.ones((2,))).shape == (3, 3)


def test_inconsistent_aliasing_names_both_places():
    v = nnx.Param(jnp.arange(3.0))
    f = nnx.vmap(lambda a, b: a[...] + b[...], in_axes=(0, None), graph=True)
    with pytest.raises(ValueError, match=r"Inconsistent aliasing[\s\S]*args\[0\]: 0"):
        f(v, v)


def test_tree_mode_refuses_shared_variable_and_graph_mode_shares_it():
    v = nnx.Param(jnp.zeros((2,)))
    f = nnx.vmap(lambda a, b: a[...] + b[...], in_axes=(0, 0), graph=False)
    with pytest.raises(ValueError, match="Duplicate Param"):
        f(v, v)
    g = nnx.vmap(lambda a, b: a[...] + b[...], in_axes=(0, 0), graph=True)
    np.testing.assert_allclose(g(v, v), jnp.zeros((2,)))


def test_functional_mode_refuses_returning_an_input():
    m = Counted(nnx.Rngs(0))
    f = nnx.vmap(lambda m: m, in_axes=None, out_axes=None, axis_size=2, graph=True,
                 graph_updates=False)
    with pytest.raises(ValueError, match="Duplicate"):
        f(m)


def test_prefix_errors():
    with pytest.raises(ValueError, match="Graph nodes are not allowed as prefixes"):
        nnx.vmap(lambda x: x, in_axes=nnx.Dict(a=nnx.Param(1)), graph=True)
    with pytest.raises(ValueError, match="cannot contain `StateAxes` objects"):
        nnx.vmap(lambda x: x, in_axes=nnx.StateAxes({...: 0}), graph=False)


def test_broadcast_variable_batched_inside_names_its_path():
    class Env(nnx.Module):
        def __init__(self):
            self.shared = nnx.Variable(jnp.array(0))
            self.idx = nnx.Param(jnp.arange(4))

    env = Env()

    @nnx.vmap(in_axes=(nnx.StateAxes({nnx.Param: 0, ...: None}),), graph=True)
    def f(env):
        env.shared[...] = env.shared + env.idx

    with pytest.raises(ValueError, match=r"'shared'.*axis spec None"):
        f(env)


@pytest.mark.parametrize("graph,graph_updates", MODES)
def test_cond_and_switch_write_back(graph, graph_updates):
    x = nnx.Variable(jnp.array(8))

    def half(x):
        x[...] = x // 2

    def triple(x):
        x[...] = 3 * x + 1

    nnx.cond(x % 2 == 0, half, triple, x, graph=graph, graph_updates=graph_updates)
    assert int(x[...]) == 4
    nnx.switch(1, (half, triple), x, graph=graph, graph_updates=graph_updates)
    assert int(x[...]) == 13


def test_cond_under_vmap_keeps_untouched_broadcast_state():
    class Env(nnx.Module):
        def __init__(self):
            self.const = nnx.Variable(jnp.array(1))
            self.step = nnx.Param(jnp.zeros((4,), jnp.int32))
            self.idx = nnx.Param(jnp.arange(4))

    env = Env()

    @nnx.vmap(in_axes=(nnx.StateAxes({nnx.Param: 0, ...: None}),), graph=True)
    def f(env):
        def inc(env):
            env.step[...] += 1

        nnx.cond(env.idx % 2 == 0, inc, lambda env: None, env)

    f(env)
    np.testing.assert_array_equal(env.step[...], [1, 0, 1, 0])
    assert int(env.const[...]) == 1


def test_switch_branches_with_different_structure_fail():
    m = nnx.Dict(a=nnx.Param(jnp.array(0)))

    def add_attr(m):
        m.b = nnx.Param(jnp.array(1))

    with pytest.raises(ValueError, match="different structures"):
        nnx.switch(0, (add_attr, lambda m: None), m, graph=True, graph_updates=True)


@pytest.mark.parametrize("graph,graph_updates", MODES)
def test_remat_grad_and_counter(graph, graph_updates):
    m = Counted(nnx.Rngs(0))
    fwd = nnx.remat(lambda m, x: m(x), graph=graph, graph_updates=graph_updates)
    y = fwd(m, jnp.ones((1, 2)))
    assert y.shape == (1, 3) and int(m.count[...]) == 1
    lin = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    grads = nnx.grad(lambda m, x: fwd(m, x).sum(), graph=graph, graph_updates=graph_updates)(
        lin, jnp.ones((1, 2)))
    b = grads["bias"] if isinstance(grads, nnx.State) else grads.bias
    np.testing.assert_allclose(jnp.asarray(getattr(b, "value", b)), jnp.ones((3,)))


@pytest.mark.parametrize("graph,graph_updates", MODES)
def test_shard_map_single_device(graph, graph_updates):
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    P = jax.sharding.PartitionSpec
    m = Counted(nnx.Rngs(0))
    f = nnx.shard_map(lambda m, x: m(x), mesh=mesh, in_specs=(P(), P("d")),
                      out_specs=P("d"), graph=graph, graph_updates=graph_updates)
    assert f(m, jnp.ones((4, 2))).shape == (4, 3)
    assert int(m.count[...]) == 1


@pytest.mark.parametrize("graph,graph_updates", MODES)
def test_pmap_single_device(graph, graph_updates):
    m = Counted(nnx.Rngs(0))
    f = nnx.pmap(lambda m, x: m(x), in_axes=(None, 0), axis_size=1, graph=graph,
                 graph_updates=graph_updates)
    assert f(m, jnp.ones((1, 4, 2))).shape == (1, 4, 3)
    assert int(m.count[...]) == 1


def test_transform_metadata_adds_partition_name():
    @nnx.vmap(in_axes=(None,), axis_size=3, graph_updates=False)
    @nnx.transform_metadata(in_axes=(None,), out_axes=0, partition="c")
    def make(rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("a", "b"))
        return nnx.Linear(2, 4, kernel_init=init, rngs=rngs)

    with nnx.use_eager_sharding(False):  # axis names only, no mesh
        m = make(nnx.Rngs(0))
    assert m.kernel.shape == (3, 2, 4)
    assert m.kernel.out_sharding == ("c", "a", "b")


def test_prefix_shapes_per_mode_and_jax_vmap():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    tree = nnx.prefix(m, {nnx.Param: 0}, graph=False)
    assert isinstance(tree, nnx.Linear) and tree.kernel == 0 and tree.bias == 0
    graph = nnx.prefix(m, {nnx.Param: 0}, graph=True)
    assert isinstance(graph, nnx.extract.TreeState) and graph.state["kernel"] == 0
    with pytest.raises(ValueError, match="No filter matched"):
        nnx.prefix(m, {nnx.BatchStat: 0}, graph=False)
    stacked = nnx.vmap(lambda r: nnx.Linear(2, 3, rngs=r))(nnx.Rngs(0).split(4))
    y = jax.vmap(lambda m, x: m(x), in_axes=(tree, None))(stacked, jnp.ones((2,)))
    assert y.shape == (4, 3)
    y2 = nnx.vmap(lambda m, x: m(x), in_axes=(tree, None), graph=False)(stacked, jnp.ones((2,)))
    np.testing.assert_allclose(y, y2, rtol=1e-6)


@pytest.mark.parametrize("graph_updates", [True, False])
def test_returning_a_captured_module_is_refused(graph_updates):
    m = nnx.Dict(a=nnx.Variable(jnp.arange(4)))
    f = nnx.vmap(lambda x: m, graph=True, graph_updates=graph_updates)
    msg = "different trace level" if graph_updates else "Cannot return captured Variable"
    with pytest.raises(ValueError, match=msg):
        f(jnp.zeros((4,)))


def test_state_axes_string_filters_select_by_tag_as_flax():
    # a string in StateAxes is nnx.WithTag (an Rng stream's key and count), not a path part
    class Model(nnx.Module):
        def __init__(self):
            self.params = nnx.Param(jnp.ones(3))  # attribute named like the stream
            self.rngs = nnx.Rngs(params=0)

    from flaxen.nnx.transforms._axes import to_predicate

    model = Model()

    p = to_predicate("params")
    assert isinstance(p, nnx.WithTag)
    assert p(("rngs", "params", "key"), model.rngs.params.key)
    assert p(("rngs", "params", "count"), model.rngs.params.count)
    assert not p(("params",), model.params)
