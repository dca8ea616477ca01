"""What the fast paths of State/Variable pytrees and split->merge may reuse, and when not.

A Variable keeps the aux it last flattened to while its metadata is unchanged; a State
remembers its key order per key set; a State built by ``nnx.split`` remembers its leaves
for ``merge`` until any State is edited. Each reuse must give exactly what the
slow path gives, and stop as soon as the thing it stands for changes.
"""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx


def _mlp():
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(2, 3, rngs=rngs)
            self.l2 = nnx.Linear(3, 1, rngs=rngs)

    return MLP(nnx.Rngs(0))


# -- Variable aux ------------------------------------------------------------------------

def test_variable_structure_equal_across_objects_and_reused():
    a, b = nnx.Param(jnp.ones(2), tag="x"), nnx.Param(jnp.zeros(2), tag="x")
    ta, tb = jax.tree.structure(a), jax.tree.structure(b)
    assert ta == tb and hash(ta) == hash(tb)
    # the second flatten of the same Variable hands back the very same aux object
    aux1 = jax.tree_util.tree_flatten(a)[1].node_data()[1]
    aux2 = jax.tree_util.tree_flatten(a)[1].node_data()[1]
    assert aux1 is aux2


def test_variable_structure_follows_metadata_changes():
    a, b = nnx.Param(jnp.ones(2), tag="x"), nnx.Param(jnp.ones(2), tag="x")
    before = jax.tree.structure(a)
    a.tag = "y"
    assert jax.tree.structure(a) != before
    assert jax.tree.structure(a) != jax.tree.structure(b)
    a.set_metadata(tag="x")
    assert jax.tree.structure(a) == jax.tree.structure(b)
    # in-place writes to the metadata dict are seen too
    a._var_metadata["extra"] = 1
    assert jax.tree.structure(a) != jax.tree.structure(b)


def test_variable_types_differ_in_structure():
    assert jax.tree.structure(nnx.Param(1.0)) != jax.tree.structure(nnx.BatchStat(1.0))


def test_unhashable_metadata_still_flattens_and_jits():
    a = nnx.Param(jnp.ones(2), names=["a", "b"])
    b = nnx.Param(jnp.ones(2), names=["a", "b"])
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert hash(jax.tree.structure(a)) == hash(jax.tree.structure(b))
    out = jax.jit(lambda v: jax.tree.map(lambda x: x + 1, v))(a)
    assert type(out) is nnx.Param and out.get_metadata("names") == ["a", "b"]
    np.testing.assert_allclose(out[...], 2.0)


def test_unflattened_variables_do_not_share_metadata():
    leaves, td = jax.tree.flatten(nnx.Param(1.0, tag="x"))
    a, b = td.unflatten(leaves), td.unflatten(leaves)
    a.tag = "changed"
    assert b.tag == "x"
    assert td.unflatten(leaves).tag == "x"


def test_jit_roundtrip_keeps_values_and_metadata():
    model = _mlp()
    gd, st = nnx.split(model)

    @jax.jit
    def step(st):
        return jax.tree.map(lambda x: x * 2, st)

    out = st
    for _ in range(3):
        out = step(out)
    np.testing.assert_allclose(out["l1"]["kernel"][...], st["l1"]["kernel"][...] * 8,
                               rtol=1e-6)
    assert type(out["l1"]["kernel"]) is nnx.Param
    assert out["l1"]["kernel"].get_metadata() == st["l1"]["kernel"].get_metadata()
    assert jax.tree.structure(out) == jax.tree.structure(st)


class Tagged(nnx.Param):
    pass


def test_unflatten_builds_a_full_variable_of_the_exact_class():
    v = Tagged(jnp.arange(3.0), tag="t")
    leaves, td = jax.tree.flatten(v)
    out = td.unflatten([leaves[0] + 1])
    assert type(out) is Tagged and isinstance(out, nnx.Variable)
    np.testing.assert_allclose(out[...], [1.0, 2.0, 3.0])
    assert out.tag == "t" and out.get_metadata() == v.get_metadata()
    # every slot is set: the rebuilt Variable reads, writes, copies and pickles as any other
    out[...] = jnp.zeros(3)
    out.tag = "u"
    assert out.tag == "u" and v.tag == "t"
    assert pickle.loads(pickle.dumps(out)).tag == "u"
    assert copy.deepcopy(out).get_metadata() == out.get_metadata()


def test_unflatten_inside_jit_records_the_jit_trace():
    v = nnx.Param(jnp.ones(2))
    seen = []

    @jax.jit
    def f(v):
        w = jax.tree.map(lambda x: x, v)  # a Variable built by unflatten under the jit trace
        w[...] = w[...] * 3  # allowed: it belongs to this trace
        seen.append(w)
        return w

    out = f(v)
    np.testing.assert_allclose(out[...], 3.0)
    with pytest.raises(nnx.errors.TraceContextError):
        seen[0].tag = "late"  # outside the trace it was built in


@pytest.mark.parametrize("extra", [("extra",), ("__dict__",)])
def test_variable_subclass_with_its_own_layout_unflattens(extra):
    # a subclass that adds slots (or a __dict__) cannot take the fast path's shortcut
    Custom = type("Custom", (nnx.Variable,), {"__slots__": extra})
    v = Custom(jnp.ones(2), tag="c")
    out = jax.jit(lambda v: jax.tree.map(lambda x: x * 2, v))(v)
    assert type(out) is Custom and out.tag == "c"
    np.testing.assert_allclose(out[...], 2.0)


# -- State key order ---------------------------------------------------------------------

def test_state_children_sorted_whatever_the_insertion_order():
    s = nnx.State({"b": 1, "a": 2, "c": 3})
    assert jax.tree.leaves(s) == [2, 1, 3]
    s["0"] = 4  # a new key set: learned anew
    assert jax.tree.leaves(s) == [4, 2, 1, 3]
    del s["a"]
    assert jax.tree.leaves(s) == [4, 1, 3]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(s)[0]]
    assert paths == ["['0']", "['b']", "['c']"]


def test_equal_key_tuples_of_other_types_keep_their_own_keys():
    ints = nnx.State({1: "a", 0: "b"})
    bools = nnx.State({True: "a", 0: "b"})  # (1, 0) == (True, 0)
    assert jax.tree.leaves(ints) == jax.tree.leaves(bools) == ["b", "a"]
    back = jax.tree.unflatten(jax.tree.structure(bools), ["x", "y"])
    assert [type(k) for k in back] == [int, bool]


def test_state_mixed_key_types_keep_their_order():
    s = nnx.State({"w": 1, 1: 2, 0: 3})
    assert jax.tree.leaves(s) == [3, 2, 1]
    rebuilt = jax.tree.unflatten(jax.tree.structure(s), [30, 20, 10])
    assert dict(rebuilt) == {0: 30, 1: 20, "w": 10}


# -- remembered leaves of a split ---------------------------------------------------------

def _split_and_merged(rounds):
    """A model and its last split, after ``rounds`` split+merge pairs (from the third, the
    generated code runs)."""
    model = _mlp()
    for _ in range(rounds):
        gd, st = nnx.split(model)
        nnx.merge(gd, st)
    return model, gd, st


@pytest.mark.parametrize("rounds", [1, 5])
def test_merge_of_an_unchanged_split_state(rounds):
    model, gd, st = _split_and_merged(rounds)
    new = nnx.merge(gd, st)
    assert new.l1.kernel is model.l1.kernel and new is not model
    assert isinstance(new.l2, nnx.Linear) and new.l2.bias is st["l2"]["bias"]


@pytest.mark.parametrize("rounds", [1, 5])
def test_merge_sees_item_writes_after_split(rounds):
    _, gd, st = _split_and_merged(rounds)
    fresh = nnx.Param(jnp.zeros((2, 3)))
    st["l1"]["kernel"] = fresh
    assert nnx.merge(gd, st).l1.kernel is fresh
    st.l2.bias = nnx.Param(jnp.full((1,), 5.0))
    assert float(nnx.merge(gd, st).l2.bias[0]) == 5.0


@pytest.mark.parametrize("rounds", [1, 5])
def test_merge_sees_raw_mapping_writes_after_split(rounds):
    _, gd, st = _split_and_merged(rounds)
    raw = st["l1"].raw_mapping
    raw["bias"] = nnx.Param(jnp.full((3,), 7.0))
    np.testing.assert_allclose(nnx.merge(gd, st).l1.bias[...], 7.0)


def test_copied_or_pickled_state_merges_its_own_variables():
    model = _mlp()
    gd, st = nnx.split(model)
    shallow = copy.copy(st)  # another root over the same sub-States
    assert nnx.merge(gd, shallow).l1.kernel is shallow["l1"]["kernel"]
    for other in (copy.deepcopy(st), pickle.loads(pickle.dumps(st))):
        new = nnx.merge(gd, other)
        assert new.l1.kernel is other["l1"]["kernel"]
        assert new.l1.kernel is not model.l1.kernel


def test_merge_with_another_graphdef_ignores_remembered_leaves():
    a, b = nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Linear(2, 3, use_bias=False,
                                                         rngs=nnx.Rngs(0))
    _, st = nnx.split(a)
    gd_b, _ = nnx.split(b)
    # 'bias' is a static None in b: a Variable there is extra, not silently dropped
    with pytest.raises(ValueError, match="does not have"):
        nnx.merge(gd_b, st)


def test_update_from_unchanged_and_edited_split_state():
    model = _mlp()
    gd, st = nnx.split(model)
    nnx.update(model, st)  # its own Variables: nothing changes
    other = _mlp()
    st["l1"]["kernel"] = nnx.Param(jnp.ones((2, 3)))
    nnx.update(other, st)
    np.testing.assert_allclose(other.l1.kernel[...], 1.0)


# -- a container root: (model, optimizer) -------------------------------------------------

def _leaf_ids(state):
    return [id(v) for v in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable))]


@pytest.mark.parametrize("graph", [True, False])
def test_tuple_root_split_is_reused_and_follows_changes(graph):
    a, b = nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Linear(3, 1, rngs=nnx.Rngs(1))
    first = [nnx.split((a, b), graph=graph) for _ in range(4)]
    assert all(gd == first[0][0] for gd, _ in first)
    assert all(_leaf_ids(st) == _leaf_ids(first[0][1]) for _, st in first)
    assert first[-1][1][1]["kernel"] is b.kernel
    b.kernel = nnx.Param(jnp.zeros((3, 1)))  # an attribute write: walked again
    gd, st = nnx.split((a, b), graph=graph)
    assert st[1]["kernel"] is b.kernel
    c = nnx.Linear(3, 1, rngs=nnx.Rngs(2))
    gd, st = nnx.split((a, c), graph=graph)  # other items: another walk
    assert st[1]["kernel"] is c.kernel
    new_a, new_c = nnx.merge(gd, st)
    assert new_c.kernel is c.kernel if graph else jnp.array_equal(new_c.kernel[...],
                                                                  c.kernel[...])


@pytest.mark.parametrize("graph", [True, False])
def test_list_and_dict_roots_follow_in_place_changes(graph):
    a, b = nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Linear(3, 1, rngs=nnx.Rngs(1))
    items = [a]
    for _ in range(3):
        _, st = nnx.split(items, graph=graph)
    assert list(st.keys()) == [0]
    items.append(b)  # the same list object, grown
    _, st = nnx.split(items, graph=graph)
    assert list(st.keys()) == [0, 1]
    d = {"model": a}
    for _ in range(3):
        _, st = nnx.split(d, graph=graph)
    d["model"] = b
    _, st = nnx.split(d, graph=graph)
    assert st["model"]["kernel"] is b.kernel
    _, st = nnx.split({"other": a}, graph=graph)
    assert list(st.keys()) == ["other"]


def test_tree_mode_tuple_root_still_refuses_sharing_every_time():
    a = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    for _ in range(3):
        with pytest.raises(ValueError, match="shared"):
            nnx.split((a, a), graph=False)


def test_container_root_without_graph_nodes():
    gd, st = nnx.split((1, "x"))
    assert dict(st) == {} and nnx.merge(gd, st) == (1, "x")


# -- a State straight out of unflatten ----------------------------------------------------

def _unflattened():
    s = nnx.State({"b": nnx.Param(jnp.ones(2)), "a": {"c": 1.0}})
    return jax.tree.map(lambda x: x * 2, s)


def test_unflattened_state_reads_like_any_state():
    t = _unflattened()
    assert list(t) == ["a", "b"] and len(t) == 2 and "a" in t
    assert t.a.c == 2.0 and t["a"]["c"] == 2.0
    np.testing.assert_allclose(t.b[...], 2.0)
    assert t == _unflattened()
    assert "State(" in repr(_unflattened())
    assert dict(_unflattened().raw_mapping).keys() == {"a", "b"}
    again = pickle.loads(pickle.dumps(_unflattened()))
    assert again.a.c == 2.0
    assert copy.deepcopy(_unflattened()).a.c == 2.0


def test_unflattened_state_writes_then_flattens_what_it_holds():
    t = _unflattened()
    t["z"] = 5.0
    assert jax.tree.leaves(t)[-1] == 5.0
    t = _unflattened()
    del t["a"]
    assert list(t) == ["b"] and len(jax.tree.leaves(t)) == 1
    t = _unflattened()
    t.a.c = 9.0  # a nested write: the nested State is its own object
    assert jax.tree.leaves(t)[0] == 9.0
    with pytest.raises(AttributeError, match="no key 'zz'"):
        _ = _unflattened().zz


def test_unflattened_state_flattens_to_the_same_structure():
    s = nnx.State({"b": nnx.Param(jnp.ones(2)), "a": {"c": 1.0}})
    t = jax.tree.map(lambda x: x, s)
    assert jax.tree.structure(t) == jax.tree.structure(s)
    assert jax.tree.leaves(t) == jax.tree.leaves(s)
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(t)[0]]
    assert paths == [p for p, _ in jax.tree_util.tree_flatten_with_path(s)[0]]


def test_metadata_writes_on_jitted_outputs_stay_on_their_variable():
    step = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s))
    s = nnx.State({"a": nnx.Param(jnp.ones(2), tag="t"), "b": nnx.Param(jnp.ones(2), tag="t")})
    s = step(step(s))  # two outputs from the same cached output structure
    before = jax.tree.structure(s)
    out = step(s)
    a, b = out["a"], out["b"]
    a.tag = "changed"
    a.set_metadata(extra=1)
    del a.extra
    b.set_metadata("other", 2)
    b.del_metadata("other")
    assert b.tag == "t" and out["a"].tag == "changed"
    fresh = step(s)  # jit's cached structure still says "t"
    assert fresh["a"].tag == "t" and fresh["b"].tag == "t"
    assert jax.tree.structure(step(s)) == before
    c = copy.copy(fresh["a"])
    c.tag = "copy"
    assert fresh["a"].tag == "t"
