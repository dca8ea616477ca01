"""The typed graph engine and the lifting primitive: definitions, flatten/unflatten with
object maps, static updates, UpdateContext, pytree Modules, combinator constructors."""

import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import errors
from flaxen.experimental import nnx
from flaxen.experimental.nnx.graph import PytreeType
from flaxen.nnx import _graphdef


def test_graphdef_is_typed_static_pytree_metadata():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    gd, _ = nnx.split(m)
    assert isinstance(gd.nodedef, _graphdef.NodeDef) and gd.nodedef.type is nnx.Linear
    assert set(gd.nodedef.variables) == {"kernel", "bias"}
    assert gd.nodedef.static_fields["in_features"] == 2
    assert jax.tree_util.tree_leaves(gd) == []  # no leaves: passes jax.jit as static data
    out = jax.jit(lambda g: g)(gd)
    assert out == gd and hash(out) == hash(gd)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gd.nodedef.index = 3


def test_plain_containers_are_pytree_nodes_and_not_shared():
    a = {"w": nnx.Param(1.0), "n": 1}
    gd, st = nnx.split([a, a])
    assert gd.nodedef.type is PytreeType
    assert set(dict(st.flat_state())) == {(0, "w")}  # the Variable is shared, the dict is not
    g = nnx.merge(gd, st)
    assert g[0] is not g[1] and g[0]["w"] is g[1]["w"]


def test_flatten_refmap_and_unflatten_reuses_objects():
    m = nnx.Dict(a=nnx.Param(1), b=nnx.Param(2))
    a, b = m.a, m.b
    gd, st, refmap = nnx.graph.flatten(m)
    assert m in refmap and a in refmap and len(refmap) == 3
    m2, idxmap = nnx.graph.unflatten(gd, st, idxmap={refmap[m]: m, refmap[a]: a})
    assert m2 is m and m2.a is a and m2.b is not b
    assert idxmap[refmap[b]] is m2.b


def test_compose_mappings():
    assert nnx.graph.compose_mapping({1: "x", 2: "y"}, {"x": 10}) == {1: 10}
    assert nnx.graph.compose_mapping_reversed({"r": 1, "s": 2}, {1: 5}) == {5: "r"}


def test_unflatten_missing_key_names_the_path():
    gd, _ = nnx.split(nnx.Dict(a=nnx.Param(1)))
    with pytest.raises(errors.GraphStateMismatchError, match="at /a: .*Expected key"):
        nnx.graph.unflatten(gd, nnx.State({}))


def test_graph_update_static_adds_and_rejects():
    a = nnx.Dict(x=1, w=nnx.Param(2))
    g = nnx.List([a, a])
    g2 = nnx.graph.clone(g)
    g2[0]["x"] = 7
    g2.append(nnx.Dict(y=3))
    nnx.graph.graph_update_static(g, g2)
    assert g[0]["x"] == 7 and g[1]["x"] == 7 and g[2]["y"] == 3
    with pytest.raises(errors.GraphUpdateStaticError, match="different type"):
        nnx.graph.graph_update_static([a, 3], [a, a])
    with pytest.raises(errors.GraphUpdateStaticError, match="add a new node at path /2"):
        nnx.graph.graph_update_static(nnx.List([a, 1]), nnx.List([a, 1, a]))


def test_update_context_writes_structure_back():
    class Bar(nnx.Module):
        def __init__(self):
            self.x = 1

    class Foo(nnx.Module):
        def __init__(self):
            self.a = Bar()
            self.b = self.a

    outer = Foo()
    with nnx.UpdateContext() as ctx:
        inner = ctx.merge(*ctx.split(outer))
        inner.a.x = 2
        inner.c = Bar()
        ctx.update(*ctx.split(inner))
    assert outer.a.x == 2 and outer.b is outer.a and outer.c.x == 1


def test_bare_arrays_and_states_as_attributes():
    class Foo(nnx.Module):
        def __init__(self):
            self.a = jnp.ones(2)
            self.s = nnx.State({"b": jnp.zeros(1)})

    gd, st = nnx.split(Foo())
    assert isinstance(st.a, jax.Array) and isinstance(st.s, nnx.State)
    foo = nnx.merge(gd, st)
    assert isinstance(foo.s, nnx.State)

    @nnx.jit
    def bump(f):
        f.a = f.a + 1

    bump(foo)
    np.testing.assert_array_equal(foo.a, [2.0, 2.0])


def test_experimental_pytree_module_and_jit_of_graphdef():
    class P(nnx.Module, experimental_pytree=True):
        def __init__(self):
            self.w = nnx.Param(1.0)
            self.tag = "static"

    p = jax.tree_util.tree_map(lambda x: x + 1, P())
    assert p.w.value == 2.0 and p.tag == "static"
    out = jax.jit(lambda p: p)(p)
    assert isinstance(out, P) and out.w.value == 2.0

    m = nnx.Dict(a=nnx.Param(1))
    gd, st = jax.jit(lambda g, s: nnx.split(nnx.merge(g, s)))(*nnx.split(m))
    assert nnx.merge(gd, st).a.value == 1


def test_variable_is_a_pytree_for_jax_numpy():
    w = nnx.Param(jnp.ones((3, 2)))
    assert jnp.dot(jnp.ones(3), w).shape == (2,)
    assert jax.tree_util.tree_leaves(w)[0] is w.raw_value


def test_dataclass_module_setup_and_split_method():
    @dataclasses.dataclass
    class D(nnx.Module):
        n: int

        def setup(self):
            self.w = nnx.Param(jnp.zeros(self.n))

    d = D(3)
    gd, st = d.split()
    assert st.w.value.shape == (3,)
    assert copy.deepcopy(d).w is not d.w


def test_combinators_are_constructors():
    class Block(nnx.Module):
        def __init__(self, *, rngs):
            self.linear = nnx.Linear(3, 3, rngs=rngs)

        def __call__(self, x):
            return self.linear(x), None

    mlp = nnx.Scan(Block, state_axes={nnx.Param: 0}, length=4)(rngs=nnx.Rngs(0))
    assert mlp.scan_module.linear.kernel.value.shape == (4, 3, 3)
    y, out = mlp(jnp.ones((1, 3)))
    assert y.shape == (1, 3) and out is None
    with pytest.raises(TypeError, match="Expected at least 2 positional"):
        mlp()
    r = nnx.Remat(nnx.Linear)(2, 3, rngs=nnx.Rngs(0))
    assert r(jnp.ones((1, 2))).shape == (1, 3)


def test_scan_partition_name_is_hidden_inside_and_restored():
    seen = []

    class Block(nnx.Module):
        def __init__(self, *, rngs):
            init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("din", "dout"))
            self.linear = nnx.Linear(2, 2, kernel_init=init, rngs=rngs)

        def __call__(self, x):
            seen.append(nnx.state(self.linear).kernel.sharding)
            return self.linear(x), None

    mlp = nnx.Scan(Block, state_axes={nnx.Param: 0}, length=3,
                   transform_metadata={nnx.PARTITION_NAME: "layers"})(rngs=nnx.Rngs(0))
    assert mlp.scan_module.linear.kernel.out_sharding == ("layers", "din", "dout")
    mlp(jnp.ones((1, 2)))
    assert seen[-1] == ("din", "dout")
    assert mlp.scan_module.linear.kernel.out_sharding == ("layers", "din", "dout")


def test_scan_out_axes_prefix_tree():
    class Block(nnx.Module):
        def __init__(self, *, rngs):
            self.linear = nnx.Linear(3, 3, rngs=rngs)

        def __call__(self, x):
            x = self.linear(x)
            return x, (x, x)

    mlp = nnx.Scan(Block, length=5, out_axes=(1, 2))(rngs=nnx.Rngs(0))
    _, (y1, y2) = mlp(jnp.ones((1, 3)))
    assert y1.shape == (1, 5, 3) and y2.shape == (1, 3, 5)


def test_closure_mutation_allowed_under_grad_and_vmap_but_not_jit():
    m = nnx.Dict(a=nnx.Param(1.0))
    jax.grad(lambda x: (setattr(m, "a", 2.0), x)[1])(1.0)
    assert m.a == 2.0

    @jax.jit
    def f():
        with pytest.raises(errors.TraceContextError, match="different trace level"):
            m.a = 3.0

    f()


def test_sow_and_set_attributes_errors_name_the_attribute():
    class Foo(nnx.Module):
        def __init__(self):
            self.y = 10

    with pytest.raises(errors.SowTypeError, match="at /y: .*to be a Variable, got"):
        Foo().sow(nnx.Intermediate, "y", 1)
    with pytest.raises(errors.SetAttributesNotFoundError, match="{'nope'}"):
        Foo().set_attributes(nope=1)


def test_list_items_are_string_attributes_with_integer_paths():
    lst = nnx.List([nnx.Param(1.0), nnx.Param(2.0)])
    assert vars(lst)["0"] is lst[0]
    gd, st = nnx.split(lst)
    assert set(dict(st.flat_state())) == {(0,), (1,)}
    lst2 = nnx.merge(gd, st)
    assert vars(lst2)["1"].value == 2.0
    for _ in range(3):  # past the codegen threshold: the generated merge agrees
        lst2 = nnx.merge(*nnx.split(lst2))
    assert list(vars(lst2)) == ["0", "1"]
    nnx.pop(lst2, nnx.Param)
    assert len(lst2) == 0
