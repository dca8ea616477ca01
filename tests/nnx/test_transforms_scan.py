"""Today's nnx.scan / nnx.while_loop / nnx.fori_loop (Flax 0.12.8 contract)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx


def test_scan_carry_and_stacked_outputs():
    def cumsum(c, x):
        c = c + x
        return c, c

    c, ys = nnx.scan(cumsum, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0), graph=False)(
        jnp.array(0.0), jnp.arange(4.0))
    assert float(c) == 6.0
    np.testing.assert_allclose(ys, [0.0, 1.0, 3.0, 6.0])


def test_scan_axes_reverse_and_broadcast():
    def step(c, scale, x):
        return c + scale * x, c

    c, ys = nnx.scan(step, in_axes=(nnx.Carry, None, 1), out_axes=(nnx.Carry, 1),
                     reverse=True)(jnp.zeros(2), jnp.array(2.0), jnp.ones((2, 3)))
    np.testing.assert_allclose(c, [6.0, 6.0])
    assert ys.shape == (2, 3)
    np.testing.assert_allclose(ys[0], [4.0, 2.0, 0.0])


def test_scan_carry_only_and_length():
    out = nnx.scan(lambda c: c + 1, in_axes=nnx.Carry, out_axes=nnx.Carry, length=5)(
        jnp.array(0))
    assert int(out) == 5
    with pytest.raises(ValueError, match="exactly one argument"):
        nnx.scan(lambda a, b: a, in_axes=nnx.Carry, out_axes=nnx.Carry, length=2)(1, 2)


def test_scan_axes_mistakes_raise_when_made():
    with pytest.raises(ValueError, match="multiple Carry"):
        nnx.scan(lambda a, b: a, in_axes=(nnx.Carry, nnx.Carry))
    with pytest.raises(ValueError, match="the other must also have Carry"):
        nnx.scan(lambda a, b: a, in_axes=(nnx.Carry, 0), out_axes=0)
    with pytest.raises(ValueError, match="Cannot broadcast output state"):
        nnx.scan(lambda a, b: a, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, None))
    with pytest.raises(ValueError):
        nnx.scan(lambda x: x, in_axes=({"a": nnx.Carry},), out_axes=nnx.Carry, graph=False)(
            {"a": jnp.array(1.0)})


@pytest.mark.parametrize("graph_updates", [True, False])
def test_scan_variable_carry_keeps_identity(graph_updates):
    count = nnx.Variable(jnp.array(0))

    @nnx.scan(graph_updates=graph_updates)
    def f(count, x):
        count[...] += 1
        return count, x + count[...]

    out, ys = f(count, jnp.arange(3))
    assert out is count
    assert int(count[...]) == 3
    np.testing.assert_allclose(ys, [1, 3, 5])


def test_scan_new_variable_in_carry_raises():
    count = nnx.Variable(jnp.array(0))

    @nnx.scan(graph_updates=False)
    def f(count, x):
        return nnx.Variable(count[...] + 1), x

    with pytest.raises(ValueError, match="identity must be preserved"):
        f(count, jnp.arange(3))


def test_scan_broadcast_variable_updates_kept_without_graph_updates():
    v = nnx.Variable(jnp.array(1))

    @nnx.scan(in_axes=(None, nnx.Carry, 0), graph=False, graph_updates=False)
    def f(v, c, x):
        v[...] = v[...] + 1
        return c + x, c

    c, _ = f(v, jnp.array(0), jnp.arange(3))
    assert int(v[...]) == 4
    assert int(c) == 3


def test_scan_scanned_module_state_restacked():
    class Foo(nnx.Module):
        def __init__(self):
            self.n = nnx.BatchStat(jnp.arange(3))

    foo = Foo()
    ys = nnx.scan(lambda foo, x: foo.n[...] + x, in_axes=0, out_axes=0)(foo, jnp.arange(3))
    np.testing.assert_allclose(ys, [0, 2, 4])

    @nnx.scan(in_axes=0, out_axes=0)
    def bump(foo):
        foo.n[...] += 1
        return foo.n[...]

    bump(foo)
    np.testing.assert_allclose(foo.n[...], [1, 2, 3])


def test_scan_builds_stacked_modules_with_split_rngs():
    @nnx.split_rngs(splits=4)
    @nnx.scan(in_axes=(nnx.Carry, 0), length=4)
    def create(_, rngs):
        return None, nnx.Linear(2, 2, rngs=rngs)

    _, layers = create(None, nnx.Rngs(0))
    assert layers.kernel.shape == (4, 2, 2)
    assert not np.allclose(layers.kernel[...][0], layers.kernel[...][1])

    @nnx.scan(in_axes=(nnx.Carry, 0))
    def forward(x, layer):
        return layer(x), None

    y, _ = forward(jnp.ones((1, 2)), layers)
    assert y.shape == (1, 2)


def test_scan_traces_once_per_structure():
    n = [0]

    @nnx.scan
    def f(c, x):
        n[0] += 1
        return c + 1, x * 2

    f(jnp.array(0), jnp.arange(3))
    c, _ = f(jnp.array(5), jnp.arange(3))
    assert n[0] == 1
    assert int(c) == 8


def test_scan_aliasing_errors():
    v = nnx.Param(jnp.array(0.0))
    f = nnx.scan(lambda c, x: (c, x[...]), in_axes=(nnx.Carry, 0), graph=True,
                 graph_updates=False)
    with pytest.raises(ValueError, match="Inconsistent aliasing"):
        f(v, v)
    w = nnx.Param(jnp.arange(5))
    g = nnx.scan(lambda c: c, in_axes=0, out_axes=0, graph=True, graph_updates=False)
    with pytest.raises(ValueError, match="does not support Variable aliasing"):
        g(w)


@pytest.mark.parametrize("graph,graph_updates", [(True, True), (True, False), (False, False)])
def test_while_loop_updates_module_in_place(graph, graph_updates):
    m = nnx.Linear(3, 3, rngs=nnx.Rngs(0))
    m.kernel[...] = jnp.eye(3) * 2

    def body(val):
        m, x, c = val
        m.bias[...] += 1.0
        return m, m(x), c - 1.0

    x = jnp.ones(3)
    m2, y, c = nnx.while_loop(lambda val: val[-1] > 0, body, (m, x, 2.0), graph=graph,
                              graph_updates=graph_updates)
    assert m2 is m
    np.testing.assert_allclose(m.bias[...], [2.0, 2.0, 2.0])
    np.testing.assert_allclose(y, (x * 2 + 1) * 2 + 2)
    assert float(c) == 0.0


def test_while_loop_replacing_a_variable_raises():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    def body(val):
        m, c = val
        m.kernel = nnx.Param(jnp.zeros((2, 2)))
        return m, c - 1

    with pytest.raises(ValueError):
        nnx.while_loop(lambda val: val[-1] > 0, body, (m, 2))


def test_fori_loop_shared_variables():
    m1 = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    m2 = nnx.Linear(2, 2, rngs=nnx.Rngs(1))
    m2.kernel = m1.kernel
    seq = nnx.Sequential(m1, m2)

    def body(i, s):
        s.layers[0].kernel[...] += 1.0
        return s

    before = np.asarray(m1.kernel[...])
    out = nnx.fori_loop(0, 3, body, seq)
    assert out is seq and m2.kernel is m1.kernel
    np.testing.assert_allclose(m2.kernel[...], before + 3.0)


def test_fori_loop_inside_jit():
    v = nnx.Variable(jnp.zeros(2))

    @jax.jit
    def run(x):
        def body(i, val):
            return val + i

        return nnx.fori_loop(0, 4, body, x)

    np.testing.assert_allclose(run(v[...]), [6.0, 6.0])


def test_scan_sow_inside_stacks_new_intermediates():
    axes = nnx.StateAxes({(nnx.Param, nnx.RngState, nnx.Intermediate): 0, ...: None})

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(3, 3, rngs=rngs)

        @nnx.scan(in_axes=(axes, nnx.Carry), graph=True, graph_updates=True)
        def __call__(self, x):
            x = self.linear(x)
            self.sow(nnx.Intermediate, "h", x)
            return x, None

    @nnx.split_rngs(splits=4)
    @nnx.scan(in_axes=(nnx.Carry, 0), length=4)
    def create(_, rngs):
        return None, Block(rngs)

    _, block = create(None, nnx.Rngs(0))
    y, _ = block(jnp.ones((1, 3)))
    assert y.shape == (1, 3)
    assert block.h.get_value()[0].shape == (4, 1, 3)


def test_scan_partition_name_removed_inside_and_kept_outside():
    v = nnx.Param(jnp.ones((4, 3, 3)), out_sharding=("layers", "din", "dout"),
                  eager_sharding=False)  # axis names only, no mesh
    seen = []

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry,
              transform_metadata={nnx.PARTITION_NAME: "layers"})
    def f(v, x):
        seen.append(v.out_sharding)
        return x @ v[...]

    f(v, jnp.ones((1, 3)))
    assert seen == [("din", "dout")]
    assert v.out_sharding == ("layers", "din", "dout")


def test_scan_keyword_arguments_take_their_positional_axes():
    @nnx.scan(in_axes=(nnx.Carry, 0))
    def f(c, x):
        return c + x, c

    c, ys = f(jnp.array(0), x=jnp.arange(3))
    assert int(c) == 3
    np.testing.assert_allclose(ys, [0, 0, 1])


def test_scan_refuses_bound_methods():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="bound methods"):
        nnx.scan(m.__call__, in_axes=(0,), out_axes=0)


def test_loop_and_scan_errors_hide_flaxen_frames():
    import os
    import traceback

    import flaxen
    from flaxen import traceback_util

    flaxen_dir = os.path.dirname(os.path.abspath(flaxen.__file__))
    was_hiding = traceback_util.is_hiding_flax_frames()
    traceback_util.hide_flax_in_tracebacks()

    def bad(*args):
        raise TypeError("boom")

    for call in (lambda: nnx.fori_loop(0, 2, bad, jnp.zeros(2)),
                 lambda: nnx.while_loop(lambda v: v[0] < 1, bad, jnp.zeros(2)),
                 lambda: nnx.scan(bad)(jnp.zeros(()), jnp.arange(2.0))):
        with pytest.raises(TypeError) as info:
            call()
        frames = traceback.extract_tb(info.value.__traceback__)
        assert [f for f in frames if os.path.abspath(f.filename).startswith(flaxen_dir)] == []
    if not was_hiding:
        traceback_util.show_flax_in_tracebacks()


@pytest.mark.parametrize("graph_updates", [True, False])
def test_scan_variable_with_pytree_value_is_restacked(graph_updates):
    class M(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones((4, 3)))
            self.cap = nnx.Intermediate({})

    m = M()

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry, graph_updates=graph_updates)
    def f(m, x):
        y = x * m.w[...]
        m.cap.set_value({"data": (y,)})
        return y

    y = f(m, jnp.ones(3))
    assert y.shape == (3,)
    assert m.cap.get_value()["data"][0].shape == (4, 3)
