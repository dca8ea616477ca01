"""flaxen.nnx.extract: every helper of Flax 0.12.8's ``extract`` module on small inputs,
their errors included."""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx, struct
from flaxen.nnx import extract

GetAttrKey = jax.tree_util.GetAttrKey
SequenceKey = jax.tree_util.SequenceKey


# -- names ------------------------------------------------------------------------------------

def test_typevars_and_aliases():
    for name in ("A", "B", "F", "S"):
        assert isinstance(getattr(extract, name), tp.TypeVar)
    assert extract.F.__bound__ is tp.Callable
    assert extract.Index is int
    assert extract.Prefix is tp.Any and extract.Leaf is tp.Any
    assert tp.get_origin(extract.KeyPath) is tuple
    assert tp.get_origin(extract.KeepFn) is tp.get_origin(tp.Callable[[], bool])


def test_names_flax_imports_for_its_own_use_are_reachable():
    import collections

    import flaxen.typing

    assert extract.graphlib is nnx.graphlib and extract.variablelib is nnx.variablelib
    assert extract.typing is flaxen.typing and extract.struct is struct
    assert extract.Missing is flaxen.typing.Missing and extract.Pytree is nnx.Pytree
    assert extract.namedtuple is collections.namedtuple and extract.State is nnx.State


# -- prefixes ---------------------------------------------------------------------------------

def test_broadcast_prefix_repeats_each_prefix_leaf():
    tree = ([1, 2], {"a": 3, "b": 4})
    assert extract.broadcast_prefix((0, 1), tree) == [0, 0, 1, 1]
    assert extract.broadcast_prefix(
        (None, {"a": 1, "b": None}), tree, prefix_is_leaf=lambda x: x is None
    ) == [None, None, 1, None]
    # a Variable of the full tree is one leaf when tree_is_leaf says so
    v = nnx.Param(jnp.ones(3))
    assert extract.broadcast_prefix(
        7, (v, 1), tree_is_leaf=lambda x: isinstance(x, nnx.Variable)) == [7, 7]


def test_broadcast_prefix_not_a_prefix_is_a_clear_error():
    with pytest.raises(ValueError, match="is not a prefix of the tree"):
        extract.broadcast_prefix((0, 1, 2), ([1], 2))
    with pytest.raises(ValueError, match="is not a prefix of the tree"):
        extract.broadcast_prefix2({"x": 0}, {"y": 1})


def test_broadcast_prefix2_paths_and_leaves():
    paths, leaves = extract.broadcast_prefix2(
        {"a": 0, "b": None}, {"a": (1, 2), "b": 3}, prefix_leaf=lambda x: x is None)
    assert [jax.tree_util.keystr(p) for p in paths] == ["['a']", "['a']", "['b']"]
    assert leaves == [0, 0, None]


def test_broadcast_prefix_map_with_rest_trees():
    out = extract.broadcast_prefix_map(
        lambda path, p, x, y: (jax.tree_util.keystr(path), p, x + y),
        (10, 20), ([1, 2], 3), ([10, 20], 30))
    assert out == ([("[0][0]", 10, 11), ("[0][1]", 10, 22)], ("[1]", 20, 33))


def test_extract_and_insert_round_trip():
    tree = {"a": [1, 2], "b": 3}
    new, found = extract.extract(lambda path, p, x: p == "take", {"a": "take", "b": "keep"},
                                 tree)
    assert found == [1, 2]
    assert new == {"a": [extract.ExtractIndex(0), extract.ExtractIndex(1)], "b": 3}
    assert jax.tree.leaves(new) == [3]  # ExtractIndex is static
    assert extract.insert(new, found) == tree
    with pytest.raises(ValueError, match="points past"):
        extract.insert(new, [1])


def test_extract_index_is_a_frozen_dataclass():
    i = extract.ExtractIndex(3)
    assert [f.name for f in dataclasses.fields(i)] == ["index"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        i.index = 4  # type: ignore[misc]
    assert i == extract.ExtractIndex(3) and hash(i) == hash(extract.ExtractIndex(3))


def test_tuple_helpers():
    t = ("a", "b", "c")
    assert extract.mask_at(t, 1) == ("b", ("a", extract.Mask(), "c"))
    assert extract.mask_at(t, None) == (None, t)
    assert extract.mask_at(["a"], 0) == (None, ["a"])
    assert extract.slice_at(t, 1) == ("b", ("a", "c"))
    assert extract.slice_at(t, None) == (None, t)
    assert extract.replace_at(t, 0, "z") == ("z", "b", "c")
    assert extract.replace_at(t, None, "z") is t
    assert extract.find(t, "c") == 2 and extract.find(t, "q") is None
    assert extract.find(list(t), "a") is None
    assert jax.tree.leaves((extract.Mask(), 1)) == [1]
    assert isinstance(extract.Mask(), tuple)


# -- argument containers ----------------------------------------------------------------------

def test_labeled_names_paths_and_indexing():
    t = extract.labeled(args=(1, 2), out=3)
    assert t.args == (1, 2) and t["out"] == 3 and t[1] == 3
    assert t.keys() == ("args", "out") and dict(**t) == {"args": (1, 2), "out": 3}
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(t)]
    assert paths == [".args[0]", ".args[1]", ".out"]
    assert type(t) is type(extract.labeled(args=0, out=0))
    assert type(t) is not type(extract.labeled(out=0, args=0))


def test_ordered_dict_flattens_in_insertion_order():
    d = extract.OrderedDict([("z", 1), ("a", 2)])
    assert isinstance(d, dict) and jax.tree.leaves(d) == [1, 2]
    paths = [p for p, _ in jax.tree_util.tree_leaves_with_path(d)]
    assert paths == [(jax.tree_util.DictKey("z"),), (jax.tree_util.DictKey("a"),)]
    out = jax.tree.map(lambda x: x + 1, d)
    assert type(out) is extract.OrderedDict and list(out.items()) == [("z", 2), ("a", 3)]
    assert "OrderedDict" in repr(d)


def test_filter_kwargs_and_treemap_copy_args():
    def f(x, /, y, *, z=0):
        return x

    assert extract.filter_kwargs(f, x=1, y=2, z=3, w=4) == {"y": 2, "z": 3}
    assert extract.filter_kwargs(lambda **kw: kw, w=4) == {"w": 4}

    seen = []

    @extract.treemap_copy_args
    def g(xs, *, d):
        seen.append((xs, d))
        xs.append(9)
        d["new"] = 1

    xs, d = [1], {"k": 2}
    g(xs, d=d)
    assert xs == [1] and d == {"k": 2}
    assert seen[0][0] == [1, 9] and g.__name__ == "g"


# -- updates ----------------------------------------------------------------------------------

def test_snapshot_copy_var_structure_and_variable_changed():
    v = nnx.Param(jnp.zeros(2))
    args = {"m": [v]}
    current, snap = extract.snapshot(args)
    assert current["m"][0] is v and current["m"] is not args["m"]
    assert snap["m"][0] is not v and snap["m"][0][...] is v[...]
    assert not extract.variable_changed(v, snap["m"][0])
    v[...] = jnp.ones(2)
    assert extract.variable_changed(v, snap["m"][0])
    copied = extract.copy_var_structure(args)
    assert copied["m"] is not args["m"] and copied["m"][0] is v
    # metadata counts as structure
    w = nnx.Param(1.0)
    (_,), (w_snap,) = extract.snapshot((w,))
    w.set_metadata(tag="x")
    assert extract.variable_changed(w, w_snap)


def test_updates_sequence_and_pytree():
    a, b = nnx.Param(1.0), nnx.BatchStat(2.0)
    u = extract.Updates.create([(("a",), a)])
    u.append(("b",), b)
    assert len(u) == 2 and list(u) == [(("a",), a), (("b",), b)]
    assert u[1] == (("b",), b) and u[("a",)] is a
    assert u.paths == [("a",), ("b",)] and u.leaves == [a, b]
    with pytest.raises(NotImplementedError):
        u[0:1]
    with pytest.raises(KeyError, match="No update at key path"):
        u[("c",)]
    leaves, treedef = jax.tree_util.tree_flatten(u)
    assert len(leaves) == 2
    u2 = jax.tree_util.tree_unflatten(treedef, leaves)
    assert u2.paths == u.paths
    assert "Updates" in repr(u)
    assert isinstance(u, tp.Sequence)


def test_get_updates_groups_changed_variables_by_prefix():
    a, b, c = nnx.Param(1.0), nnx.Param(2.0), nnx.Param(3.0)
    args = extract.labeled(args=(a, b, c))
    current, snap = extract.snapshot(args)
    a[...], c[...] = 10.0, 30.0
    by_axis = extract.get_updates(current, snap, prefix=extract.labeled(args=(0, None, 1)),
                                  known_prefixes=(None, 0, 1))
    keys = [[jax.tree_util.keystr(p) for p in u.paths] for u in by_axis]
    assert keys == [[], [".args[0]"], [".args[2]"]]
    everything = extract.get_updates(current, snap, keep_fn=lambda *_: True)
    assert len(everything) == 1 and len(everything[0]) == 3
    with pytest.raises(ValueError, match="not one of known_prefixes"):
        extract.get_updates(current, snap, prefix=extract.labeled(args=(0, None, 1)))


def test_get_updates_skips_ref_variables():
    r = nnx.Param(jnp.zeros(2), ref=True)
    current, snap = extract.snapshot((r,))
    r[...] = jnp.ones(2)
    assert extract.get_updates(current, snap, keep_fn=lambda *_: True)[0].paths == []


def test_apply_updates_writes_through_variables_map():
    outer = nnx.Param(jnp.zeros(2))
    variables = extract.check_no_aliases("vmap", args=(outer,))
    update = nnx.Param(jnp.full(2, 5.0))
    extract.apply_updates(variables, [extract.Updates.create(
        [((GetAttrKey("args"), SequenceKey(0)), update)])])
    np.testing.assert_array_equal(outer[...], jnp.full(2, 5.0))
    with pytest.raises(RuntimeError, match=r"no Variable at this path"):
        extract.apply_updates(variables, [extract.Updates.create([(("nope",), update)])])


def test_to_masked_places_updates_by_path():
    v = nnx.Param(1.0)
    masked = extract.labeled(args=(None, None, 3))
    u = extract.Updates.create([((GetAttrKey("args"), SequenceKey(1)), v)])
    out = extract.to_masked(masked, [u])
    assert out.args[0] is None and out.args[1] is v and out.args[2] is None


def test_check_no_aliases_returns_variables_and_refuses_duplicates():
    v, w = nnx.Param(1.0), nnx.Param(2.0)
    found = extract.check_no_aliases("vmap", args=(v,), kwargs={"w": w})
    assert list(found.values()) == [v, w]
    assert list(found) == [(GetAttrKey("args"), SequenceKey(0)),
                           (GetAttrKey("kwargs"), jax.tree_util.DictKey("w"))]
    with pytest.raises(ValueError, match=r"(?s)Duplicate Param.*\.args\[0\].*\.out"):
        extract.check_no_aliases("vmap", args=(v,), out=v)


def test_check_no_aliases_refuses_captured_variable_in_checked_arguments():
    v = nnx.Param(1.0)

    @jax.jit
    def f(x):
        extract.check_no_aliases("vmap", args=(x,))  # not checked: fine
        with pytest.raises(ValueError, match=r"at \.out.*Cannot return captured Variable"):
            extract.check_no_aliases("vmap", out=v, check=["out"])
        return x

    f(1.0)
    extract.check_no_aliases("vmap", out=v, check=["out"])  # same trace: fine


def test_check_same_variables_and_update_carry_variables():
    v = nnx.Param(1.0)
    extract.check_same_variables((v, extract.Mask()), (v, extract.Mask()))
    with pytest.raises(ValueError, match=r"at \[1\]\['x'\]: fori_loop Variable identity"):
        extract.check_same_variables((1, {"x": v}), (1, {"x": nnx.Param(1.0)}), "fori_loop")
    out = extract.update_carry_variables((v, 0), (nnx.Param(7.0), 1))
    assert out[0] is v and float(v[...]) == 7.0 and out[1] == 1


# -- check_prefix -----------------------------------------------------------------------------

def test_check_prefix_returns_distinct_leaves():
    assert extract.check_prefix((0, {"a": 0, "b": None}, 1), "in_axes", "vmap", True, True) \
        == [0, None, 1]
    assert extract.check_prefix((0, None), "in_axes", "vmap", False, False,
                                none_leaf=False) == [0]


def test_check_prefix_errors_name_the_path():
    with pytest.raises(ValueError, match=r"Variable of type Param at path \[1\]"):
        extract.check_prefix((0, nnx.Param(0)), "in_axes", "vmap", True, True)
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"graph node of type Linear at path \[0\]"):
        extract.check_prefix((m,), "in_axes", "vmap", True, True)
    extract.check_prefix((m,), "in_axes", "vmap", False, False)  # tree mode: fine
    sa = nnx.StateAxes({nnx.Param: 0, ...: None})
    with pytest.raises(ValueError, match="cannot contain `StateAxes`"):
        extract.check_prefix((sa,), "in_axes", "vmap", True, False)
    ts = nnx.prefix(m, {...: 0}, graph=True)
    extract.check_prefix((ts, None), "in_axes", "vmap", True, False)
    with pytest.raises(ValueError, match=r"at \[0\]: Found a `TreeState` in `in_axes`"):
        extract.check_prefix((ts, None), "in_axes", "vmap", True, True)
    with pytest.raises(ValueError, match=r"TreeState"):
        extract.check_prefix((ts,), "in_axes", "vmap", False, False)


# -- TreeState, to_tree2 / from_tree2 ---------------------------------------------------------

def test_tree_state_is_flax_shaped_dataclass_pytree():
    ts = extract.TreeState("gd", {"a": 1})
    assert [f.name for f in dataclasses.fields(ts)] == ["graphdef", "__state__", "prefix_fn"]
    assert ts.state == {"a": 1} and ts.prefix_fn == extract.Opaque(None)
    assert jax.tree.leaves(ts) == [1]
    assert ts.replace(graphdef="other").graphdef == "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        ts.graphdef = "x"  # type: ignore[misc]
    # two prefix functions never make two tree definitions differ
    t1 = jax.tree.structure(extract.TreeState("gd", 0, extract.Opaque(len)))
    t2 = jax.tree.structure(extract.TreeState("gd", 0, extract.Opaque(print)))
    assert t1 == t2


def test_opaque_compares_by_class_only():
    assert extract.Opaque(1) == extract.Opaque(2) and hash(extract.Opaque(1)) == 0
    assert extract.Opaque(1) != 1
    assert extract.Opaque[int] is not None


def test_to_tree2_from_tree2_keep_sharing():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    tree = {"a": m, "b": [m, m.kernel], "x": 1.0}
    pure = extract.to_tree2(tree)
    assert isinstance(pure["a"], extract.TreeState)
    assert sorted(pure["a"].state) == ["bias", "kernel"]
    assert len(pure["b"][0].state) == 0  # a reference to the first one
    assert pure["x"] == 1.0
    assert len(jax.tree.leaves(pure)) == 3
    back = extract.from_tree2(pure)
    assert back["a"] is back["b"][0] and back["a"].kernel is back["b"][1]
    assert back["a"].kernel is m.kernel  # the Variables themselves are placed
    assert back["a"] is not m


def test_from_tree2_recreates_or_keeps_plain_values():
    pure = extract.to_tree2(nnx.Dict(w=nnx.Param(jnp.ones(2)), n=nnx.BatchStat(3.0)))
    raw = pure.replace(__state__=nnx.State({"w": jnp.zeros(2), "n": nnx.BatchStat(4.0)}))
    rebuilt = extract.from_tree2(raw)
    assert type(rebuilt.w) is nnx.Param and float(rebuilt.n[...]) == 4.0
    kept = extract.from_tree2(raw, recreate_variables=False)
    assert isinstance(kept.w, jax.Array) and type(kept.n) is nnx.BatchStat


def test_from_tree2_refuses_a_tree_state_without_graphdef():
    with pytest.raises(ValueError, match="not a GraphDef"):
        extract.from_tree2(extract.TreeState(None, {}))


def test_to_tree2_checks_aliasing_against_prefix():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    extract.to_tree2((m, m), prefix=(0, 0))
    with pytest.raises(ValueError, match=r"(?s)Inconsistent aliasing.*Node: Param.*0/bias: 0"
                                         r".*1/bias: 1"):
        extract.to_tree2((m, m), prefix=(0, 1))
    extract.to_tree2((m, m), prefix=(0, 1), check_aliasing=False)


def test_check_consistent_aliasing2_with_tree_state_prefix():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    ts = nnx.prefix(m, {nnx.PathContains("kernel"): 0, ...: None}, graph=True)
    seen: dict = {}
    extract.check_consistent_aliasing2(m, ts, node_prefixes=seen)
    assert {p for entries in seen.values() for p in entries} == {(("bias",), None),
                                                                  (("kernel",), 0)}
    with pytest.raises(ValueError, match=r"(?s)Node: Param\n  kernel: 0\n  other/kernel: 1"):
        extract.check_consistent_aliasing2(m, 1, base_path=("other",), node_prefixes=seen)
    bare = extract.to_tree2(m)
    with pytest.raises(ValueError, match=r"must come from nnx.prefix\(\)"):
        extract.check_consistent_aliasing2(m, bare, node_prefixes={})


def test_check_consistent_aliasing_message_names_paths():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    seen: dict = {}
    extract.check_consistent_aliasing(m, nnx.StateAxes({nnx.Param: 0}), node_prefixes=seen)
    with pytest.raises(ValueError, match=r"(?s)different prefixes:\nNode: Param\n  bias: 0"):
        extract.check_consistent_aliasing(m, None, node_prefixes=seen)


def test_check_consistent_aliasing_refuses_objects_of_another_trace():
    from flaxen.errors import TraceContextError

    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    empty = nnx.Dict()
    v = nnx.Param(1.0)

    @jax.jit
    def f(x):
        # Variables are met before the node that holds them
        with pytest.raises(ValueError, match="at /bias: Cannot extract graph node from diff"):
            extract.check_consistent_aliasing(m, 0)
        with pytest.raises(ValueError, match="at /: Cannot extract graph node from different"):
            extract.check_consistent_aliasing(v, 0)
        with pytest.raises(TraceContextError, match="different trace level, got a Dict"):
            extract.to_tree((empty,), prefix=(0,))
        return x

    f(1.0)
    extract.check_consistent_aliasing(m, 0)  # its own trace: fine
    extract.check_consistent_aliasing(empty, 0)


def test_graph_prefix_is_a_tree_state_usable_by_vmap():
    @nnx.vmap
    def create(rngs):
        return nnx.Linear(2, 3, rngs=rngs)

    model = create(nnx.Rngs(0).split(4))
    px1, px2 = nnx.prefix((model, model), {nnx.Param: 0}, graph=True)
    assert isinstance(px1, extract.TreeState) and px1.state["kernel"] == 0
    assert len(px2.state) == 0 and callable(px2.prefix_fn.value)
    assert px2.map_prefix(("kernel",), model.kernel) == 0  # through prefix_fn

    @nnx.vmap(in_axes=(px1, px2, None), graph=True)
    def forward(m1, m2, x):
        assert m1 is m2
        return m1(x) + m2(x)

    assert forward(model, model, jnp.ones(2)).shape == (4, 3)
    v = nnx.Param(jnp.arange(3.0))
    single = nnx.prefix(v, lambda path, x: 0, graph=True)
    assert isinstance(single, extract.TreeState) and single.state == 0


def test_tree_state_map_prefix_without_entry_or_fn_is_an_error():
    ts = extract.TreeState(None, nnx.State({"a": 0}))
    assert ts.map_prefix(("a",), nnx.Param(1)) == 0
    with pytest.raises(ValueError, match="at /b: this TreeState prefix has no entry"):
        ts.map_prefix(("b",), nnx.Param(1))


# -- struct-based classes ---------------------------------------------------------------------

def test_graph_def_state_and_node_states_are_pytree_nodes():
    gd, st = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    gds = extract.GraphDefState(gd, st)
    assert isinstance(gds, struct.PyTreeNode) and len(jax.tree.leaves(gds)) == 2
    assert jax.tree.map(lambda x: x, gds).graphdef is gd
    ns = extract.NodeStates.from_split(gd, st, metadata="meta")
    assert isinstance(ns, struct.PyTreeNode)
    assert ns.replace(metadata="other").metadata == "other"
    assert jax.tree.structure(ns) != jax.tree.structure(ns.replace(metadata="other"))
    assert len(jax.tree.leaves(ns)) == 2
