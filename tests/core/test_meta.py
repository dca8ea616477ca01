"""Tests for flaxen.core.meta: boxes, axis bookkeeping, partition specs and shardings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from flaxen import errors
from flaxen.core import apply, init, lift, meta
from flaxen.core.meta import Partitioned

K = jax.random.PRNGKey(0)
AXIS = {meta.PARTITION_NAME: "layers"}


def _mesh():
    devices = np.array(jax.devices()[:8]).reshape(4, 2)
    return Mesh(devices, ("data", "model"))


class Tagged(meta.AxisMetadata):
    """A minimal custom box: records the axis operations applied to it."""

    def __init__(self, value, log=()):
        self.value, self.log = value, tuple(log)

    def unbox(self):
        return self.value

    def replace_boxed(self, val):
        return Tagged(val, self.log)

    def add_axis(self, index, params):
        return Tagged(self.value, self.log + (("add", index, params.get("tag")),))

    def remove_axis(self, index, params):
        return Tagged(self.value, self.log + (("remove", index, params.get("tag")),))


jax.tree_util.register_pytree_node(
    Tagged, lambda t: ((t.value,), t.log), lambda log, children: Tagged(children[0], log))


def test_partitioned_is_a_pytree_with_only_the_value_as_child():
    box = Partitioned(jnp.ones((2, 3)), ("a", None))
    leaves, treedef = jax.tree_util.tree_flatten(box)
    assert len(leaves) == 1 and leaves[0].shape == (2, 3)
    doubled = jax.tree_util.tree_map(lambda x: x * 2, box)
    assert isinstance(doubled, Partitioned) and doubled.names == ("a", None)
    np.testing.assert_array_equal(doubled.value, 2 * jnp.ones((2, 3)))
    assert meta.is_axis_metadata(box) and not meta.is_axis_metadata(leaves[0])


def test_unbox_replaces_every_box_and_keeps_plain_trees():
    tree = {"a": Partitioned(jnp.zeros(2), ("x",)), "b": [jnp.ones(3), Tagged(jnp.ones(1))]}
    out = meta.unbox(tree)
    assert out["a"].shape == (2,) and out["b"][1].shape == (1,)
    assert not any(meta.is_axis_metadata(leaf) for leaf in
                   jax.tree_util.tree_leaves(out, is_leaf=meta.is_axis_metadata))
    plain = {"w": jnp.ones(2)}
    assert meta.unbox(plain) is plain
    assert meta.unbox(Partitioned(jnp.ones(4), ("x",))).shape == (4,)


def test_replace_boxed_keeps_boxes_around_new_values():
    tree = {"boxed": Partitioned(jnp.zeros(2), ("x",)), "plain": jnp.zeros(3),
            "tagged": Tagged(jnp.zeros(1), log=("kept",))}
    updates = {"boxed": jnp.ones(2), "plain": jnp.full(3, 5.0), "tagged": jnp.full(1, 7.0)}
    out = meta.replace_boxed(tree, updates)
    assert isinstance(out["boxed"], Partitioned) and out["boxed"].names == ("x",)
    np.testing.assert_array_equal(out["boxed"].value, jnp.ones(2))
    np.testing.assert_array_equal(out["plain"], jnp.full(3, 5.0))
    assert isinstance(out["tagged"], Tagged) and out["tagged"].log == ("kept",)
    np.testing.assert_array_equal(out["tagged"].value, jnp.full(1, 7.0))


def test_map_axis_meta_only_touches_boxes():
    tree = {"p": Partitioned(jnp.ones(2), ("x",)), "raw": jnp.ones(2), "n": 3}
    seen = []

    def fn(box):
        seen.append(type(box))
        return box.replace(names=("y",))

    out = meta.map_axis_meta(fn, tree)
    assert seen == [Partitioned]
    assert out["p"].names == ("y",) and out["raw"] is tree["raw"] and out["n"] == 3


def test_add_and_remove_axis_on_trees_pass_index_and_params():
    tree = {"t": Tagged(jnp.ones(2)), "p": Partitioned(jnp.ones((2, 3)), ("a", "b")),
            "raw": jnp.ones(1)}
    params = {meta.PARTITION_NAME: "layers", "tag": "T"}
    added = meta.add_axis(tree, 1, params)
    assert added["t"].log == (("add", 1, "T"),)
    assert added["p"].names == ("a", "layers", "b")
    assert added["raw"] is tree["raw"]
    removed = meta.remove_axis(added, 1, params)
    assert removed["t"].log == (("add", 1, "T"), ("remove", 1, "T"))
    assert removed["p"].names == ("a", "b")


def test_partitioned_add_axis_pads_short_names_and_remove_checks_the_name():
    box = Partitioned(jnp.ones((2, 3, 4)), ("a",))
    assert box.add_axis(3, AXIS).names == ("a", None, None, "layers")
    assert box.add_axis(0, AXIS).names == ("layers", "a")
    with pytest.raises(ValueError, match="expected axis name 'layers'"):
        box.remove_axis(0, AXIS)
    with pytest.raises(AssertionError):  # Flax's class there
        box.remove_axis(0, AXIS)
    with pytest.raises(errors.PartitioningUnspecifiedError, match="partition_name"):
        box.add_axis(0, {})
    with pytest.raises(errors.PartitioningUnspecifiedError):
        meta.remove_axis({"w": box}, 0, {})


def test_get_partition_spec_maps_boxes_and_arrays():
    tree = {"p": Partitioned(jnp.ones((2, 3)), ("data", None)), "a": jnp.ones(2), "s": "x"}
    specs = meta.get_partition_spec(tree)
    assert specs == {"p": P("data", None), "a": P(), "s": None}


def test_get_sharding_with_a_mesh_places_arrays():
    mesh = _mesh()
    tree = {"p": Partitioned(jnp.arange(16.0).reshape(8, 2), ("data", "model")),
            "a": jnp.ones(3)}
    shardings = meta.get_sharding(tree, mesh)
    assert shardings["p"] == NamedSharding(mesh, P("data", "model"))
    assert shardings["a"] == NamedSharding(mesh, P())
    placed = jax.device_put(meta.unbox(tree), shardings)
    assert placed["p"].sharding == shardings["p"]
    # Each of the 8 devices holds one (2, 1) block of the (8, 2) array.
    assert {s.data.shape for s in placed["p"].addressable_shards} == {(2, 1)}
    assert len(placed["p"].addressable_shards) == 8
    np.testing.assert_array_equal(placed["p"], tree["p"].value)


def test_partitioned_mesh_unbox_applies_the_sharding():
    mesh = _mesh()
    box = Partitioned(jnp.arange(8.0).reshape(4, 2), ("data", None), mesh=mesh)
    assert box.mesh is mesh
    # The mesh is static metadata: not a pytree child, kept through tree maps.
    assert len(jax.tree_util.tree_leaves(box)) == 1
    assert jax.tree_util.tree_map(lambda x: x + 1, box).mesh is mesh
    out = jax.jit(lambda b: b.unbox())(box)
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, P("data", None)), 2)
    np.testing.assert_array_equal(out, box.value)
    assert box.get_sharding(mesh) == NamedSharding(mesh, P("data", None))
    # Without a mesh (and none global), unbox is the raw value untouched.
    plain = Partitioned(jnp.ones(2), ("data",))
    assert plain.unbox() is plain.value
    assert box.unbox(apply_constraint=False) is box.value


def test_with_partitioning_params_are_unboxed_for_the_layer():
    init_fn = meta.with_partitioning(jax.nn.initializers.ones, ("in", "out"))

    def layer(scope, x):
        w = scope.param("w", init_fn, (3, 2))
        assert not isinstance(w, Partitioned)
        return x @ w

    y, v = init(layer)(K, jnp.ones((1, 3)))
    assert isinstance(v["params"]["w"], Partitioned) and v["params"]["w"].names == ("in", "out")
    np.testing.assert_array_equal(y, jnp.full((1, 2), 3.0))
    np.testing.assert_array_equal(apply(layer)(v, jnp.ones((1, 3))), y)


def test_scan_partitioned_params_gain_and_lose_the_axis():
    init_fn = meta.with_partitioning(jax.nn.initializers.lecun_normal(), ("in", "out"))

    def body(scope, c, _):
        w = scope.param("w", init_fn, (2, 2))
        assert w.shape == (2, 2)
        return jnp.tanh(c @ w), ()

    fn = lift.scan(body, variable_axes={"params": 1}, split_rngs={"params": True}, length=3,
                   metadata_params=AXIS)

    def model(scope, c):
        return fn(scope, c, None)[0]

    c = jnp.ones((1, 2))
    y, v = init(model)(K, c)
    w = v["params"]["w"]
    assert isinstance(w, Partitioned) and w.names == ("in", "layers", "out")
    assert w.value.shape == (2, 3, 2)
    # Apply strips the axis again (remove_axis) and reproduces the init output.
    np.testing.assert_allclose(apply(model)(v, c), y, rtol=1e-6)
    want = c
    for i in range(3):
        want = jnp.tanh(want @ w.value[:, i])
    np.testing.assert_allclose(y, want, rtol=1e-6)
    # A box whose names do not have the scan axis where expected is rejected.
    bad = {"params": {"w": w.replace(names=("in", "other", "out"))}}
    with pytest.raises(ValueError, match="expected axis name 'layers'"):
        apply(model)(bad, c)


def test_vmap_partitioned_params_gain_the_axis_and_give_shardings():
    mesh = _mesh()
    init_fn = meta.with_partitioning(jax.nn.initializers.ones, ("model",))

    def body(scope, x):
        return x * scope.param("b", init_fn, (2,))

    fn = lift.vmap(body, variable_axes={"params": 0}, split_rngs={"params": True},
                   metadata_params={meta.PARTITION_NAME: "data"})
    y, v = init(fn)(K, jnp.ones((4, 2)))
    b = v["params"]["b"]
    assert b.names == ("data", "model") and b.value.shape == (4, 2)
    assert meta.get_partition_spec(v) == {"params": {"b": P("data", "model")}}
    assert meta.get_sharding(v, mesh)["params"]["b"] == NamedSharding(mesh, P("data", "model"))
    np.testing.assert_array_equal(apply(fn)(v, jnp.full((4, 2), 2.0)), jnp.full((4, 2), 2.0))


def test_partitioned_param_with_mesh_can_be_read_back():
    mesh = _mesh()
    init_fn = meta.with_partitioning(jax.nn.initializers.ones, ("model",), mesh=mesh)

    def body(scope, x):
        return x * scope.param("b", init_fn, (2,))

    _, v = init(body)(K, jnp.ones(2))
    assert v["params"]["b"].mesh is mesh
    np.testing.assert_array_equal(apply(body)(v, jnp.full(2, 3.0)), jnp.full(2, 3.0))


def test_only_the_set_mesh_counts_as_the_global_mesh():
    mesh = _mesh()
    box = Partitioned(jnp.ones((8, 2)), ("data", None))
    with pytest.warns(DeprecationWarning, match="with mesh"), mesh:
        assert meta.get_global_mesh() is None and not meta.global_mesh_defined()
        assert jax.jit(lambda b: b.unbox() + 0)(box).sharding.is_fully_replicated
    with jax.set_mesh(mesh):
        assert meta.global_mesh_defined()
        out = jax.jit(lambda b: b.unbox() + 0)(box)
        assert out.sharding.is_equivalent_to(NamedSharding(mesh, P("data", None)), 2)
