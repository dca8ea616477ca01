"""Today's (Flax 0.12.8) Pytree/Module and graph API at flaxen.nnx: data vs static
attributes, split/merge holding the Variables themselves, graph vs tree mode, compat."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import config, nnx


class Holder(nnx.Pytree):
    def __init__(self, a, b, c):
        self.a = nnx.data(a)
        self.b = nnx.static(b)
        self.c = c


def test_pytree_leaves_follow_data_status():
    h = Holder(1, 2, jnp.array(3))
    assert [int(x) for x in jax.tree.leaves(h)] == [1, 3]
    h.a = nnx.static(5)
    assert len(jax.tree.leaves(h)) == 1
    h.b = nnx.data(7)
    assert 7 in jax.tree.leaves(h)
    doubled = jax.tree.map(lambda x: x * 2, h)
    assert isinstance(doubled, Holder) and doubled.b == 14 and doubled.a == 5


def test_static_attribute_rejects_data():
    h = Holder(1, 2, 3)
    with pytest.raises(ValueError, match="Found data on value of type"):
        h.b = ["x", jnp.ones(2)]
    with pytest.raises(ValueError, match="Found data in value of type"):
        h.b = nnx.static(jnp.ones(2))
    with pytest.raises(ValueError, match="Cannot assign data value"):
        h.c = jnp.ones(2)  # c was static (an int)


def test_dataclass_fields_and_is_data():
    @nnx.dataclass
    class Pair(nnx.Pytree):
        a: int = nnx.data()
        b: int = nnx.static()

    assert jax.tree.leaves(Pair(1, 2)) == [1]
    assert nnx.is_data(jnp.zeros(1)) and nnx.is_data(nnx.Param(1))
    assert not nnx.is_data([jnp.zeros(1)]) and not nnx.is_data("x")


def test_object_is_not_a_pytree_and_module_is():
    class Plain(nnx.Object):
        def __init__(self):
            self.xs = [jnp.ones(1)]  # no checks

    p = Plain()
    assert jax.tree.leaves(p) == [p]
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert len(jax.tree.leaves(m)) == 2


def test_list_and_dict_items_are_data():
    lst = nnx.List([jnp.ones(1), nnx.Param(2)])
    assert len(jax.tree.leaves(lst)) == 2
    d = nnx.Dict(a=nnx.Param(1), b="static")
    assert len(jax.tree.leaves(d)) == 1
    _, state = nnx.split(lst)
    assert 1 in state


def test_split_state_holds_the_variables_and_merge_reuses_them():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(m)
    assert state["kernel"] is m.kernel
    m2 = nnx.merge(graphdef, state)
    assert m2 is not m and m2.kernel is m.kernel
    c = nnx.clone(m)
    assert c.kernel is not m.kernel
    assert (c.kernel.value == m.kernel.value).all()


def test_graph_mode_keeps_sharing_tree_mode_rejects_it():
    v = nnx.Param(1)
    graphdef, state = nnx.split([v, v], graph=True)
    assert len(nnx.to_flat_state(state)) == 1
    out = nnx.merge(graphdef, state)
    assert out[0] is out[1]
    with pytest.raises(ValueError, match="found at paths"):
        nnx.split([v, v], graph=False)
    with pytest.raises(ValueError, match="does not support shared references"):
        nnx.compat.split([v, v], graph=False)


def test_config_flag_sets_default_graph_mode():
    v = nnx.Param(1)
    old = config._read("nnx_graph_mode")
    try:
        config.update("nnx_graph_mode", False)
        assert nnx.set_graph_mode.current_value() is False
        with pytest.raises(ValueError, match="found at paths"):
            nnx.split([v, v])
        assert len(nnx.to_flat_state(nnx.compat.split([v, v])[1])) == 1
    finally:
        config.update("nnx_graph_mode", old)


def test_tree_mode_split_merge_roundtrip():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(m, nnx.Param, graph=False)
    m2 = nnx.merge(graphdef, params)
    assert isinstance(m2, nnx.Linear) and m2.kernel is m.kernel


def test_split_of_leaves_returns_the_leaf():
    x = jnp.array(1.0)
    graphdef, state = nnx.split(x)
    assert state is x and nnx.merge(graphdef, state) is x
    p = nnx.Param(3)
    graphdef, state = nnx.split(p)
    assert state is p and nnx.merge(graphdef, state) is p


def test_iter_graph_children_first_and_iter_modules():
    child = nnx.Module()
    child.w = nnx.Param(1)
    root = nnx.Module()
    root.a = child
    root.b = child
    nodes = [n for _, n in nnx.iter_graph(root)]
    assert nodes.index(child.w) < nodes.index(child) < nodes.index(root)
    assert sum(n is child for n in nodes) == 1
    assert [p for p, _ in nnx.iter_modules(root)] == [("a",), ()]
    assert nnx.find_duplicates(root) == [[("a",), ("b",)]]


def test_recursive_map_replaces_shared_once():
    class Leafy(nnx.Pytree):
        def __init__(self, d):
            self.d = d

    f = Leafy(1)
    out = nnx.recursive_map(lambda p, n: Leafy(-n.d) if isinstance(n, Leafy) else n, [f, f])
    assert out[0] is out[1] and out[0].d == -1


def test_unpack_and_merge_graph_states():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    params = nnx.unpack(m, nnx.Param)
    assert isinstance(params, nnx.GraphState) and "kernel" in params
    m2 = nnx.merge(params)
    assert isinstance(m2, nnx.Linear)
    other = nnx.unpack(nnx.Linear(3, 3, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="GraphDef must be the same"):
        nnx.merge(params, other)


def test_view_and_with_attributes_share_variables():
    class Block(nnx.Module):
        def __init__(self):
            self.linear = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
            self.dropout = nnx.Dropout(0.5, deterministic=False)

    b = Block()
    v = nnx.with_attributes(b, deterministic=True)
    assert v.dropout.deterministic and not b.dropout.deterministic
    assert v.linear.kernel is b.linear.kernel
    with pytest.raises(ValueError, match=r"Unused keys found in nnx.view: \['nope'\]"):
        nnx.view(b, nope=True)


def test_capture_collects_sown_values_by_module_path():
    class Inner(nnx.Module):
        def __call__(self, x):
            self.sow(nnx.Intermediate, "y", x * 2)
            return x * 2

    class Outer(nnx.Module):
        def __init__(self):
            self.inner = Inner()

        def __call__(self, x):
            return self.inner(x) + 1

    model = Outer()
    out, intms = nnx.capture(model, nnx.Intermediate)(jnp.ones(2))
    assert out.tolist() == [3.0, 3.0]
    assert intms["inner"]["y"].value[0].tolist() == [2.0, 2.0]
    assert "y" not in vars(model.inner)  # nothing written on the module


def test_experimental_face_keeps_08_split_and_plain_lists():
    from flaxen.experimental import nnx as old

    class M(old.Module):
        def __init__(self):
            self.layers = [old.Linear(2, 2, rngs=old.Rngs(0))]  # allowed in 0.8.3

    m = M()
    _, state = old.split(m)
    assert isinstance(state["layers"][0]["kernel"], old.VariableState)
    assert jax.tree.leaves(m) == [m]  # not a pytree


def test_explicit_static_with_data_raises_even_on_a_data_attribute():
    h = Holder(1, 2, 3)
    h.b = nnx.data(4)
    with pytest.raises(ValueError, match="Found data in value of type"):
        h.b = nnx.static(jnp.ones(2))


def test_clone_arrays_gives_fresh_buffers():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    assert nnx.clone(m).kernel.value is m.kernel.value
    fresh = nnx.clone(m, arrays=True)
    assert fresh.kernel.value is not m.kernel.value
    assert (fresh.kernel.value == m.kernel.value).all()
