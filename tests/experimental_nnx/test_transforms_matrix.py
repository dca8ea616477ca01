"""Each lifted transform (grad, vmap, scan, remat, jit) against the same checklist: modules built
inside it, state updates visible outside, RNG splitting / counts advancing, shared references
preserved; then the options the spec names (in_axes_kwargs, transform_metadata, length, reverse,
unroll, scan_output, carry_argnum; jit's constrain_state and shardings)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flaxen.experimental import nnx


class Counter(nnx.Module):
    """Adds its count to the input and counts calls (a BatchStat updated in the forward pass)."""

    def __init__(self):
        self.count = nnx.BatchStat(jnp.zeros((), jnp.int32))

    def __call__(self, x):
        self.count.value = self.count.value + 1
        return x + self.count.value


class Noisy(nnx.Module):
    """Draws from its own stored Rngs on every call."""

    def __init__(self, rngs):
        self.rngs = rngs

    def __call__(self, x):
        return x + jax.random.normal(self.rngs.noise(), x.shape)


def _key_data(k):
    return np.asarray(jax.random.key_data(k))


def _shared_pair():
    shared = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    return nnx.Dict(a=shared, b=shared), shared


def _count(rngs, name="default"):
    return int(rngs[name].count.value)


def _linear_draws(din, dout):
    """How many keys building one Linear draws (a split stream's count advances by these)."""
    rngs = nnx.Rngs(0)
    nnx.Linear(din, dout, rngs=rngs)
    return _count(rngs)


# == init inside the transform ===================================================================

def test_init_in_transform_jit():
    model = nnx.jit(lambda r: nnx.Linear(2, 3, rngs=r))(nnx.Rngs(0))
    ref = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(model.kernel.value, ref.kernel.value)


def test_init_in_transform_remat():
    model = nnx.remat(lambda r: nnx.Linear(2, 3, rngs=r))(nnx.Rngs(0))
    np.testing.assert_array_equal(model.kernel.value,
                                  nnx.Linear(2, 3, rngs=nnx.Rngs(0)).kernel.value)


def test_init_in_transform_vmap_splits_keys():
    rngs = nnx.Rngs(0)
    stacked = nnx.vmap(lambda r: nnx.Linear(2, 3, rngs=r), axis_size=3)(rngs)
    k = stacked.kernel.value
    assert k.shape == (3, 2, 3) and not np.allclose(k[0], k[1])
    assert _count(rngs) == _linear_draws(2, 3)  # the count is broadcast, the key split


def test_init_in_transform_scan_stacks_outputs():
    def body(carry, rngs):
        return carry + 1, nnx.Linear(2, 2, rngs=rngs)

    rngs = nnx.Rngs(0)
    carry, stacked = nnx.scan(body, length=4, in_axes=(0, None))(jnp.zeros(()), rngs)
    assert float(carry) == 4.0
    k = stacked.kernel.value
    assert k.shape == (4, 2, 2) and not np.allclose(k[0], k[1])
    assert _count(rngs) == 4 * _linear_draws(2, 2)  # the count is carried through the steps


def test_init_in_transform_grad():
    # a module built inside a differentiated function is a plain output (aux)
    def loss(m, rngs):
        extra = nnx.Linear(2, 2, rngs=rngs)
        return jnp.sum(m(jnp.ones((1, 2)))), extra

    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    grads, extra = nnx.grad(loss, has_aux=True)(m, nnx.Rngs(1))
    assert isinstance(extra, nnx.Linear) and extra.kernel.value.shape == (2, 2)
    assert set(dict(grads.flat_state())) == {("kernel",), ("bias",)}


# == state updates visible outside ===============================================================

@pytest.mark.parametrize("transform", ["jit", "remat", "grad", "vmap", "scan"])
def test_state_updates_visible_outside(transform):
    c = Counter()
    x = jnp.ones((3,))
    if transform == "jit":
        nnx.jit(lambda c, x: c(x))(c, x)
    elif transform == "remat":
        nnx.remat(lambda c, x: c(x))(c, x)
    elif transform == "grad":
        c.w = nnx.Param(jnp.ones(()))
        nnx.grad(lambda c, x: jnp.sum(c(x) * c.w.value))(c, x)
    elif transform == "vmap":
        nnx.vmap(lambda c, x: c(x), state_axes={...: None})(c, x)
    else:
        nnx.scan(lambda carry, c, x: (c(carry), x), state_axes={...: None})(
            jnp.zeros(()), c, x)
    assert int(c.count.value) == (3 if transform == "scan" else 1)


def test_new_attribute_set_inside_jit_and_grad_visible_outside():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    def f(m):
        m.flag = nnx.BatchStat(jnp.ones(()))
        return jnp.sum(m.kernel.value)

    nnx.jit(f)(m)
    assert float(m.flag.value) == 1.0
    m2 = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    nnx.grad(f)(m2)
    assert float(m2.flag.value) == 1.0


def test_vmap_mapped_state_updates_per_slice():
    stacked = nnx.vmap(lambda: Counter(), axis_size=3)()
    assert stacked.count.value.shape == (3,)
    nnx.vmap(lambda c, x: c(x))(stacked, jnp.ones(3))
    np.testing.assert_array_equal(stacked.count.value, [1, 1, 1])


# == RNG splitting and counts ====================================================================

def test_rng_jit_and_remat_advance_counts():
    for transform in (nnx.jit, nnx.remat):
        rngs = nnx.Rngs(noise=0)
        m = Noisy(rngs)
        a = transform(lambda m, x: m(x))(m, jnp.zeros(2))
        b = transform(lambda m, x: m(x))(m, jnp.zeros(2))
        assert _count(rngs, "noise") == 2 and not np.allclose(a, b)


def test_rng_grad_advances_counts():
    rngs = nnx.Rngs(noise=0)
    m = Noisy(rngs)
    m.w = nnx.Param(jnp.ones(2))
    grads = nnx.grad(lambda m: jnp.sum(m(m.w.value)))(m)
    assert _count(rngs, "noise") == 1
    assert set(dict(grads.flat_state())) == {("w",)}


def test_rng_vmap_splits_and_broadcasts():
    rngs = nnx.Rngs(noise=0, other=1)
    m = Noisy(rngs)
    out = nnx.vmap(lambda m, x: m(x), split_rngs="noise")(m, jnp.zeros((4, 2)))
    assert not np.allclose(out[0], out[1])  # one key per slice
    assert _count(rngs, "noise") == 1 and _count(rngs, "other") == 0
    # broadcast stream: every slice draws the same key
    m2 = Noisy(nnx.Rngs(noise=0))
    same = nnx.vmap(lambda m, x: m(x), split_rngs=nnx.Nothing())(m2, jnp.zeros((4, 2)))
    np.testing.assert_allclose(same[0], same[1])
    assert _count(m2.rngs, "noise") == 1


def test_rng_scan_splits_per_step():
    rngs = nnx.Rngs(noise=0)
    m = Noisy(rngs)

    def body(carry, m, x):
        return carry, m(x)

    _, ys = nnx.scan(body, length=3)(jnp.zeros(()), m, jnp.zeros((3, 2)))
    assert not np.allclose(ys[0], ys[1])
    assert _count(rngs, "noise") == 3  # per-step keys split, the count carried
    # unsplit streams are carried: each step draws the next key
    m2 = Noisy(nnx.Rngs(noise=0))
    _, ys2 = nnx.scan(body, length=3, split_rngs=nnx.Nothing())(jnp.zeros(()), m2,
                                                               jnp.zeros((3, 2)))
    assert not np.allclose(ys2[0], ys2[1])
    assert _count(m2.rngs, "noise") == 3


def test_vmap_module_with_rngs_created_in_init():
    """Regression: Vmap of a module that makes its own Rngs (so the keys come out stacked)
    used to fail on call with 'fold_in accepts a single key'."""

    class M(nnx.Module):
        def __init__(self):
            self.lin = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
            self.drop = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=0))

        def __call__(self, x):
            return self.drop(self.lin(x))

    v = nnx.Vmap(M, axis_size=4)()
    assert v.vmap_module.drop.rngs.dropout.key.value.shape == (4,)
    y = v(jnp.ones((4, 3, 2)))
    assert y.shape == (4, 3, 2)
    np.testing.assert_array_equal(v.vmap_module.drop.rngs.dropout.count.value, [1, 1, 1, 1])
    v(jnp.ones((4, 3, 2)))
    np.testing.assert_array_equal(v.vmap_module.drop.rngs.dropout.count.value, [2, 2, 2, 2])

    s = nnx.Scan(M, length=3, scan_output=False)()
    out = s(jnp.ones((2, 2)))
    assert out.shape == (2, 2)
    np.testing.assert_array_equal(s.scan_module.drop.rngs.dropout.count.value, [1, 1, 1])


def test_vmap_stream_with_stacked_key_but_scalar_count():
    keys = jax.random.split(jax.random.key(0), 3)
    m = Noisy(nnx.Rngs(noise=keys))
    out = nnx.vmap(lambda m, x: m(x))(m, jnp.zeros((3, 2)))
    for i in range(3):
        np.testing.assert_allclose(
            out[i], jax.random.normal(jax.random.fold_in(keys[i], 0), (2,)), rtol=1e-6)
    assert int(m.rngs.noise.count.value) == 1


# == shared references ===========================================================================

@pytest.mark.parametrize("transform", ["jit", "remat", "vmap", "scan"])
def test_shared_references_preserved(transform):
    d, shared = _shared_pair()

    def f(d):
        assert d["a"] is d["b"]
        d["a"].kernel.value = d["a"].kernel.value + 1.0
        return d

    before = shared.kernel.value
    if transform == "jit":
        out = nnx.jit(f)(d)
    elif transform == "remat":
        out = nnx.remat(f)(d)
    elif transform == "vmap":
        out = nnx.vmap(lambda d, x: f(d), in_axes=(None, 0), out_axes=None,
                       state_axes={...: None})(d, jnp.ones(1))
    else:
        _, out = nnx.scan(lambda c, d: (c, None) if f(d) else None, length=1,
                          state_axes={...: None})(jnp.zeros(()), d)
        out = d
    assert out["a"] is out["b"] and d["a"] is shared
    np.testing.assert_allclose(shared.kernel.value, before + 1.0)


def test_shared_references_grad():
    d, shared = _shared_pair()
    grads = nnx.grad(lambda d: jnp.sum(d["a"](jnp.ones((1, 2)))) +
                     jnp.sum(d["b"](jnp.ones((1, 2)))))(d)
    single = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))))(shared)
    flat = dict(grads.flat_state())
    assert len(flat) == 2  # one entry per shared Variable
    (path,) = [p for p in flat if p[-1] == "kernel"]
    np.testing.assert_allclose(flat[path].value, 2 * single.kernel.value, rtol=1e-6)


def test_shared_module_returned_from_jit_and_vmap_init():
    def make(rngs):
        shared = nnx.Linear(2, 2, rngs=rngs)
        return nnx.Dict(a=shared, b=shared)

    d = nnx.jit(make)(nnx.Rngs(0))
    assert d["a"] is d["b"]
    dv = nnx.vmap(make, axis_size=2)(nnx.Rngs(0))
    assert dv["a"] is dv["b"] and dv["a"].kernel.value.shape == (2, 2, 2)


# == vmap options ================================================================================

def test_vmap_in_axes_kwargs_and_out_axes():
    def f(x, *, y):
        return x + y

    out = nnx.vmap(f, in_axes=0, in_axes_kwargs=None)(jnp.arange(3.0), y=jnp.ones(()))
    np.testing.assert_array_equal(out, jnp.arange(3.0) + 1)
    out = nnx.vmap(f, in_axes=None, in_axes_kwargs=0, axis_size=3)(jnp.ones(()),
                                                                    y=jnp.arange(3.0))
    np.testing.assert_array_equal(out, jnp.arange(3.0) + 1)
    out = nnx.vmap(lambda x: jnp.stack([x, x]), out_axes=1)(jnp.arange(3.0))
    assert out.shape == (2, 3)


def test_vmap_state_axes_and_transform_metadata():
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("in", "out"))
    make = nnx.vmap(lambda r: nnx.Linear(2, 3, kernel_init=init, rngs=r), axis_size=4,
                    state_axes={nnx.Param: 1, ...: 0},
                    transform_metadata={nnx.PARTITION_NAME: "layers"})
    stacked = make(nnx.Rngs(0))
    assert stacked.kernel.value.shape == (2, 4, 3)
    assert stacked.kernel.out_sharding == ("in", "layers", "out")
    y = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0), state_axes={nnx.Param: 1, ...: 0})(
        stacked, jnp.ones((4, 5, 2)))
    assert y.shape == (4, 5, 3)
    np.testing.assert_allclose(y[2], jnp.ones((5, 2)) @ stacked.kernel.value[:, 2]
                               + stacked.bias.value[:, 2], rtol=1e-5)


def test_vmap_class_options():
    v = nnx.Vmap(nnx.Linear, axis_size=3, state_axes={...: 0},
                 transform_metadata={nnx.PARTITION_NAME: "ens"},
                 module_init_kwargs=dict(
                     in_features=2, out_features=2, rngs=nnx.Rngs(0),
                     kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(),
                                                       (None, "m"))))
    assert v.vmap_module.kernel.out_sharding == ("ens", None, "m")
    y = v(jnp.ones((3, 4, 2)))
    assert y.shape == (3, 4, 2)
    assert v.in_features == 2  # attribute lookups reach the wrapped module


# == scan options ================================================================================

def _sum_body(carry, x):
    return carry + x, carry


def test_scan_length_reverse_unroll():
    xs = jnp.arange(5.0)
    carry, ys = nnx.scan(_sum_body)(jnp.zeros(()), xs)
    assert float(carry) == 10.0
    np.testing.assert_array_equal(ys, [0, 0, 1, 3, 6])
    carry, ys = nnx.scan(_sum_body, reverse=True)(jnp.zeros(()), xs)
    np.testing.assert_array_equal(ys, [10, 9, 7, 4, 0])
    carry2, ys2 = nnx.scan(_sum_body, unroll=2)(jnp.zeros(()), xs)
    np.testing.assert_array_equal(ys2, [0, 0, 1, 3, 6])
    carry3, ys3 = nnx.scan(lambda c: (c + 1, c), length=4)(jnp.zeros(()))
    assert float(carry3) == 4.0 and ys3.shape == (4,)


def test_scan_output_false_and_carry_argnum():
    out = nnx.scan(lambda c, x: c + x, scan_output=False)(jnp.zeros(()), jnp.arange(4.0))
    assert float(out) == 6.0

    def body(x, c):
        return c * 2 + x, x

    carry, ys = nnx.scan(body, carry_argnum=1)(jnp.arange(3.0), jnp.zeros(()))
    assert float(carry) == (0 * 2 + 0) * 4 + 1 * 2 + 2
    np.testing.assert_array_equal(ys, jnp.arange(3.0))


def test_scan_class_options():
    class Block(nnx.Module):
        def __init__(self, rngs):
            init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("a", "b"))
            self.lin = nnx.Linear(3, 3, kernel_init=init, rngs=rngs)

        def __call__(self, x):
            return jnp.tanh(self.lin(x))

    s = nnx.Scan(Block, length=3, scan_output=False, reverse=True, unroll=3,
                 transform_metadata={nnx.PARTITION_NAME: "layers"},
                 module_init_kwargs=dict(rngs=nnx.Rngs(0)))
    k = s.scan_module.lin.kernel.value
    assert s.scan_module.lin.kernel.out_sharding == ("layers", "a", "b")
    x = jnp.ones((2, 3))
    y = s(x)
    ref = x
    for i in reversed(range(3)):
        ref = jnp.tanh(ref @ k[i] + s.scan_module.lin.bias.value[i])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_scan_class_carry_argnum_and_in_axes_kwargs():
    class Block(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(2, 2, rngs=rngs)

        def __call__(self, x, carry, *, scale):
            return carry + self.lin(x) * scale

    s = nnx.Scan(Block, length=3, carry_argnum=2, in_axes=None, in_axes_kwargs=0,
                 scan_output=False, module_init_kwargs=dict(rngs=nnx.Rngs(0)))
    x = jnp.ones((1, 2))
    scale = jnp.array([1.0, 2.0, 3.0])
    carry = s(x, jnp.zeros((1, 2)), scale=scale)
    k, b = s.scan_module.lin.kernel.value, s.scan_module.lin.bias.value
    ref = sum((x @ k[i] + b[i]) * scale[i] for i in range(3))
    np.testing.assert_allclose(carry, ref, rtol=1e-5)


# == jit options =================================================================================

def _mesh():
    devices = np.array(jax.devices()[:8])
    if devices.size < 8:
        pytest.skip("needs 8 host devices (the root conftest.py sets them)")
    return Mesh(devices.reshape(2, 4), ("data", "model"))


def _sharded_linear():
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
    return nnx.Linear(4, 8, kernel_init=init, rngs=nnx.Rngs(0))


def test_jit_constrain_state_true_and_callable():
    mesh = _mesh()
    m = _sharded_linear()

    @nnx.jit(constrain_state=True)
    def bump(m):
        m.kernel.value = m.kernel.value * 2

    with jax.set_mesh(mesh):
        bump(m)
    assert m.kernel.value.sharding.spec == PartitionSpec(None, "model")

    seen = []

    def constrain(state):
        seen.append(sorted(dict(state.flat_state())))
        return state

    nnx.jit(lambda m: m(jnp.ones((1, 4))), constrain_state=constrain)(m)
    assert seen and ("kernel",) in seen[0]


def test_jit_in_and_out_shardings():
    mesh = _mesh()
    m = _sharded_linear()
    data = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())

    @nnx.jit(in_shardings=(None, data), out_shardings=replicated)
    def f(m, x):
        return m(x)

    x = jnp.ones((4, 4))
    y = f(m, x)
    np.testing.assert_allclose(y, m(x), rtol=1e-6)
    assert y.sharding.is_equivalent_to(replicated, y.ndim)
