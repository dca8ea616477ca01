"""flaxen.struct: frozen pytree dataclasses, static fields, PyTreeNode, serialization."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import serialization, struct


@struct.dataclass
class Model:
    w: jnp.ndarray
    fn: object = struct.field(pytree_node=False, default=None)
    b: float = 0.0


def test_fields_are_leaves_and_static_fields_are_not():
    m = Model(jnp.ones(2), fn=len, b=1.0)
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(m)
    assert [p for p, _ in paths_leaves] == [
        (jax.tree_util.GetAttrKey("w"),), (jax.tree_util.GetAttrKey("b"),)]
    rebuilt = jax.tree_util.tree_unflatten(treedef, [jnp.zeros(2), 5.0])
    assert rebuilt.fn is len and rebuilt.b == 5.0
    assert jax.tree_util.tree_structure(Model(1.0, fn=str)) != jax.tree_util.tree_structure(
        Model(1.0, fn=len))


def test_frozen_and_replace():
    m = Model(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.w = 2.0
    m2 = m.replace(b=3.0)
    assert m2.b == 3.0 and m.b == 0.0
    assert dataclasses.is_dataclass(Model) and Model.__dataclass_params__.frozen
    assert m == Model(1.0) and hash(Model(1.0)) == hash(Model(1.0))


def test_jit_vmap_grad():
    m = Model(jnp.ones(3), fn=jnp.sin, b=2.0)
    out = jax.jit(lambda m: m.replace(w=m.fn(m.w) * m.b))(m)
    np.testing.assert_allclose(out.w, 2 * np.sin(1.0) * np.ones(3), rtol=1e-6)
    g = jax.grad(lambda m: (m.w * m.b).sum())(m)
    np.testing.assert_allclose(g.w, [2.0, 2.0, 2.0])
    assert float(g.b) == 3.0 and g.fn is jnp.sin
    batched = Model(jnp.ones((4, 3)), b=jnp.arange(4.0))
    res = jax.vmap(lambda m: (m.w * m.b).sum())(batched)
    np.testing.assert_allclose(res, [0, 3, 6, 9])


def test_kw_only_and_idempotence():
    @struct.dataclass(kw_only=True)
    class P:
        a: int = 1
        b: int

    assert P(b=2) == P(a=1, b=2)
    with pytest.raises(TypeError):
        P(1, 2)
    assert struct.dataclass(P) is P


def test_field_metadata_and_kwargs():
    f = struct.field(pytree_node=False, default=3, metadata={"k": 1})
    assert f.metadata == {"k": 1, "pytree_node": False} and f.default == 3
    assert struct.field().metadata["pytree_node"] is True


def test_pytreenode_subclasses_and_inheritance():
    class Layer(struct.PyTreeNode):
        w: float
        act: str = struct.field(pytree_node=False, default="relu")

    class Deeper(Layer):
        extra: float = 5.0

    class KW(struct.PyTreeNode, kw_only=True):
        a: int = 1
        b: int

    assert jax.tree_util.tree_leaves(Layer(2.0)) == [2.0]
    assert jax.tree_util.tree_leaves(Deeper(1.0)) == [1.0, 5.0]
    assert KW(b=2).b == 2
    assert Layer(1.0).replace(w=3.0).w == 3.0
    with pytest.raises(TypeError):
        struct.PyTreeNode()


def test_post_init_reruns_on_unflatten_and_init_false_fields_are_skipped():
    @struct.dataclass
    class C:
        a: float
        derived: float = dataclasses.field(init=False, default=0.0)

        def __post_init__(self):
            object.__setattr__(self, "derived", self.a * 2)

    c = jax.tree_util.tree_map(lambda x: x + 1, C(1.0))
    assert c.a == 2.0 and c.derived == 4.0
    assert jax.tree_util.tree_leaves(C(1.0)) == [1.0]


def test_serialization_drops_static_fields_and_names_paths():
    m = Model(np.ones(2, np.float32), fn=len, b=1.5)
    assert serialization.to_state_dict(m).keys() == {"w", "b"}
    restored = serialization.from_bytes(Model(np.zeros(2, np.float32), fn=len),
                                        serialization.to_bytes(m))
    assert restored.fn is len and restored.b == 1.5
    np.testing.assert_array_equal(restored.w, [1.0, 1.0])
    with pytest.raises(ValueError, match=r"Missing field b .* at path /model"):
        serialization.from_state_dict({"model": m}, {"model": {"w": 1}})
    with pytest.raises(ValueError, match=r'Unknown field\(s\) "z"'):
        serialization.from_state_dict(m, {"w": 1, "b": 2, "z": 3})
    with pytest.raises(ValueError, match="expected a state dict"):
        serialization.from_state_dict(m, 5)


def test_generic_pytree_node_is_subscriptable_and_still_a_struct():
    from typing import Generic, TypeVar

    import jax

    from flaxen import struct as st

    T = TypeVar("T")

    class Box(st.PyTreeNode, Generic[T]):
        value: T
        label: str = st.field(pytree_node=False, default="box")

    assert Box.__parameters__ == (T,)
    b = Box[int](3)
    assert isinstance(b, Box) and b.value == 3
    assert jax.tree.leaves(Box(jax.numpy.ones(2))) and jax.tree.leaves(b) == [3]
    assert b.replace(value=4).value == 4

    class Sub(Box[float]):
        extra: float = 0.0

    assert Sub(1.0, extra=2.0).extra == 2.0 and jax.tree.leaves(Sub(1.0)) == [1.0, 0.0]


def test_struct_options_frozen_and_kw_only():
    import dataclasses

    import jax

    from flaxen import struct as st

    @st.dataclass(frozen=False)
    class Mutable:
        a: int

    m = Mutable(1)
    m.a = 2  # frozen=False is honoured, as in Flax
    assert jax.tree.leaves(m) == [2]

    @st.dataclass
    class Frozen:
        a: int

    try:
        Frozen(1).a = 2
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("frozen by default")

    class KW(st.PyTreeNode, kw_only=True):
        a: int = 0
        b: int

    assert KW(b=1) == KW(a=0, b=1)
    try:
        KW(0, 1)
    except TypeError:
        pass
    else:
        raise AssertionError("kw_only fields are keyword-only")

    class Loose(st.PyTreeNode, frozen=False):
        a: int

    x = Loose(1)
    x.a = 5
    assert x.a == 5
