"""nnx.jit / grad / value_and_grad / vmap / scan / remat / eval_shape and Jit/Vmap/Scan/Remat:
init inside the transform, state updates seen outside, RNG splitting, shared references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.experimental import nnx


class Counter(nnx.Module):
    def __init__(self):
        self.count = nnx.BatchStat(jnp.array(0))

    def __call__(self, x):
        self.count.value += 1
        return x * 2


# -- jit -----------------------------------------------------------------------------------

def test_jit_state_updates_and_no_retrace():
    traces = []
    c = Counter()

    @nnx.jit
    def f(c, x):
        traces.append(1)
        return c(x)

    for _ in range(3):
        y = f(c, jnp.ones(2))
    assert int(c.count.value) == 3 and len(traces) == 1
    assert jnp.array_equal(y, 2 * jnp.ones(2))


def test_jit_new_attributes_and_structure_change_visible_outside():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    @nnx.jit
    def f(m):
        m.extra = nnx.BatchStat(jnp.ones(3))
        m.flag = True
        del m.bias

    f(m)
    assert m.flag is True and jnp.array_equal(m.extra.value, jnp.ones(3))
    assert not hasattr(m, "bias")


def test_jit_init_inside_and_shared_refs():
    @nnx.jit
    def make(rngs):
        return nnx.Linear(2, 3, rngs=rngs)

    rngs = nnx.Rngs(0)
    m = make(rngs)
    assert m.kernel.value.shape == (2, 3) and int(rngs.default.count.value) == 2
    ref = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(m.kernel.value, ref.kernel.value)

    shared = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    @nnx.jit
    def g(a, b):
        assert a is b
        a.kernel.value = a.kernel.value * 0
        return a

    out = g(shared, shared)
    assert out is shared and float(jnp.abs(shared.kernel.value).sum()) == 0


def test_jit_static_and_donate_and_rng_counts():
    rngs = nnx.Rngs(dropout=1)
    drop = nnx.Dropout(0.5, rngs=rngs)

    @nnx.jit(static_argnums=2)
    def f(d, x, deterministic):
        return d(x, deterministic=deterministic)

    y1 = f(drop, jnp.ones(16), False)
    y2 = f(drop, jnp.ones(16), False)
    assert not jnp.array_equal(y1, y2)
    assert int(rngs.dropout.count.value) == 2
    assert jnp.array_equal(f(drop, jnp.ones(16), True), jnp.ones(16))

    c = Counter()
    fd = nnx.jit(lambda c, x: c(x), donate_state=True)
    fd(c, jnp.ones(1))
    fd(c, jnp.ones(1))
    assert int(c.count.value) == 2


def test_jit_captured_module_mutation_raises():
    c = Counter()

    @nnx.jit
    def f(x):
        c(x)
        return x

    with pytest.raises(nnx.TraceContextError):
        f(jnp.ones(1))


def test_jit_structure_change_outside_retraces():
    c = Counter()
    f = nnx.jit(lambda c: c.count.value + getattr(c, "bonus", 0))
    assert int(f(c)) == 0
    c.bonus = 5
    assert int(f(c)) == 5


# -- grad ----------------------------------------------------------------------------------

def test_grad_wrt_param_and_batchstat_update():
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(2, 2, rngs=rngs)
            self.bn = nnx.BatchNorm(2, rngs=rngs)

        def __call__(self, x):
            return self.bn(self.lin(x))

    net = Net(nnx.Rngs(0))
    x = jnp.arange(6.0).reshape(3, 2)
    grads = nnx.grad(lambda m: jnp.sum(m(x) ** 3))(net)
    assert set(dict(grads.flat_state())) == {("lin", "kernel"), ("lin", "bias"), ("bn", "scale"),
                                       ("bn", "bias")}
    assert not jnp.array_equal(net.bn.mean.value, jnp.zeros(2))  # stats updated outside

    def ref(kernel):
        h = x @ kernel + net.lin.bias.value
        mean, var = h.mean(0), h.var(0)
        return jnp.sum(((h - mean) / jnp.sqrt(var + 1e-5)) ** 3)

    np.testing.assert_allclose(grads.lin.kernel.value, jax.grad(ref)(net.lin.kernel.value),
                               rtol=1e-4, atol=1e-5)


def test_value_and_grad_has_aux_and_argnums():
    m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    x = jnp.ones((1, 2))

    def loss(m, x):
        y = m(x)
        return jnp.sum(y ** 2), {"y": y}

    (val, aux), (gm, gx) = nnx.value_and_grad(loss, argnums=(0, 1), has_aux=True)(m, x)
    assert aux["y"].shape == (1, 1) and gx.shape == (1, 2)
    y = m(x)
    np.testing.assert_allclose(val, jnp.sum(y ** 2))
    np.testing.assert_allclose(gm.bias.value, 2 * y[0])


def test_grad_wrt_matching_nothing_is_an_error():
    m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="at argument 0: .*matches no Variable"):
        nnx.grad(lambda m: jnp.sum(m.kernel.value), wrt=nnx.BatchStat)(m)


def test_grad_shared_reference_accumulates():
    shared = nnx.Linear(1, 1, use_bias=False, rngs=nnx.Rngs(0))

    class Tied(nnx.Module):
        def __init__(self):
            self.a = shared
            self.b = shared

    t = Tied()
    g = nnx.grad(lambda t: jnp.sum(t.a(jnp.ones((1, 1))) + t.b(jnp.ones((1, 1)))))(t)
    assert set(dict(g.flat_state())) == {("a", "kernel")}
    np.testing.assert_allclose(g.a.kernel.value, [[2.0]])


# -- vmap / scan ---------------------------------------------------------------------------

def test_vmap_init_splits_rngs_and_call():
    rngs = nnx.Rngs(0)
    stacked = nnx.vmap(lambda r: nnx.Linear(2, 3, rngs=r), axis_size=4)(rngs)
    k = stacked.kernel.value
    assert k.shape == (4, 2, 3) and not jnp.array_equal(k[0], k[1])
    # the key is split per slice and kept; the count is broadcast, so it advances by the
    # draws one slice made (the same as building one Linear)
    one = nnx.Rngs(0)
    nnx.Linear(2, 3, rngs=one)
    assert int(rngs.default.count.value) == int(one.default.count.value)
    assert rngs.default.key.value == nnx.Rngs(0).default.key.value
    x = jnp.ones((4, 5, 2))
    y = nnx.vmap(lambda m, x: m(x), in_axes=(0, 0))(stacked, x)
    assert y.shape == (4, 5, 3)
    np.testing.assert_allclose(y[1], x[1] @ k[1] + stacked.bias.value[1], rtol=1e-5)


def test_vmap_broadcast_state_and_class():
    c = Counter()
    out = nnx.vmap(lambda c, x: c(x), state_axes={...: None})(c, jnp.ones((3, 2)))
    assert out.shape == (3, 2) and int(c.count.value) == 1
    v = nnx.Vmap(nnx.Linear, axis_size=2,
                 module_init_kwargs=dict(in_features=2, out_features=3, rngs=nnx.Rngs(0)))
    assert v.vmap_module.kernel.value.shape == (2, 2, 3)
    assert v(jnp.ones((2, 4, 2))).shape == (2, 4, 3)


def test_scan_function_and_carried_state():
    c = Counter()

    def body(carry, c, x):
        return carry + c(x), carry

    carry, ys = nnx.scan(body, state_axes={...: None})(jnp.zeros(2), c, jnp.ones((5, 2)))
    np.testing.assert_allclose(carry, 10 * jnp.ones(2))
    assert ys.shape == (5, 2) and int(c.count.value) == 5


def test_scan_class_stacked_layers():
    class Block(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(3, 3, rngs=rngs)

        def __call__(self, x):
            return jnp.tanh(self.lin(x)), None

    s = nnx.Scan(Block, length=4, module_init_kwargs=dict(rngs=nnx.Rngs(0)))
    k = s.scan_module.lin.kernel.value
    assert k.shape == (4, 3, 3) and not jnp.array_equal(k[0], k[1])
    x = jnp.ones((2, 3))
    y, _ = s(x)
    ref = x
    for i in range(4):
        ref = jnp.tanh(ref @ k[i] + s.scan_module.lin.bias.value[i])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    assert nnx.Scan.__init__.__kwdefaults__["carry_argnum"] == 1


def test_scan_structure_change_error():
    def body(carry, m, x):
        m.new = nnx.BatchStat(x)
        return carry, x

    with pytest.raises(ValueError, match="changed the structure"):
        nnx.scan(body, state_axes={...: None})(jnp.zeros(()), Counter(), jnp.ones(3))


# -- remat / eval_shape --------------------------------------------------------------------

def test_remat_and_Remat_class_gradients_match():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    x = jnp.ones((1, 2))
    plain = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(m)
    rem = nnx.grad(lambda m: jnp.sum(nnx.remat(lambda m, x: m(x))(m, x) ** 2))(m)
    np.testing.assert_allclose(plain.kernel.value, rem.kernel.value, rtol=1e-6)
    r = nnx.Remat(nnx.Linear, module_init_args=(2, 2), module_init_kwargs=dict(rngs=nnx.Rngs(0)))
    np.testing.assert_allclose(r(x), m(x), rtol=1e-6)
    c = Counter()
    nnx.remat(lambda c, x: c(x))(c, jnp.ones(1))
    assert int(c.count.value) == 1


def test_eval_shape_and_jit_class():
    abstract = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    assert isinstance(abstract.kernel.value, jax.ShapeDtypeStruct)
    assert abstract.kernel.value.shape == (2, 3)
    j = nnx.Jit(Counter)()  # Jit(cls) is a constructor taking cls's own arguments
    j(jnp.ones(1))
    j(jnp.ones(1))
    assert int(j.jit_module.count.value) == 2


def test_experimental_path_is_same_objects():
    from flaxen.experimental import nnx as enx

    assert enx.Linear is nnx.Linear and enx.jit is nnx.jit and enx.Rngs is nnx.Rngs


def test_eval_shape_returning_an_input_gives_its_abstract_copy():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    out = nnx.eval_shape(lambda m: m, m)
    assert out is not m and isinstance(out.kernel.value, jax.ShapeDtypeStruct)
    assert out.kernel.value.shape == (2, 3) and isinstance(m.kernel.value, jax.Array)
