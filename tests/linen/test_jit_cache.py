"""nn.jit's trace cache as Flax 0.12.8 keys it: Modules configured alike share one trace
wherever they sit in the tree (their scope is an argument), a changed field retraces, and
each call draws one key per RNG stream from the caller (Flax's fork_rngs)."""

import jax
import jax.numpy as jnp
import numpy as np

import flaxen.linen as nn

TRACES: list = []


class Inner(nn.Module):
    feat: int = 2

    @nn.jit
    @nn.compact
    def __call__(self, x):
        TRACES.append(self.feat)
        return nn.Dense(self.feat)(x), self.make_rng("dropout")


class Outer(nn.Module):
    @nn.compact
    def __call__(self, x):
        a, k1 = Inner()(x)
        k0 = self.make_rng("dropout")
        b, k2 = Inner()(x)
        c, k3 = Inner(feat=3)(x)
        return a, b, c, [k0, k1, k2, k3]


class PlainInner(nn.Module):
    feat: int = 2

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.feat)(x)


def test_siblings_share_a_trace_and_a_changed_field_retraces():
    x = jnp.ones((1, 4))
    TRACES.clear()
    v = Outer().init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)
    assert TRACES == [2, 3]  # Inner_0 and Inner_1 share one trace; feat=3 needs its own
    TRACES.clear()
    a, b, c, _ = Outer().apply(v, x, rngs={"dropout": jax.random.key(2)})
    Outer().apply(v, x + 1, rngs={"dropout": jax.random.key(3)})
    assert TRACES == [2, 3]  # apply (other mutability) traces once more, then reuses
    # the shared trace still reads each module's own parameters
    p = v["params"]
    np.testing.assert_allclose(a, PlainInner().apply({"params": p["Inner_0"]}, x), rtol=1e-6)
    np.testing.assert_allclose(b, PlainInner().apply({"params": p["Inner_1"]}, x), rtol=1e-6)
    np.testing.assert_allclose(c, PlainInner(3).apply({"params": p["Inner_2"]}, x), rtol=1e-6)
    assert not np.allclose(a, b)


def test_keys_drawn_inside_jit_are_flaxs():
    x = jnp.ones((1, 4))
    v = Outer().init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)
    *_, keys = Outer().apply(v, x, rngs={"dropout": jax.random.key(2)})
    # recorded from Flax 0.12.8 (JAX 0.10.2) running this same model
    expected = [[2196046299, 3664720436], [4288059201, 166875588],
                [2866086207, 3150126757], [2189093699, 3199955300]]
    assert [jax.random.key_data(k).tolist() for k in keys] == expected
