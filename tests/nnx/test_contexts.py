"""Today's split/merge/update contexts, nnx.to_tree/from_tree and nnx.merge(copy=)."""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.nnx import graphlib


class Pair(nnx.Module):
    def __init__(self, left: tp.Any, right: tp.Any) -> None:
        self.left = left
        self.right = right


# -- split_context / merge_context -----------------------------------------------------------

def test_split_context_numbers_objects_across_calls() -> None:
    lin = nnx.Linear(3, 2, rngs=nnx.Rngs(1))
    with nnx.split_context() as ctx:
        gd_a, st_a = ctx.split(lin)
        gd_b, st_b = ctx.split(lin)
        gd_c, st_p, st_rest = ctx.split(lin, nnx.Param, ...)
    assert isinstance(gd_a.nodes[0], graphlib.NodeDef)
    assert isinstance(gd_b.nodes[0], graphlib.NodeRef)
    assert gd_b.nodes[0].index == gd_a.nodes[0].index
    assert isinstance(gd_c.nodes[0], graphlib.NodeRef)
    assert sorted(st_a) == ["bias", "kernel"]
    assert len(st_b) == 0 and len(st_p) == 0 and len(st_rest) == 0
    # the context drops its bookkeeping on exit
    assert not hasattr(ctx, "ref_index") and not hasattr(ctx, "ctxtag")

    with nnx.merge_context() as mctx:
        first = mctx.merge(gd_a, st_a)
        again = mctx.merge(gd_b, st_b)
    assert first is again
    assert first is not lin
    assert first.kernel is not lin.kernel  # merge copies the Variables
    assert jnp.array_equal(first.kernel[...], lin.kernel[...])
    assert not hasattr(mctx, "index_ref")


def test_later_split_refers_to_objects_inside_an_earlier_one() -> None:
    shared = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    holder = Pair(shared, nnx.Param(jnp.zeros(3)))
    with nnx.split_context() as ctx:
        gd_inner, st_inner = ctx.split(shared)  # first: shared is numbered here
        gd_outer, st_outer = ctx.split(holder)  # then: holder.left is a NodeRef inside
    assert "left" not in st_outer and "right" in st_outer
    with nnx.merge_context() as mctx:
        inner = mctx.merge(gd_inner, st_inner)
        outer = mctx.merge(gd_outer, st_outer)
    assert outer.left is inner
    assert outer.right.shape == (3,)


def test_split_context_flatten_and_unflatten() -> None:
    lin = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with nnx.split_context() as ctx:
        gd, flat = ctx.flatten(lin)
        with pytest.raises(ValueError, match="with_paths=False"):
            ctx.flatten(lin, nnx.Param, with_paths=False)
    assert [p for p, _ in flat] == [("bias",), ("kernel",)]
    with nnx.merge_context() as mctx:
        lin2 = mctx.unflatten(gd, flat)
    assert lin2.kernel.shape == (2, 3)

    with nnx.split_context() as ctx:
        gd, values = ctx.flatten(lin, with_paths=False)
    assert all(isinstance(v, jax.Array) for v in values)
    with nnx.merge_context() as mctx:
        lin3 = mctx.unflatten(gd, values)
    assert isinstance(lin3.bias, nnx.Param)


def test_merge_context_with_tag_requires_inner() -> None:
    lin = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    with nnx.update_context("tag"):
        with nnx.split_context("tag") as ctx:
            gd, st = ctx.split(lin)
        with pytest.raises(ValueError, match="inner_merge must be specified"):
            with nnx.merge_context("tag") as mctx:
                mctx.merge(gd, st)


def test_current_update_context_without_one_raises() -> None:
    with pytest.raises(ValueError, match="No update context found for tag 'nope'"):
        nnx.current_update_context("nope")
    with nnx.update_context("a") as outer:
        with nnx.update_context("a") as inner:
            assert nnx.current_update_context("a") is inner
        assert nnx.current_update_context("a") is outer


# -- update_context ----------------------------------------------------------------------------

def _round_trip(tag: str, node: tp.Any, change: tp.Callable[[tp.Any], None],
                jit: bool) -> tp.Any:
    with nnx.update_context(tag):
        with nnx.split_context(tag) as ctx:
            gd, st = ctx.split(node)

        def inside(gd: tp.Any, st: tp.Any) -> tuple:
            with nnx.merge_context(tag, inner=True) as ctx:
                copy = ctx.merge(gd, st)
            change(copy)
            with nnx.split_context(tag) as ctx:
                return ctx.split(copy)

        gd, st = (jax.jit(inside) if jit else inside)(gd, st)
        with nnx.merge_context(tag, inner=False) as ctx:
            return ctx.merge(gd, st)


@pytest.mark.parametrize("jit", [False, True])
def test_update_context_writes_values_and_structure_back(jit: bool) -> None:
    m = Pair(nnx.Param(jnp.ones(2)), nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    kernel = m.right.kernel

    def change(inner: tp.Any) -> None:
        inner.left.value = inner.left.value * 3
        inner.extra = nnx.BatchStat(jnp.zeros(1))  # a new Variable
        inner.label = "changed"  # a new static attribute
        inner.again = inner.right  # a new shared reference

    out = _round_trip("upd", m, change, jit)
    assert out is m
    assert jnp.array_equal(m.left[...], jnp.full(2, 3.0))
    assert m.label == "changed"
    assert isinstance(m.extra, nnx.BatchStat)
    assert m.again is m.right
    assert m.right.kernel is kernel  # existing Variables are updated in place, not replaced


def test_update_context_swapping_attributes() -> None:
    m = Pair(nnx.Param(jnp.array(1.0)), nnx.Param(jnp.array(2.0)))
    left, right = m.left, m.right

    def swap(inner: tp.Any) -> None:
        inner.left, inner.right = inner.right, inner.left

    _round_trip("swap", m, swap, jit=True)
    assert m.left is right and m.right is left
    assert float(m.left[...]) == 2.0


def test_update_context_as_decorator() -> None:
    m = nnx.Dict(count=nnx.Param(jnp.array(0)))

    @nnx.update_context("deco")
    def step(m: tp.Any) -> tp.Any:
        with nnx.split_context("deco") as ctx:
            gd, st = ctx.split(m)
        with nnx.merge_context("deco", inner=True) as ctx:
            inner = ctx.merge(gd, st)
        inner.count.value = inner.count.value + 5
        with nnx.split_context("deco") as ctx:
            gd, st = ctx.split(inner)
        with nnx.merge_context("deco", inner=False) as ctx:
            return ctx.merge(gd, st)

    assert step(m) is m
    assert int(m.count[...]) == 5
    with pytest.raises(ValueError, match="No update context"):
        nnx.current_update_context("deco")  # closed again after the call


def test_update_context_with_ref_variables() -> None:
    m = nnx.with_vars(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), ref=True)
    with nnx.update_context("refs"):
        with nnx.split_context("refs") as ctx:
            gd, st = ctx.split(m)
        with nnx.merge_context("refs", inner=True) as ctx:
            inner = ctx.merge(gd, st)
        fresh = nnx.with_vars(nnx.Linear(1, 1, rngs=nnx.Rngs(1)), ref=True)
        with nnx.split_context("refs") as ctx:
            gd_out, st_out = ctx.split((inner, fresh))
        assert isinstance(st_out[0]["kernel"].get_raw_value(), graphlib.NoUpdate)
        new_out = st_out[1]["kernel"].get_raw_value()
        assert isinstance(new_out, graphlib.ArrayRefOutput)
        assert len(jax.tree.leaves(st_out)) == 2  # NoUpdate holds no leaves
        with nnx.merge_context("refs", inner=False) as ctx:
            back, fresh2 = ctx.merge(gd_out, st_out)
    assert back is m
    assert fresh2 is not fresh
    assert isinstance(fresh2.kernel.get_raw_value(), jax.Ref)
    assert jnp.array_equal(fresh2.kernel[...], fresh.kernel[...])


# -- to_tree / from_tree -----------------------------------------------------------------------

def test_to_tree_round_trip_keeps_sharing() -> None:
    lin = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    pure = nnx.to_tree([lin, "text", {"again": lin}])
    assert pure[1] == "text"
    first, again = pure[0], pure[2]["again"]
    assert isinstance(first, nnx.NodeStates) and isinstance(again, nnx.NodeStates)
    assert isinstance(first.graphdef.nodes[0], graphlib.NodeDef)
    assert isinstance(again.graphdef.nodes[0], graphlib.NodeRef)
    assert len(jax.tree.leaves(pure)) == 3  # kernel and bias (once) and "text"
    back = nnx.from_tree(pure)
    assert back[0] is back[2]["again"]
    assert back[1] == "text"


def test_to_tree_through_jit_with_update_context() -> None:
    m = Pair(nnx.Param(jnp.array(1.0)), nnx.Param(jnp.array(10.0)))
    tree = (m, {"m": m})
    with nnx.update_context("tt"):
        pure = nnx.to_tree(tree, ctxtag="tt")

        @jax.jit
        def f(pure: tp.Any) -> tp.Any:
            inner = nnx.from_tree(pure, ctxtag="tt", is_inner=True)
            assert inner[0] is inner[1]["m"]
            inner[0].left.value = inner[0].left.value + inner[0].right.value
            return nnx.to_tree(inner, ctxtag="tt")

        out = nnx.from_tree(f(pure), ctxtag="tt", is_inner=False)
    assert out[0] is m and out[1]["m"] is m
    assert float(m.left[...]) == 11.0


def test_to_tree_prefix_and_aliasing_check() -> None:
    lin = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    pure = nnx.to_tree((lin, 1, {"b": lin}), prefix=(0, None, 0))
    assert isinstance(pure[0], nnx.NodeStates)
    with pytest.raises(ValueError, match="Inconsistent aliasing detected"):
        nnx.to_tree((lin, 1, {"b": lin}), prefix=(0, None, 1))
    # the check can be switched off
    nnx.to_tree((lin, {"b": lin}), prefix=(0, {"b": 1}), check_aliasing=False)


def test_to_tree_split_fn_and_vmap() -> None:
    @dataclasses.dataclass(frozen=True)
    class Axes:
        params: tp.Any
        stats: tp.Any

    class Holder(nnx.Module):
        def __init__(self, a: jax.Array, b: jax.Array) -> None:
            self.a = nnx.Param(a)
            self.b = nnx.BatchStat(b)

    def split_fn(ctx: nnx.SplitContext, path: tuple, prefix: tp.Any, x: tp.Any) -> tp.Any:
        if isinstance(prefix, Axes):
            return nnx.NodeStates.from_split(*ctx.split(x, nnx.Param, nnx.BatchStat))
        return nnx.NodeStates.from_split(*ctx.split(x))

    m = Holder(jnp.array(1.0), jnp.arange(4.0))
    axes = (Axes(None, 0),)
    jax_axes = (nnx.NodeStates.from_prefixes((None, 0)),)
    with nnx.update_context("vm"):
        pure = nnx.to_tree((m,), ctxtag="vm", prefix=axes, split_fn=split_fn)

        def add(pure_m: tp.Any) -> tp.Any:
            (inner,) = nnx.from_tree((pure_m,), ctxtag="vm", is_inner=True)
            assert inner.b.shape == ()
            inner.b.value = inner.b.value + inner.a.value
            return nnx.to_tree((inner,), ctxtag="vm", prefix=axes, split_fn=split_fn)[0]

        out = jax.vmap(add, in_axes=jax_axes, out_axes=jax_axes[0])(pure[0])
        (back,) = nnx.from_tree((out,), ctxtag="vm", is_inner=False)
    assert back is m
    assert jnp.array_equal(m.b[...], jnp.arange(4.0) + 1)


def test_clear_non_graph_nodes() -> None:
    lin = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    assert nnx.extract.clear_non_graph_nodes({"m": lin, "x": 3, "y": [jnp.ones(1)]}) == {
        "m": lin, "x": None, "y": [None]}


# -- nnx.merge(copy=) --------------------------------------------------------------------------

def test_merge_copy() -> None:
    lin = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    gd, params = nnx.split(lin)
    shared = nnx.merge(gd, params)
    copied = nnx.merge(gd, params, copy=True)
    assert shared.kernel is lin.kernel
    assert copied.kernel is not lin.kernel
    assert jnp.array_equal(copied.kernel[...], lin.kernel[...])
    copied.kernel.value = copied.kernel.value + 1
    assert not jnp.array_equal(copied.kernel[...], lin.kernel[...])


def test_merge_copy_inside_grad() -> None:
    class Count(nnx.Variable):
        pass

    class Model(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.ones(2))
            self.n = Count(jnp.array(0))

        def __call__(self, x: jax.Array) -> jax.Array:
            self.n.value = self.n.value + 1
            return jnp.sum(x * self.w.value)

    gd, params, counts = nnx.split(Model(), nnx.Param, Count)

    def loss(params: tp.Any) -> tuple:
        model = nnx.merge(gd, params, counts, copy=True)
        return model(jnp.arange(2.0)), nnx.state(model, Count)

    grads, new_counts = jax.grad(loss, has_aux=True)(params)
    assert jnp.array_equal(grads["w"][...], jnp.arange(2.0))
    assert int(new_counts["n"][...]) == 1
    assert int(counts["n"][...]) == 0  # the caller's Variables were not touched
