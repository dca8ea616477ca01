"""The public types of ``flaxen.nnx.transforms.*`` (Flax 0.12.8's names): the jit stages,
the callable wrappers the transforms hand to JAX, and the decorator forms of
``split_inputs``/``merge_inputs``/``make_jaxpr``."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import NNXTransformError
from flaxen.nnx.transforms import autodiff, compilation, general, iteration, transforms

# -- jit stages ---------------------------------------------------------------------------------

def _counter_step():
    count = nnx.Variable(jnp.array(0))

    def step(c, x):
        c.value += 1
        return x * 2

    return count, step


def test_jit_trace_lower_compile_runs_and_writes_back():
    count, step = _counter_step()
    f = nnx.jit(step)
    assert isinstance(f, compilation.JitWrapped)
    traced = f.trace(count, jnp.ones(3))
    assert isinstance(traced, compilation.Traced) and isinstance(traced, compilation.Stage)
    assert traced.jit_wrapped is f and traced.out_info is not None
    lowered = traced.lower()
    assert isinstance(lowered, compilation.Lowered)
    assert "stablehlo" in lowered.as_text() or "func" in lowered.as_text()
    compiled = lowered.compile()
    assert isinstance(compiled, compilation.Compiled)
    out = compiled(count, jnp.ones(3))
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert int(count.value) == 1
    assert int(compilation.Compiled.call(compiled, count, jnp.ones(3))[0]) == 2
    assert int(count.value) == 2


def test_lowered_and_compiled_members_wrap_jax_stages():
    f = nnx.jit(lambda x: x + 1)
    lowered = f.lower(jnp.ones(2))
    assert isinstance(lowered.lowered, jax.stages.Lowered)
    assert lowered.jit_wrapped is f
    assert lowered.in_tree == lowered.lowered.in_tree
    assert lowered.out_tree == lowered.lowered.out_tree
    assert lowered.args_info is not None
    compiled = lowered.compile()
    assert isinstance(compiled.compiled, jax.stages.Compiled)
    assert compiled.out_tree == compiled.compiled.out_tree
    assert compiled.in_avals == compiled.compiled.in_avals
    assert compiled.input_layouts is not None
    assert compiled.runtime_executable() is not None
    assert compiled.args_info is not None
    # frozen dataclasses compared by their fields, as Flax's
    assert [f.name for f in dataclasses.fields(lowered)] == ["lowered", "jit_wrapped"]
    assert compilation.Lowered(lowered.lowered, f) == lowered
    assert hash(compilation.Lowered(lowered.lowered, f)) == hash(lowered)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lowered.lowered = None  # type: ignore[misc]
    with pytest.raises(NotImplementedError, match="from_flat_info"):
        compilation.Lowered.from_flat_info(None, None, None, (), None)
    with pytest.raises(NNXTransformError, match="Compiled object"):
        compilation.Compiled.call(1, 2)


def test_functional_and_partial_jit_give_simple_types():
    count, step = _counter_step()
    f = nnx.jit(step, graph_updates=False)
    assert isinstance(f, compilation.SimpleJitWrapped)
    assert not isinstance(f, compilation.JitWrapped)
    compiled = f.trace(count, jnp.ones(2)).lower().compile()
    assert isinstance(compiled, compilation.SimpleCompiled)
    compiled(count, jnp.ones(2))
    assert int(count.value) == 1

    p = nnx.jit_partial(step, count, graph_updates=False)
    assert isinstance(p, compilation.SimpleJitPartialWrapped)
    traced = p.trace(jnp.ones(2))
    assert isinstance(traced, compilation.SimplePartialTraced)
    lowered = traced.lower()
    assert isinstance(lowered, compilation.SimplePartialLowered)
    compiled = lowered.compile()
    assert isinstance(compiled, compilation.SimplePartialCompiled)
    assert compiled(jnp.ones(2)).tolist() == [2.0, 2.0]
    assert int(count.value) == 2
    assert isinstance(p.lower(jnp.ones(2)), compilation.SimplePartialLowered)


def test_jit_wrapped_constructor_is_flax_positional_and_generic():
    f = compilation.JitWrapped(lambda x: x * 3, None, None, None, None, None, None, False,
                               None, None, False)
    assert float(f(jnp.array(2.0))) == 6.0
    assert compilation.JitWrapped[[int], int] is not None
    g = compilation.SimpleJitWrapped(lambda a, x: a + x, None, None, None, None, None, None,
                                     False, None, None, False, (), False, True)
    assert float(g(jnp.array(1.0), jnp.array(2.0))) == 3.0


def test_update_shardings_false_leaves_updates_unconstrained():
    count = nnx.Variable(jnp.zeros(4))
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    s = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))

    def step(c):
        c.value = c.value + 1

    for update in (True, False):
        f = compilation.SimpleJitWrapped(step, (s,), None, None, None, None, None, False, None,
                                         None, False, (), False, update)
        text = f.lower(count).as_text()
        assert ("sharding_constraint" in text or "Sharding" in text) == update


# -- split_inputs / merge_inputs ----------------------------------------------------------------

def test_split_merge_inputs_as_decorator_factories():
    count = nnx.Variable(jnp.array(0))

    @general.split_inputs(ctxtag="t")
    @jax.jit
    @general.merge_inputs(ctxtag="t")
    def inc(c, by):
        c.value += by
        return c.value * 10

    assert int(inc(count, 2)) == 20
    assert int(count.value) == 2


def test_split_merge_inputs_mismatched_ctxtag_is_an_error():
    count = nnx.Variable(jnp.array(0))

    @general.split_inputs(ctxtag="a")
    @general.merge_inputs(ctxtag="b")
    def inc(c):
        c.value += 1

    with pytest.raises(NNXTransformError, match="same ctxtag"):
        inc(count)


# -- checkify / make_jaxpr signatures -------------------------------------------------------------

def test_checkify_takes_graph_positionally():
    from jax.experimental import checkify as jc

    count = nnx.Variable(jnp.array(0))

    def f(c):
        c.value += 1
        return jnp.log(-1.0)

    err, _ = transforms.checkify(f, jc.float_checks, False, False)(count)
    assert err.get() is not None
    assert int(count.value) == 1


def test_make_jaxpr_decorator_and_static_argnums():
    @transforms.make_jaxpr(graph_updates=False, static_argnums=(1,))
    def power(x, n):
        for _ in range(n):
            x = x * x
        return x

    assert str(power(jnp.ones(2), 3)).count("mul") == 3
    with pytest.raises(NNXTransformError, match="out of range"):
        transforms.make_jaxpr(lambda x: x, graph_updates=False, static_argnums=4)(1.0)


# -- the callables handed to JAX --------------------------------------------------------------

_FN_FIELDS = {
    autodiff.BwdFn: ("bwd", "tree_node_args"),
    autodiff.CustomVjpFnWrapper: ("f", "jax_nondiff_argnums", "ctxtag", "nondiff_states",
                                  "nodedefs"),
    autodiff.FwdFn: ("fwd", "nondiff_argnums", "ctxtag", "nondiff_states", "nodedefs"),
    autodiff.GradFn: ("f", "has_aux", "nondiff_states"),
    autodiff.SimpleGradFn: ("f", "has_aux", "graph"),
    autodiff.SimpleRematFn: ("f", "graph"),
    compilation.JitFn: ("f", "in_shardings", "out_shardings", "kwarg_shardings", "ctxtag"),
    compilation.SimpleJitFn: ("f", "in_shardings", "out_shardings", "donate_argnums",
                              "donate_argnames", "graph", "update_shardings"),
    compilation.SimpleShardMapFn: ("f", "graph", "in_specs", "out_specs", "update_specs"),
    iteration.ScanFn: ("f", "input_carry_argnum", "output_carry_argnum", "in_axes",
                       "out_axes", "transform_metadata"),
    iteration.SimpleScanFn: ("f", "graph", "in_axes", "out_axes", "out_is_tuple",
                             "carry_idx", "carry_out_idx", "update_axes"),
    iteration.WhileLoopCondFn: ("f",),
    transforms.CheckifyFn: ("f",),
    transforms.SimpleEvalShapeFn: ("f", "graph"),
}


def test_fn_classes_are_dataclasses_with_flax_fields():
    for cls, fields in _FN_FIELDS.items():
        assert tuple(f.name for f in dataclasses.fields(cls)) == fields, cls
    with pytest.raises(NNXTransformError, match="wraps a function"):
        autodiff.GradFn(3, False, None)


def test_graph_mode_fns_merge_and_split_pure_nodes():
    m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    pure_m = general._to_pure(m, "split_merge_inputs")

    def loss(m, x):
        m.bias.value = m.bias.value + 1
        return jnp.sum(m(x))

    grads, (pure_out, aux) = jax.grad(autodiff.GradFn(loss, False, None), has_aux=True)(
        pure_m, jnp.ones((1, 2)))
    assert isinstance(grads, general.PureNode) and aux is None
    new_m = general._from_pure(pure_out[0], "split_merge_inputs")
    assert float(new_m.bias.value[0]) == float(m.bias.value[0]) + 1
    # nondiff_states are constants: no gradient through them
    frozen = nnx.state(m, nnx.Param)
    grads2, _ = jax.grad(autodiff.GradFn(loss, False, (frozen, None)), has_aux=True)(
        pure_m, jnp.ones((1, 2)))
    assert all(float(jnp.abs(g).sum()) == 0.0 for g in grads2.values)

    fn = compilation.JitFn(lambda m, x: m(x), None, None, None, "tag")
    pure_args, pure_kwargs, out = jax.jit(fn)(general._to_pure(m, "tag"), jnp.ones((1, 2)))
    assert out.shape == (1, 1) and pure_args[0].ctxtag == "tag" and pure_kwargs == {}

    body = iteration.WhileLoopBodyFn(lambda v: v * 2)
    cond = iteration.WhileLoopCondFn(lambda v: v < 10)
    assert int(jax.lax.while_loop(cond, body, 1)) == 16


def test_simple_fns_run_on_copies_and_return_updates():
    count = nnx.Variable(jnp.array(1.0))

    def f(c, x):
        c.value = c.value + x
        return c.value * 2

    fn = transforms.SimpleCondFn(f, False)
    out, (args, _) = fn(count, 3.0)
    assert float(out) == 8.0 and float(args[0].value) == 4.0
    assert float(count.value) == 1.0  # the caller's object untouched
    shared = nnx.Variable(jnp.array(0.0))
    with pytest.raises(NNXTransformError):
        transforms.SimpleCondFn(lambda a, b: a, False)(shared, shared)
    transforms.SimpleCondFn(lambda a, b: a, True)(shared, shared)  # graph mode allows it

    vfn = iteration.SimpleVmapFn(lambda x: x + 1, False, 0, 0, 0)
    out, _ = jax.vmap(vfn)(jnp.arange(3.0))
    assert out.tolist() == [1.0, 2.0, 3.0]

    sfn = iteration.SimpleScanFn(lambda c, x: (c + x, x * 2), False, 0, 0, True, 0, 0, 0)
    carry, (updates, ys) = jax.lax.scan(lambda c, xs: sfn(c, (xs,)), 0.0, jnp.arange(4.0))
    assert float(carry) == 6.0 and ys.tolist() == [0.0, 2.0, 4.0, 6.0]
    assert transforms.SimpleEvalShapeFn(lambda x: x * 2, False)(3) == 6


# -- LiftedModule, ValueMetadata, Broadcasted, CustomVjp ------------------------------------

def test_lifted_module_routes_calls_through_the_proxy():
    class Scaled(transforms.LiftedModule):
        def __init__(self, inner, k):
            self.inner = inner
            self.k = k

        @property
        def _submodule(self):
            return self.inner

        def _call(self, accessor, *args):
            return accessor(self.inner)(*args) * self.k

    class Inner(nnx.Module):
        def __call__(self, x):
            return x + 1

        def half(self, x):
            return x / 2

    m = Scaled(Inner(), 10)
    assert isinstance(m, nnx.Module) and transforms.LiftedModule[Inner] is not None
    assert m(1) == 20 and m.call.half(4) == 20.0


def test_value_metadata_round_trips_a_variable():
    p = nnx.Param(jnp.ones(2), tag="w")
    vm = transforms.ValueMetadata.from_variable(p)
    assert vm.var_type is nnx.Param and vm.metadata["tag"] == "w"
    assert vm == transforms.ValueMetadata(nnx.Param, vm.value, dict(vm.metadata))
    back = vm.to_variable()
    assert type(back) is nnx.Param and back.get_metadata()["tag"] == "w"
    doubled = jax.tree.map(lambda x: x * 2, vm)
    assert doubled.value.tolist() == [2.0, 2.0] and doubled.var_type is nnx.Param
    with pytest.raises(dataclasses.FrozenInstanceError):
        vm.value = None  # type: ignore[misc]


def test_broadcasted_is_a_pytree_node():
    b = iteration.Broadcasted(jnp.arange(2))
    assert jax.tree.map(lambda x: x + 1, b).data.tolist() == [1, 2]
    assert b.replace(data=5) == iteration.Broadcasted(5)


def test_custom_vjp_classes():
    f = autodiff.SimpleCustomVjp(lambda x: x * 3, (), False)
    f.defvjp(lambda x: (x * 3, None), lambda res, g: (g * 10,))
    assert float(jax.grad(f)(1.0)) == 10.0
    assert autodiff.CustomVjp[int] is not None and autodiff.SimpleCustomVjp[int] is not None


class _Scale(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.array(3.0))


def test_custom_vjp_returns_the_public_classes_as_flax_does():
    plain = nnx.custom_vjp(lambda m: m.w[...] ** 2)
    assert type(plain) is autodiff.CustomVjp
    for kw in ({"graph_updates": False}, {"graph": False}):
        assert type(nnx.custom_vjp(lambda m: m.w[...], **kw)) is autodiff.SimpleCustomVjp
    assert type(nnx.custom_vjp(graph=False)(lambda m: m)) is autodiff.SimpleCustomVjp
    # the modes are those in force when it is applied (Flax resolves them there too)
    with nnx.set_graph_mode(False):
        tree = nnx.custom_vjp(lambda m: m.w[...])
    assert type(tree) is autodiff.SimpleCustomVjp and tree.graph is False

    # the graph-mode class: State cotangents in and out
    def bwd(res, g):
        (m_g,), out_g = g
        assert isinstance(m_g, nnx.State)
        return (nnx.State({"w": 10 * out_g}),)

    plain.defvjp(lambda m: (plain(m), None), bwd)
    assert float(nnx.grad(plain)(_Scale())["w"][...]) == 10.0
    assert plain.nondiff_argnums == () and plain.__wrapped__ is not None


def test_custom_vjp_classes_are_not_descriptors():
    # as in Flax: no __get__, so a class attribute is the object itself, not a bound method
    assert not hasattr(autodiff.CustomVjp, "__get__")
    assert not hasattr(autodiff.SimpleCustomVjp, "__get__")

    class M(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array(2.0))

        @nnx.custom_vjp(graph_updates=False)
        def f(self, x):
            return self.w[...] * x

    m = M()
    assert M.f is m.f and isinstance(m.f, autodiff.SimpleCustomVjp)
    M.f.defvjp(lambda self, x: (M.f(self, x), x), lambda res, g: (None, 5 * g))
    assert float(M.f(m, 3.0)) == 6.0  # called unbound, the module passed explicitly
    assert float(jax.grad(lambda x: M.f(m, x))(3.0)) == 5.0


def test_custom_vjp_call_takes_keywords_at_their_positions():
    f = nnx.custom_vjp(lambda m, x: m.w[...] * x, graph_updates=False)
    f.defvjp(lambda m, x: (f(m, x), None), lambda res, g: (None, 4 * g))
    m = _Scale()
    assert float(f(m, x=2.0)) == 6.0
    assert float(jax.grad(lambda x: f(m=m, x=x))(2.0)) == 4.0
