"""Today's nnx.bridge (ToNNX/ToLinen/bridge.Module), nnx.tabulate and nnx.spmd helpers."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from flaxen import errors, nnx
from flaxen import linen as nn
from flaxen.nnx import _sharding, bridge

PLAIN = {"force_terminal": False, "no_color": True, "width": 400}


def _mesh(names=("a", "b")):
    return jax.make_mesh((1,) * len(names), names,
                         axis_types=(jax.sharding.AxisType.Auto,) * len(names))


# -- tabulate ----------------------------------------------------------------------------------


class _Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(2, 3, rngs=rngs)

    def forward(self, x):
        return self.linear(x)


class _Model(nnx.Module):
    def __init__(self, rngs):
        self.block = _Block(rngs)
        self.scale = nnx.BatchStat(jnp.ones(3))

    def __call__(self, x):
        return self.block.forward(x) * self.scale


def test_tabulate_rows_columns_and_totals():
    text = nnx.tabulate(_Model(nnx.Rngs(0)), jnp.ones((1, 2)), console_kwargs=PLAIN)
    # the console's text alone, as Flax's: no blank line before or after the table
    assert not text.startswith("\n") and text.endswith(" \n") and not text.endswith("\n\n")
    lines = text.splitlines()
    assert "_Model Summary" in lines[0]
    header = lines[2]
    for col in ("path", "type", "inputs", "outputs", "BatchStat", "Param"):
        assert col in header
    assert header.index("BatchStat") < header.index("Param")  # columns sorted by type name
    body = "\n".join(lines)
    assert "block/forward" in body and "block/linear" in body
    assert "kernel: float32[2,3]" in body and "bias: float32[3]" in body
    assert "Total Parameters: 12 (48 B)" in body  # 9 params + 3 batch stats
    total = next(line for line in lines if "Total" in line and "Parameters" not in line)
    assert "3 (12 B)" in total and "9 (36 B)" in total


def test_tabulate_depth_and_copy():
    model = _Model(nnx.Rngs(0))
    kernel = model.block.linear.kernel.value
    text = nnx.tabulate(model, jnp.ones((1, 2)), depth=1, console_kwargs=PLAIN)
    assert "block/" not in text  # a method row's path counts the method name
    assert "block/forward" in nnx.tabulate(model, jnp.ones((1, 2)), depth=2,
                                           console_kwargs=PLAIN)
    assert model.block.linear.kernel.value is kernel  # the model itself is not touched
    assert "forward" in vars(_Block) and not hasattr(_Block.forward, "__wrapped__")


def test_tabulate_flops_columns():
    text = nnx.tabulate(_Model(nnx.Rngs(0)), jnp.ones((1, 2)), compute_flops=True,
                        compute_vjp_flops=True, console_kwargs=PLAIN)
    header = text.splitlines()[2]
    assert "flops" in header and "vjp_flops" in header


def test_tabulate_empty_containers_and_none_inputs():
    class M(nnx.Module):
        def sub(self, a, x, *, opt=None):
            return x

        def __call__(self, x):
            return self.sub({}, x, opt=None)

    text = nnx.tabulate(M(), jnp.zeros((1, 4)), console_kwargs=PLAIN)
    assert "{}" in text and "None" in text and "float32[1,4]" in text


def test_tabulate_rejects_unknown_method():
    with pytest.raises(Exception, match="no method 'missing'"):
        nnx.tabulate(_Model(nnx.Rngs(0)), jnp.ones((1, 2)), method="missing")


def test_import_nnx_loads_no_linen():
    code = ("import sys, flaxen.nnx; "
            "print(sorted(m for m in sys.modules if m.startswith('flaxen.linen')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"JAX_PLATFORMS": "cpu", "PATH": ""}, check=True)
    assert out.stdout.strip() == "[]"


# -- spmd --------------------------------------------------------------------------------------


def test_with_partitioning_sets_out_sharding_and_spec():
    init = nnx.with_partitioning(jax.nn.initializers.ones, ("a", None))
    with nnx.use_eager_sharding(False):  # names only: no mesh to place the values on
        layer = nnx.Linear(2, 3, kernel_init=init, rngs=nnx.Rngs(0))
    assert layer.kernel.out_sharding == ("a", None)
    assert layer.kernel.mesh is None and "mesh" in layer.kernel.get_metadata()  # as Flax
    assert nnx.spmd.get_var_pspec(layer.kernel) == PartitionSpec("a", None)
    assert nnx.spmd.get_var_pspec(layer.bias) == PartitionSpec()


def test_logical_rules_context_and_local_rules():
    v = nnx.Param(jnp.ones((2, 2)), out_sharding=("embed", "mlp"), eager_sharding=False,
                  sharding_rules=(("mlp", "model"),))
    assert nnx.spmd.get_var_pspec(v) == PartitionSpec("embed", "model")
    with nnx.logical_axis_rules((("embed", "data"),)):
        assert nnx.spmd.get_var_pspec(v) == PartitionSpec("data", "model")
    assert nnx.spmd.get_var_pspec(v) == PartitionSpec("embed", "model")
    with pytest.raises(ValueError, match="Inconsistent logical axis rules for 'mlp'"):
        _sharding.composite_rules((("mlp", "x"),), (("mlp", "y"),))
    with pytest.raises(TypeError, match="each rule must be a pair"):
        with nnx.logical_axis_rules(("embed",)):
            pass


def test_add_and_remove_axis_update_metadata():
    v = nnx.Param(jnp.ones((2, 3)), out_sharding=("in", "out"), eager_sharding=False,
                  nickname=("i", "o"))
    meta = {nnx.PARTITION_NAME: "layers", "nickname": "L"}
    nnx.spmd.add_axis(v, 1, meta)
    assert v.out_sharding == ("in", "layers", "out")
    assert v.nickname == ("i", "L", "o")
    nnx.spmd.remove_axis(v, 1, meta)
    assert v.out_sharding == ("in", "out") and v.nickname == ("i", "o")
    with pytest.raises(ValueError, match="Expected 'layers' at index 0"):
        nnx.spmd.remove_axis(v, 0, meta)
    with pytest.raises(Exception, match="partition_name"):
        nnx.spmd.add_axis(v, 0, {})


def test_variable_is_sharded_on_creation_with_a_mesh():
    mesh = _mesh()
    v = nnx.Variable(jnp.ones((2, 2)), out_sharding=("a", "b"), mesh=mesh)
    assert isinstance(v.value.sharding, NamedSharding)
    assert v.value.sharding.spec == PartitionSpec("a", "b")
    with jax.set_mesh(mesh):
        w = nnx.Param(jnp.ones((2, 2)), out_sharding=(None, "b"))
    assert w.value.sharding.spec == PartitionSpec(None, "b")
    # no mesh anywhere: an error that says how to give one (as Flax), not an unsharded value
    with pytest.raises(errors.MeshRequiredError, match="An auto mesh context or metadata is "
                       "required") as info:
        nnx.Param(jnp.ones((2, 2)), out_sharding=("a", "b"))
    assert isinstance(info.value, ValueError) and "jax.set_mesh" in str(info.value)
    with pytest.raises(errors.MeshRequiredError):  # under a trace too
        jax.jit(lambda x: nnx.Param(x, out_sharding=("a", None))[...])(jnp.ones((2, 2)))
    lazy = nnx.Param(jnp.ones((2, 2)), out_sharding=("a", "b"), eager_sharding=False)
    assert not isinstance(getattr(lazy.value, "sharding", None), NamedSharding)
    assert lazy.out_sharding == ("a", "b")
    # an empty spec asks for nothing; 0.8.3's ``sharding`` spelling only names axes
    assert nnx.Param(jnp.ones((2, 2)), out_sharding=()).out_sharding == ()
    from flaxen.experimental import nnx as nnx083

    legacy = nnx083.Param(jnp.ones((2, 2)), sharding=("a", "b"))
    assert legacy.get_metadata("out_sharding") == ("a", "b")


def test_mixed_axis_types_are_rejected():
    mesh = jax.make_mesh((1, 1), ("a", "b"), axis_types=(jax.sharding.AxisType.Auto,
                                                         jax.sharding.AxisType.Explicit))
    with pytest.raises(ValueError, match="mixing axis types"):
        nnx.Variable(jnp.ones((2, 2)), out_sharding=("a", "b"), mesh=mesh)


def test_as_abstract_and_get_abstract_model():
    mesh = _mesh()

    def make():
        return nnx.Linear(2, 4, rngs=nnx.Rngs(0),
                          kernel_init=nnx.with_partitioning(jax.nn.initializers.ones,
                                                            (None, "b")))

    with jax.set_mesh(mesh):
        abs_model = nnx.as_abstract(nnx.eval_shape(make))
    assert abs_model.kernel.value.sharding.spec == PartitionSpec(None, "b")
    gdef, abs_state = nnx.get_abstract_model(make, mesh)
    leaves = jax.tree_util.tree_leaves(abs_state)
    specs = sorted(str(leaf.sharding.spec) for leaf in leaves)
    assert specs == sorted([str(PartitionSpec(None, "b")), str(PartitionSpec())])


def test_experimental_face_keeps_sharding_metadata():
    from flaxen.experimental import nnx as nnx_083

    init = nnx_083.with_partitioning(jax.nn.initializers.ones, ("row", None))
    layer = nnx_083.Linear(2, 2, kernel_init=init, rngs=nnx_083.Rngs(0))
    specs = nnx_083.get_partition_spec(nnx_083.state(layer))
    assert tuple(specs["kernel"].value) == ("row", None)


# -- bridge: wrappers --------------------------------------------------------------------------


def test_to_nnx_matches_linen_and_keeps_variables_as_attributes():
    dense = nn.Dense(3)
    x = jnp.ones((2, 4))
    model = bridge.ToNNX(dense, rngs=nnx.Rngs(0)).lazy_init(x)
    assert isinstance(model.kernel, nnx.Param) and model.kernel.shape == (4, 3)
    ref = dense.apply({"params": {"kernel": model.kernel.value, "bias": model.bias.value}}, x)
    np.testing.assert_allclose(model(x), ref)


def test_to_nnx_mutable_collections_update_in_place():
    class Counter(nn.Module):
        @nn.compact
        def __call__(self, x):
            count = self.variable("counts", "n", lambda: jnp.zeros((), jnp.int32))
            if not self.is_initializing():
                count.value += 1
            return x

    model = bridge.lazy_init(bridge.ToNNX(Counter(), rngs=nnx.Rngs(0)), jnp.ones(1))
    assert type(model.n).__name__ == "counts" and int(model.n.value) == 0
    model(jnp.ones(1), mutable=True)
    model(jnp.ones(1), mutable=["counts"])
    assert int(model.n.value) == 2


def test_to_linen_init_apply_and_methods():
    layer = bridge.to_linen(nnx.Embed, 4, 3)
    y, variables = layer.init_with_output(jax.random.key(0), jnp.array([1, 2]))
    assert y.shape == (2, 3) and variables["params"]["embedding"].shape == (4, 3)
    logits = layer.apply(variables, jnp.ones((1, 3)), nnx_method="attend")
    assert logits.shape == (1, 4)


def test_to_linen_boxes_metadata_for_linen_partition_specs():
    layer = bridge.to_linen(nnx.Linear, 2, 3, kernel_init=nnx.with_partitioning(
        jax.nn.initializers.ones, ("in", "out")))
    with nnx.use_eager_sharding(False):  # axis names only, no mesh
        variables = layer.init(jax.random.key(0), jnp.ones((1, 2)))
        assert layer.apply(variables, jnp.ones((5, 2))).shape == (5, 3)
    kernel = variables["params"]["kernel"]
    assert isinstance(kernel, bridge.NNXMeta)
    # the whole metadata travels in the box (as Flax), the modes included: the Variable
    # rebuilt from it is made as the original was, here without eager sharding
    assert kernel.metadata == {"out_sharding": ("in", "out"), "mesh": None, "hijax": False,
                               "ref": False, "eager_sharding": False}
    assert nn.get_partition_spec(variables)["params"]["kernel"] == PartitionSpec("in", "out")
    with pytest.raises(errors.MeshRequiredError):  # eager sharding asked for, no mesh
        layer.init(jax.random.key(0), jnp.ones((1, 2)))


def test_register_variable_name_names_the_collection():
    @nnx.register_variable_name("tallies", overwrite=True)
    class Tally(nnx.Variable):
        pass

    class Counter(nnx.Module):
        def __init__(self):
            self.n = Tally(jnp.array(0))

        def __call__(self):
            self.n.value += 1

    layer = bridge.ToLinen(Counter, skip_rng=True)
    variables = layer.init(jax.random.key(0))
    _, updates = layer.apply(variables, mutable="tallies")
    assert int(updates["tallies"]["n"]) == 1


# -- bridge: Module ----------------------------------------------------------------------------


class _Dense(bridge.Module):
    features: int

    @bridge.compact
    def __call__(self, x):
        w = self.param("w", jax.nn.initializers.ones, (x.shape[-1], self.features))
        return x @ w


def test_bridge_module_compact_names_and_apply():
    class Stack(bridge.Module):
        @bridge.compact
        def __call__(self, x):
            x = _Dense(3)(x)
            return _Dense(2, name="head")(x)

    model = Stack()
    variables = model.init(0, jnp.ones((1, 4)))
    assert sorted(variables["params"]) == ["_Dense_0", "head"]
    assert variables["params"]["head"]["w"].shape == (3, 2)
    y = model.apply(variables, jnp.ones((1, 4)))
    np.testing.assert_allclose(y, jnp.full((1, 2), 12.0))
    assert model.scope is None and isinstance(model, nnx.Module)


def test_bridge_module_setup_stack_and_mutable_variables():
    seen = []

    class Counter(bridge.Module):
        def setup(self):
            seen.append(bridge.current_module() is self)
            self.inner = _Dense(1)

        def __call__(self, x):
            count = self.variable("counts", "n", lambda: jnp.zeros((), jnp.int32))
            count.value += 1
            return self.inner(x)

    model = Counter()
    variables = model.init(jax.random.key(0), jnp.ones((1, 2)))
    assert seen == [True] and int(variables["counts"]["n"]) == 1
    _, updates = model.apply(variables, jnp.ones((1, 2)), mutable="counts")
    assert int(updates["counts"]["n"]) == 2
    assert bridge.MODULE_CONTEXT.module_stack == [None]


def test_bridge_param_shape_mismatch_raises():
    model = _Dense(3)
    variables = model.init(0, jnp.ones((1, 2)))
    with pytest.raises(Exception, match="w"):
        model.apply(variables, jnp.ones((1, 5)))


def test_bridge_unbound_param_raises():
    with pytest.raises(ValueError, match="bound module"):
        _Dense(2).param("w", jax.nn.initializers.ones, (1,))


def test_nnx_in_bridge_module():
    class Outer(bridge.Module):
        @bridge.compact
        def __call__(self, x):
            return bridge.nnx_in_bridge_mdl(lambda r: nnx.Linear(2, 2, rngs=r))(x)

    model = Outer()
    variables = model.init(jax.random.key(0), jnp.ones((1, 2)))
    kernel = variables["params"]["Linear_0"]["kernel"]
    y = model.apply(variables, jnp.ones((1, 2)))
    np.testing.assert_allclose(y, jnp.ones((1, 2)) @ kernel, rtol=1e-6)


def test_bridge_attr_priority_picks_the_shared_submodule_name():
    class Top(bridge.Module):
        def setup(self):
            self.zzz = _Dense(2)
            self.set_attr_priority("zzz", bridge.AttrPriority.HIGH)
            self.aaa = self.zzz  # a second name for the same submodule

        def __call__(self, x):
            return self.aaa(x)

    variables = Top().init(0, jnp.ones((1, 3)))
    assert list(variables["params"]) == ["zzz"]
    np.testing.assert_allclose(Top().apply(variables, jnp.ones((1, 3))), jnp.full((1, 2), 3.0))


def test_bridge_setup_submodule_written_without_setattr_gets_its_variables():
    # a transform in setup (e.g. nnx.compat.vmap) writes the new submodule back into the
    # parent's graph without going through the parent's __setattr__
    class Parent(bridge.Module):
        def setup(self):
            vars(self)["inner"] = _Dense(2)

        def __call__(self, x):
            return self.inner(x)

    variables = {"params": {"inner": {"w": jnp.full((3, 2), 2.0)}}}
    np.testing.assert_allclose(Parent().apply(variables, jnp.ones((1, 3))),
                               jnp.full((1, 2), 6.0))


def test_linen_layers_made_in_a_compact_bridge_method_get_their_params_on_apply():
    from flaxen import linen as nn
    from flaxen.nnx import bridge

    class Dense2(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3, use_bias=False, name="inner")(x)

    class Outer(bridge.Module):
        @bridge.compact
        def __call__(self, x):
            x = bridge.linen_in_bridge_mdl(Dense2())(x)
            return bridge.linen_in_bridge_mdl(Dense2(), name="second")(x)

    model = Outer()
    x = jnp.ones((2, 3))
    variables = model.init(jax.random.key(0), x)
    params = variables["params"]
    assert set(params) == {"Dense2_0", "second"}
    y = model.apply(variables, x)  # the stored kernels are used, nothing is re-initialised
    k1 = params["Dense2_0"]["inner"]["kernel"]
    k2 = params["second"]["inner"]["kernel"]
    np.testing.assert_allclose(np.asarray(y), np.asarray(x @ k1 @ k2), rtol=1e-6)


@pytest.mark.parametrize("where", ["eager", "vmap", "jit"])
def test_annotation_naming_an_axis_the_mesh_lacks_is_refused(where):
    def make(rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("zz", None))
        return nnx.Linear(2, 2, kernel_init=init, rngs=rngs)

    build = {"eager": make,
             "vmap": nnx.vmap(make, in_axes=None, out_axes=0, axis_size=3),
             "jit": nnx.jit(make)}[where]
    with jax.set_mesh(_mesh()), pytest.raises(ValueError, match="zz"):
        build(nnx.Rngs(0))
    with jax.set_mesh(_mesh(("zz", "b"))):  # the same annotation on a mesh that has the axis
        m = build(nnx.Rngs(0))
    # (without a partition name vmap adds no entry for its axis, as in Flax)
    assert m.kernel.out_sharding == ("zz", None)
    assert m.kernel.shape == ((3, 2, 2) if where == "vmap" else (2, 2))
