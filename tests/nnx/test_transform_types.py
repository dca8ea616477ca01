"""The public types of ``flaxen.nnx.transforms.*`` (Flax 0.12.8's names): the jit stages,
the callable wrappers the transforms hand to JAX, and the decorator forms of
``split_inputs``/``merge_inputs``/``make_jaxpr``."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import NNXTransformError
from flaxen.nnx.transforms import compilation, general, transforms

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
