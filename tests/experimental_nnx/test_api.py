"""The NNX public surface beyond the transforms: modules, variables, State, filters, RNGs, SPMD."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec

from flaxen.errors import InvalidFilterError
from flaxen.experimental import nnx


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(2, 3, rngs=rngs)
        self.bn = nnx.BatchNorm(3, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.dropout(self.bn(self.linear(x)))


# -- display / repr -----------------------------------------------------------------------------

def test_repr_of_modules_variables_states_and_graphdef(capsys):
    block = Block(nnx.Rngs(0))
    text = repr(block)
    assert text.startswith("Block(") and "linear=Linear(" in text and "kernel=Param(" in text
    assert "VariableState(" in repr(nnx.state(block))
    assert "type=Param" in repr(nnx.state(block, nnx.Param))
    shapes = jax.tree_util.tree_map(jnp.shape, nnx.state(block.linear))
    assert "value=(2, 3)" in repr(shapes)
    assert repr(nnx.graphdef(block)).startswith("GraphDef(nodes=[NodeDef(\n  type='Block',")
    assert repr(nnx.Param(1.0, tag="t")) == "Param(\n  value=1.0,\n  tag='t'\n)"
    nnx.display(block.linear, nnx.state(block.linear))
    out = capsys.readouterr().out
    assert "Linear(" in out and "State({" in out
    assert repr(nnx.EMPTY) == "Empty"
    assert repr(nnx.Rngs(0, dropout=1)).startswith("Rngs( # RngState: 4 (24 B)\n")


# -- Module methods ------------------------------------------------------------------------------

def test_sow_default_reduce_custom_reduce_and_type_mismatch():
    class M(nnx.Module):
        def __call__(self, x):
            self.sow(nnx.Intermediate, "h", x)
            self.sow(nnx.Intermediate, "total", x, reduce_fn=lambda a, b: a + b,
                     init_fn=lambda: 0)
            return x

    m = M()
    m(1)
    m(2)
    assert m.h.value == (1, 2) and m.total.value == 3
    assert isinstance(m.h, nnx.Intermediate)
    assert set(dict(nnx.state(m, nnx.Intermediate).flat_state())) == {("h",), ("total",)}
    nnx.pop(m, nnx.Intermediate)
    assert "h" not in vars(m)
    m.h = nnx.Param(0)
    with pytest.raises(ValueError, match="at /h: .*'h'.*of type Intermediate, got a Param"):
        m(3)


def test_sow_inside_jit_is_visible_outside():
    class M(nnx.Module):
        def __init__(self):
            self.lin = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

        def __call__(self, x):
            y = self.lin(x)
            self.sow(nnx.Intermediate, "y", y)
            return y

    m = M()
    y = nnx.jit(lambda m, x: m(x))(m, jnp.ones((1, 2)))
    np.testing.assert_array_equal(m.y.value[0], y)


def test_iter_modules_paths_and_shared_module_once():
    shared = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
    root = nnx.Dict(a=shared, b=shared, seq=nnx.Sequential(nnx.Linear(1, 1, rngs=nnx.Rngs(1))))
    paths = [p for p, _ in root.iter_modules()]
    assert paths[0] == ()  # parents before children (root first)
    assert ("a",) in paths and ("b",) not in paths  # a shared module is listed once
    assert ("seq", "layers", 0) in paths and ("seq", "layers") in paths
    mods = dict(root.iter_modules())
    assert mods[("a",)] is shared


def test_set_attributes_filters_and_not_found_error():
    block = Block(nnx.Rngs(0))
    block.set_attributes(deterministic=True, use_running_average=True)
    assert block.dropout.deterministic and block.bn.use_running_average
    block.set_attributes(nnx.Dropout, deterministic=False, use_running_average=False,
                         raise_if_not_found=False)
    assert block.dropout.deterministic is False and block.bn.use_running_average is True
    block.set_attributes("bn", use_running_average=False)
    assert block.bn.use_running_average is False
    with pytest.raises(ValueError, match=r"\{'no_such'\}.*raise_if_not_found=False"):
        block.set_attributes(no_such=1)
    with pytest.raises(ValueError, match="deterministic"):
        block.set_attributes(nnx.BatchNorm, deterministic=True)
    block.set_attributes(no_such=1, raise_if_not_found=False)
    assert not hasattr(block, "no_such")


def test_train_and_eval_toggle_dropout_and_batchnorm():
    block = Block(nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (4, 2))
    block.eval()
    assert block.dropout.deterministic is True and block.bn.use_running_average is True
    np.testing.assert_array_equal(block(x), block(x))  # no dropout, no stat updates
    mean = block.bn.mean.value
    block(x)
    np.testing.assert_array_equal(block.bn.mean.value, mean)
    block.train()
    assert block.dropout.deterministic is False and block.bn.use_running_average is False
    block(x)
    assert not np.allclose(block.bn.mean.value, mean)
    block.eval(deterministic=False)  # extra attributes override the defaults
    assert block.dropout.deterministic is False and block.bn.use_running_average is True


def test_module_init_and_is_initializing():
    class Lazy(nnx.Module):
        def __init__(self):
            self.seen = []

        def __call__(self, x):
            self.seen.append(self.is_initializing())
            if self.is_initializing():
                self.w = nnx.Param(jnp.ones((x.shape[-1], 2)))
            return x @ self.w.value

        def other(self, x):
            return self.is_initializing()

    m = Lazy()
    assert m.is_initializing() is False
    y = m.init(jnp.ones((1, 3)))
    assert y.shape == (1, 2) and m.w.value.shape == (3, 2)
    m(jnp.ones((1, 3)))
    assert m.seen == [True, False]
    assert m.init.other(1) is True and m.other(1) is False


def test_nnx_dict_and_list():
    d = nnx.Dict({"a": nnx.Linear(1, 2, rngs=nnx.Rngs(0))}, b=nnx.Param(jnp.zeros(2)))
    assert set(d) == {"a", "b"} and len(d) == 2 and isinstance(d["a"], nnx.Linear)
    d["c"] = nnx.BatchStat(jnp.ones(1))
    assert d.c is d["c"]
    del d["b"]
    assert set(dict(nnx.state(d).flat_state())) == {("a", "bias"), ("a", "kernel"), ("c",)}
    with pytest.raises(AttributeError, match="'zz'"):
        d.zz  # noqa: B018
    c = nnx.clone(d)
    assert isinstance(c, nnx.Dict) and c["a"] is not d["a"]

    lst = nnx.List([nnx.Linear(1, 1, rngs=nnx.Rngs(i)) for i in range(3)])
    assert len(lst) == 3 and isinstance(lst[-1], nnx.Linear)
    lst.append(nnx.Param(jnp.ones(1)))
    assert len(lst) == 4 and ("3",) not in dict(nnx.state(lst).flat_state())
    assert (3,) in dict(nnx.state(lst).flat_state())
    popped = lst.pop(0)
    assert isinstance(popped, nnx.Linear) and len(lst) == 3
    assert [type(x).__name__ for x in lst[0:2]] == ["Linear", "Linear"]
    with pytest.raises(IndexError):
        lst[5]
    graphdef, state = nnx.split(lst)
    assert isinstance(nnx.merge(graphdef, state), nnx.List)


def test_sequential_passes_rngs_only_to_layers_that_take_them():
    seq = nnx.Sequential(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.Dropout(0.5), nnx.relu)
    y = seq(jnp.ones((3, 2)), rngs=nnx.Rngs(dropout=1))
    assert y.shape == (3, 2)


# -- Variables -----------------------------------------------------------------------------------

def test_variable_metadata_hooks_and_methods():
    log = []
    v = nnx.Param(jnp.zeros(2), sharding=("a",),
                  set_value_hooks=lambda var, x: x * 2,
                  get_value_hooks=lambda var, x: x + 1,
                  add_axis_hooks=lambda var, name, idx: log.append(("add", name, idx)),
                  remove_axis_hooks=lambda var, name, idx: log.append(("rm", name, idx)))
    # stored as today's out_sharding; a 0.8.3 VariableState still reads it as .sharding
    assert v.get_metadata("out_sharding") == ("a",)
    assert nnx.VariableState.of(v).sharding == ("a",)
    v.value = jnp.ones(2)
    np.testing.assert_array_equal(v.raw_value, 2.0)
    np.testing.assert_array_equal(v.value, 3.0)
    v.add_axis("layers", 0)
    v.remove_axis("layers", 0)
    assert log == [("add", "layers", 0), ("rm", "layers", 0)]
    with pytest.raises(AttributeError, match="no attribute or metadata 'missing'"):
        v.missing  # noqa: B018

    w = nnx.Param(jnp.zeros(3), tag="w")
    vs = nnx.VariableState.of(w)
    assert isinstance(vs, nnx.VariableState) and vs.type is nnx.Param and vs.tag == "w"
    assert vs.get_metadata() == {"tag": "w"}
    assert jax.tree_util.tree_leaves(vs) == [vs.value]
    back = vs.to_variable()
    assert isinstance(back, nnx.Param) and back is not w
    # today's Variable compares like its array (elementwise), as Flax 0.12.8's does
    assert bool((back == w).all()) and back.get_metadata() == w.get_metadata()

    u = nnx.Param(jnp.ones(1), tag="u")
    u.copy_from(w)
    assert u.tag == "w" and u.value.shape == (3,)
    u.copy_from_state(nnx.VariableState(nnx.Param, jnp.full(4, 5.0), tag="s"))
    assert u.tag == "s" and float(u.value[0]) == 5.0
    u.copy_from_state(nnx.Param.state(jnp.full(4, 5.0), tag="s"))
    assert u.tag == "s" and float(u.value[0]) == 5.0
    r = u.replace(jnp.zeros(1), tag="r")
    assert r.tag == "r" and u.tag == "s" and type(r) is nnx.Param
    c = u.copy()
    assert bool((c == u).all()) and c.get_metadata() == u.get_metadata() and c is not u

    vs2 = nnx.BatchStat.state(jnp.ones(2), axes=(0,))
    assert vs2.type is nnx.BatchStat and vs2.axes == (0,)
    assert vs2.replace(jnp.zeros(2)).axes == (0,)
    vs_log = []
    vs3 = nnx.Param.state(1.0, add_axis_hooks=(lambda s, n, i: vs_log.append(n),),
                          remove_axis_hooks=(lambda s, n, i: vs_log.append(-i),))
    vs3.add_axis("x", 1)
    vs3.remove_axis("x", 1)
    assert vs_log == ["x", -1]


def test_with_metadata_and_variable_metadata():
    created = []
    init = nnx.with_metadata(jax.nn.initializers.ones, sharding=(None, "model"),
                             create_value_hooks=lambda var, x: created.append(x.shape) or x)
    raw = init(jax.random.key(0), (2, 3))
    assert isinstance(raw, nnx.VariableMetadata) and raw.metadata == {"sharding": (None, "model")}
    p = nnx.Param(raw)
    assert nnx.VariableState.of(p).sharding == (None, "model") and p.value.shape == (2, 3)
    assert created == [(2, 3)]
    layer = nnx.Linear(2, 3, kernel_init=nnx.with_metadata(nnx.initializers.lecun_normal(),
                                                            sharding=("in", "out")),
                       rngs=nnx.Rngs(0))
    assert nnx.VariableState.of(layer.kernel).sharding == ("in", "out")
    vm = nnx.VariableMetadata(jnp.zeros(1), metadata={"tag": "x"})
    assert nnx.Cache(vm).tag == "x"


def test_cache_and_empty():
    mha = nnx.MultiHeadAttention(2, 4, decode=True, rngs=nnx.Rngs(0))
    mha.init_cache((1, 3, 4))
    caches = nnx.state(mha, nnx.Cache)
    assert dict(caches.flat_state()) and all(v.type is nnx.Cache
                                       for v in dict(caches.flat_state()).values())
    empty = nnx.graphdef(nnx.Linear(1, 1, rngs=nnx.Rngs(0))).make_empty()
    assert empty.kernel.value is nnx.EMPTY and isinstance(nnx.EMPTY, nnx.Empty)


# -- State ---------------------------------------------------------------------------------------

def _state():
    return nnx.State({
        "a": {"w": nnx.Param.state(jnp.ones(2)), "m": nnx.BatchStat.state(jnp.zeros(2))},
        "rng": {"key": nnx.RngKey.state(jax.random.key(0), tag="dropout")},
        "c": nnx.Cache.state(jnp.ones(1)),
    })


def test_state_filter_split_merge_flat_and_raw_mapping():
    s = _state()
    assert s.a.w is s["a"]["w"]
    params = s.filter(nnx.Param)
    assert list(dict(params.flat_state())) == [("a", "w")]
    p, rest = s.filter(nnx.Param, nnx.BatchStat)
    assert list(dict(rest.flat_state())) == [("a", "m")]
    p, b, others = s.split(nnx.Param, nnx.BatchStat, ...)
    assert set(dict(others.flat_state())) == {("rng", "key"), ("c",)}
    with pytest.raises(ValueError, match=r"/rng/key.*matches none"):
        s.split(nnx.Param, nnx.BatchStat)
    merged = nnx.State.merge(p, b, others)
    assert merged == s and set(dict(merged.flat_state())) == set(dict(s.flat_state()))
    override = nnx.State({"a": {"w": nnx.Param.state(jnp.zeros(2))}})
    assert float(nnx.State.merge(s, override).a.w.value[0]) == 0.0  # later wins
    flat = dict(s.flat_state())
    again = nnx.State.from_flat_path(flat)
    assert again == s and isinstance(again.a, nnx.State)
    assert nnx.State.from_flat_path(list(flat.items())) == s
    raw = s.raw_mapping
    # as in Flax, only the top level is a State: nested levels are stored as plain dicts,
    # and handed out as States sharing that dict
    assert isinstance(raw, dict) and type(raw["a"]) is dict and isinstance(s["a"], nnx.State)
    s["a"]["extra"] = nnx.Param.state(3.0)
    assert raw["a"]["extra"] is s.a.extra
    del s.a["extra"]
    not_p = s.filter(nnx.Not(nnx.Param))
    assert dict((s - p).flat_state()).keys() == dict(not_p.flat_state()).keys()
    s.new = {"x": nnx.Param.state(1.0)}
    assert isinstance(s.new, nnx.State)
    doubled = jax.tree_util.tree_map(lambda x: x * 2, p)
    assert isinstance(doubled, nnx.State) and float(doubled.a.w.value[0]) == 2.0
    with pytest.raises(AttributeError, match="no key 'zz'"):
        s.zz  # noqa: B018


# -- filters -------------------------------------------------------------------------------------

def test_filters():
    to = nnx.filterlib.to_predicate
    p, b = nnx.Param(1.0), nnx.BatchStat(0.0)
    key = nnx.RngKey(jax.random.key(0), tag="dropout")
    path = ("layer", "kernel")
    assert to(nnx.Param)(path, p) and not to(nnx.Param)(path, b)
    assert to(nnx.Param)(path, nnx.VariableState.of(p))  # VariableStates match by their type
    assert to(nnx.RngState)(("s", "key"), key)  # subclasses match
    assert to("kernel")(path, b) and not to("bias")(path, b)
    assert to("dropout")(("s", "key"), key)  # strings match RNG tags too
    assert to(...)(path, p) and to(True)(path, p)
    assert not to(None)(path, p) and not to(False)(path, p)
    assert to(nnx.Everything())(path, p) and not to(nnx.Nothing())(path, p)
    assert to([nnx.BatchStat, "kernel"])(path, p)
    assert to((nnx.BatchStat,))(path, b)
    assert nnx.All(nnx.Param, "kernel")(path, p) and not nnx.All(nnx.Param, "bias")(path, p)
    assert nnx.Any(nnx.BatchStat, "kernel")(path, p)
    assert not nnx.Any(nnx.BatchStat, "bias")(path, p)
    assert nnx.Not(nnx.Param)(path, b) and not nnx.Not(nnx.Param)(path, p)
    assert nnx.OfType(nnx.Param)(path, p) and not nnx.OfType(nnx.Param)(path, b)
    assert nnx.WithTag("dropout")(path, key) and not nnx.WithTag("params")(path, key)
    assert nnx.PathContains("layer")(path, b)
    assert to(lambda path, v: path[-1] == "kernel")(path, b)
    assert nnx.Not(nnx.Param) == nnx.Not(nnx.Param) and hash(nnx.OfType(nnx.Param))
    assert repr(nnx.All(nnx.Param, "x")) == (
        f"All(OfType({nnx.Param!r}), PathContains('x', exact=True))")
    with pytest.raises(InvalidFilterError):
        to(3)
    with pytest.raises(ValueError, match="can only be used as the last filters"):
        nnx.split(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), ..., nnx.Param)


def test_filters_in_split_and_state():
    block = Block(nnx.Rngs(0))
    _, params, stats, rest = nnx.split(block, nnx.Param, nnx.BatchStat, ...)
    assert all(v.type is nnx.Param for v in dict(params.flat_state()).values())
    assert all(v.type is nnx.BatchStat for v in dict(stats.flat_state()).values())
    assert all(issubclass(v.type, nnx.RngState) for v in dict(rest.flat_state()).values())
    kernels = nnx.state(block, nnx.All(nnx.Param, "kernel"))
    assert list(dict(kernels.flat_state())) == [("linear", "kernel")]
    not_params = nnx.state(block, nnx.Not(nnx.Param))
    assert set(dict(not_params.flat_state())) == (set(dict(stats.flat_state()))
                                                  | set(dict(rest.flat_state())))
    assert dict(nnx.state(block, nnx.Nothing()).flat_state()) == {}
    dropout_keys = nnx.state(block, nnx.All(nnx.RngKey, nnx.WithTag("default")))
    assert dict(dropout_keys.flat_state())


# -- RNGs ----------------------------------------------------------------------------------------

def test_rng_stream_and_rngs_fork():
    rngs = nnx.Rngs(0, dropout=1)
    stream = rngs["dropout"]
    assert isinstance(stream, nnx.RngStream) and stream.tag == "dropout"
    one = stream.fork()
    assert one.shape == () and int(stream.count.value) == 1
    many = stream.fork(4)
    assert many.shape == (4,) and int(stream.count.value) == 2
    grid = stream.fork((2, 3))
    assert grid.shape == (2, 3)
    forked = rngs.fork(4, dropout=(2, 2))
    assert forked["default"].shape == (4,) and forked["dropout"].shape == (2, 2)
    assert int(rngs.default.count.value) == 1
    single = rngs.fork()
    assert single["default"].shape == ()
    # same stream state, same keys
    a, b = nnx.Rngs(3), nnx.Rngs(3)
    np.testing.assert_array_equal(jax.random.key_data(a.fork(2)["default"]),
                                  jax.random.key_data(b.fork(2)["default"]))
    assert "dropout" in rngs and len(rngs) == 2 and set(rngs) == {"default", "dropout"}
    s = nnx.RngStream("x", 5, count=2)
    np.testing.assert_array_equal(jax.random.key_data(s()),
                                  jax.random.key_data(jax.random.fold_in(jax.random.key(5), 2)))
    with pytest.raises(TypeError, match="int seed or a JAX PRNG key"):
        nnx.Rngs(x="seed")


def test_fork_function_splits_only_matching_streams():
    state = nnx.state(nnx.Rngs(params=0, dropout=1))
    split, bcast = nnx.fork(state, "dropout", (2, 3))
    assert set(dict(split.flat_state())) == {("dropout", "key")}  # only keys are split
    assert split.dropout.key.value.shape == (2, 3)
    assert set(dict(bcast.flat_state())) == {("params", "key"), ("params", "count"),
                                       ("dropout", "count")}
    split_all, rest = nnx.fork(state, ..., (4, None, 3))  # None: a size-1 broadcast axis
    assert split_all.params.key.value.shape == (4, 1, 3)
    assert set(dict(rest.flat_state())) == {("params", "count"), ("dropout", "count")}


def test_string_filter_picks_a_streams_key_not_its_counter():
    rngs = nnx.Rngs(params=0, dropout=1)
    _, drop, counts = nnx.split(rngs, "dropout", nnx.RngCount, ...)[:3]
    assert set(dict(drop.flat_state())) == {("dropout", "key")}
    assert len(dict(counts.flat_state())) == 2


def test_rng_stream_refuses_a_foreign_trace():
    import jax

    rngs = nnx.Rngs(0)

    @jax.jit
    def f():
        with pytest.raises(nnx.errors.TraceContextError, match="different trace level"):
            rngs.params()

    f()
    with pytest.raises(AttributeError, match="No RNG named 'nope'.*nnx.Rngs\\(nope=seed\\)"):
        _ = nnx.Rngs(a=0).nope


# -- SPMD ----------------------------------------------------------------------------------------

def test_get_partition_spec_and_named_sharding():
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
    layer = nnx.Linear(4, 8, kernel_init=init, rngs=nnx.Rngs(0))
    assert nnx.state(layer).kernel.sharding == (None, "model")
    specs = nnx.get_partition_spec(nnx.state(layer))
    assert specs.kernel.value == PartitionSpec(None, "model")
    assert specs.bias.value == PartitionSpec()
    devices = np.array(jax.devices()[:8])
    if devices.size < 8:
        pytest.skip("needs 8 host devices")
    mesh = Mesh(devices.reshape(2, 4), ("data", "model"))
    named = nnx.get_named_sharding(nnx.state(layer), mesh)
    assert named.kernel.value.spec == PartitionSpec(None, "model")
    assert nnx.PARTITION_NAME == "partition_name"


def test_with_sharding_constraint_inside_jit():
    devices = np.array(jax.devices()[:8])
    if devices.size < 8:
        pytest.skip("needs 8 host devices")
    mesh = Mesh(devices.reshape(2, 4), ("data", "model"))

    @jax.jit
    def f(x):
        return nnx.with_sharding_constraint(x * 2, PartitionSpec("data", "model"), mesh=mesh)

    y = f(jnp.ones((4, 8)))
    np.testing.assert_array_equal(y, 2.0)
    assert y.sharding.spec == PartitionSpec("data", "model")
    with jax.set_mesh(mesh):
        z = jax.jit(lambda x: nnx.with_sharding_constraint(x, PartitionSpec("data")))(
            jnp.ones((4, 8)))
    assert z.sharding.spec[0] == "data"
