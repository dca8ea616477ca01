"""Differential tests: flaxen.core.lift against flax.core.lift, leaf for leaf."""

import flax.core as fcore
import flax.core.lift as flift
import jax
import jax.numpy as jnp
import numpy as np

import flaxen.core as xcore
import flaxen.core.lift as xlift

RNGS = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}


def _eq(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _dense(scope, x, features=3):
    w = scope.param("kernel", jax.nn.initializers.lecun_normal(), (x.shape[-1], features))
    b = scope.param("bias", jax.random.normal, (features,))
    return x @ w + b


def _both(model_for):
    """Runs model_for(lift, core) through both libraries' init and apply."""
    x = jnp.arange(24.0).reshape(4, 3, 2) / 10
    # jit keeps the eager op-by-op dispatch (slow for scans) out of the test time.
    ref_out, ref_v = jax.jit(fcore.init(model_for(flift)))(RNGS, x)
    got_out, got_v = jax.jit(xcore.init(model_for(xlift)))(RNGS, x)
    _eq(got_v, ref_v)
    _eq(got_out, ref_out)
    ref_a = jax.jit(fcore.apply(model_for(flift), mutable=True))(ref_v, x, rngs=RNGS)
    got_a = jax.jit(xcore.apply(model_for(xlift), mutable=True))(ref_v, x, rngs=RNGS)
    _eq(got_a, ref_a)


def test_vmap_split_and_broadcast_rngs():
    def model_for(lift):
        def body(scope, x):
            h = _dense(scope.push("d0"), x)
            drop = scope.make_rng("dropout")
            stats = scope.variable("stats", "n", lambda: jnp.zeros(()))
            stats.value = stats.value + 1
            return h, drop

        def model(scope, x):
            pre = scope.make_rng("params")
            y = lift.vmap(body, variable_axes={"params": 0, "stats": 0},
                          split_rngs={"params": True, "dropout": False})(scope.push("v"), x)
            return y, pre, scope.make_rng("params"), scope.push("v", reuse=True).make_rng()

        return model

    _both(model_for)


def test_vmap_broadcast_params_in_axes_none():
    def model_for(lift):
        def model(scope, x):
            return lift.vmap(_dense, variable_axes={"params": None}, split_rngs={"params": False},
                             in_axes=(1,), out_axes=1)(scope.push("shared"), x)
        return model

    _both(model_for)


def test_scan_axes_broadcast_carry_and_rngs():
    def model_for(lift):
        def body(scope, carry, x):
            h = _dense(scope.push("layer"), x, features=2)
            const = scope.variable("consts", "c", lambda: jnp.full((2,), 7.0))
            cnt = scope.variable("counter", "i", lambda: jnp.zeros(()))
            if scope.is_mutable_collection("counter"):
                cnt.value = cnt.value + 1
            return carry + h.sum() + const.value.sum(), (h, scope.make_rng("dropout"),
                                                         scope.make_rng("params"))

        def model(scope, xs):
            s = scope.push("scan")
            pre = s.make_rng("params")
            s.variable("counter", "i", lambda: jnp.zeros(()))
            out = lift.scan(body, variable_axes={"params": 0}, variable_broadcast="consts",
                            variable_carry="counter",
                            split_rngs={"params": True, "dropout": False},
                            in_axes=1, out_axes=0)(s, 0.0, xs)
            return out, pre, s.make_rng("params"), s.make_rng("dropout")

        return model

    _both(model_for)


def test_scan_length_reverse_and_broadcast_input():
    def model_for(lift):
        def body(scope, carry, x, b):
            h = _dense(scope, carry, features=2)
            return jnp.tanh(h + b), h

        def model(scope, xs):
            carry = jnp.ones((3, 2))
            return lift.scan(body, variable_axes={"params": 0}, split_rngs={"params": True},
                             in_axes=(0, fcore.broadcast if lift is flift else xcore.broadcast),
                             length=4, reverse=True)(scope, carry, xs, 0.5)

        return model

    _both(model_for)


def test_remat_and_cond_share_counters():
    def model_for(lift):
        def model(scope, x):
            a = lift.checkpoint(lambda s, x: _dense(s.push("r"), x))(scope, x)
            b = lift.cond(True, lambda s, x: s.make_rng("params"),
                          lambda s, x: s.make_rng("params"), scope, x)
            return a, b, scope.make_rng("params")

        return model

    _both(model_for)
