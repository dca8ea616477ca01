"""Differential tests: flaxen.core.lift against flax.core.lift, leaf for leaf."""

import flax.core as fcore
import flax.core.lift as flift
import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def test_remat_scan_with_rngs():
    def model_for(lift):
        def body(scope, c):
            h = _dense(scope.push("d"), c, features=2)
            keep = jax.random.bernoulli(scope.make_rng("dropout"), 0.7, h.shape)
            return jnp.where(keep, jnp.tanh(h), 0.0)

        def model(scope, x):
            return lift.remat_scan(body, lengths=(2, 3))(scope, x[0, :, :2]), scope.make_rng()

        return model

    _both(model_for)


def test_scan_with_unroll():
    def model_for(lift):
        def body(scope, c, x):
            h = jnp.tanh(_dense(scope, c, features=2) + x)
            return h, (h, scope.make_rng("dropout"))

        def model(scope, xs):
            return lift.scan(body, variable_axes={"params": 0},
                             split_rngs={"params": True, "dropout": True},
                             unroll=3)(scope, jnp.zeros((3, 2)), xs)

        return model

    _both(model_for)


def test_while_loop_with_split_rngs():
    def model_for(lift):
        def model(scope, x):
            h = _dense(scope.push("d"), x)
            scope.variable("state", "acc", lambda: jnp.zeros(h.shape))
            scope.variable("state", "keys", lambda: jnp.zeros((3, 2), jnp.uint32))

            def body(s, c):
                acc = s.variable("state", "acc")
                keys = s.variable("state", "keys")
                key = s.make_rng("dropout")
                acc.value = acc.value + jax.random.normal(key, acc.value.shape)
                keys.value = keys.value.at[c].set(jax.random.key_data(key))
                return c + 1

            n = lift.while_loop(lambda s, c: c < 3, body, scope, 0, carry_variables="state",
                                split_rngs={"dropout": True})
            return n, h, scope.make_rng("dropout")

        return model

    _both(model_for)


def test_switch_mutating_and_drawing_rngs():
    def model_for(lift):
        def branch(k):
            def f(scope, x):
                h = _dense(scope.push("d"), x)
                cnt = scope.variable("counter", "n", lambda: jnp.zeros(()))
                cnt.value = cnt.value + k
                return h * k, scope.make_rng("dropout")
            return f

        def model(scope, x):
            i = jnp.asarray(x.sum() > 0, jnp.int32) + 1
            return lift.switch(i, [branch(1.0), branch(2.0), branch(3.0)], scope, x)

        return model

    _both(model_for)


def test_map_variables_in_out_and_rngs():
    def model_for(lift):
        def body(scope, x):
            h = _dense(scope.push("d"), x)
            st = scope.variable("state", "s", lambda: jnp.ones(3))
            st.value = st.value * 2
            return h, scope.make_rng("dropout")

        def double(t):
            return jax.tree_util.tree_map(lambda a: a * 2, t)

        def half(t):
            return jax.tree_util.tree_map(lambda a: a / 2, t)

        def model(scope, x):
            p = lift.map_variables(body, "params", double, half, init=scope.is_mutable_collection(
                "params"))(scope.push("p"), x)
            s = lift.map_variables(body, "state", double, half, init=True,
                                   mutable=True)(scope.push("s"), x)
            return p, s, scope.make_rng("dropout")

        return model

    _both(model_for)


def test_vjp_with_mutable_collection():
    def model_for(lift):
        def fn(scope, x):
            h = _dense(scope.push("d"), x)
            cnt = scope.variable("counter", "n", lambda: jnp.zeros(()))
            cnt.value = cnt.value + 1
            return (h * h).sum(), h

        def model(scope, x):
            y, bwd, aux = lift.vjp(fn, scope, x, has_aux=True)
            return y, aux, bwd(jnp.ones(()))

        return model

    _both(model_for)


def test_vmap_with_axis_size_and_no_mapped_input():
    def model_for(lift):
        def body(scope, x):
            return _dense(scope, x), scope.make_rng("dropout")

        def model(scope, x):
            return lift.vmap(body, variable_axes={"params": 0},
                             split_rngs={"params": True, "dropout": True},
                             in_axes=None, axis_size=3)(scope, x)

        return model

    _both(model_for)


def test_value_and_grad_matches_flax():
    def model_for(lift):
        def fn(scope, x):
            return (_dense(scope.push("d"), x) ** 2).sum()

        def model(scope, x):
            return lift.value_and_grad(fn, scope, x)

        return model

    _both(model_for)


def test_value_and_grad_has_aux_matches_flax():
    def model_for(lift):
        def fn(scope, x):
            h = _dense(scope.push("d"), x)
            return (h ** 2).sum(), h

        def model(scope, x):
            out = lift.value_and_grad(fn, scope, x, has_aux=True)
            assert len(out) == 3
            return out

        return model

    _both(model_for)


def test_fold_rngs_keys_and_counters_match_flax():
    """fn(scope, hash_key, *args): streams restart unsuffixed, counters shared; a repeated
    hash key replays the first call's counter advance."""
    def run(core, lift, tag):
        def body(s, hk, n, kw=0):
            if s.name == "child":
                return s.make_rng("dropout"), s.make_rng("dropout")
            return (s.make_rng("dropout"), s.make_rng("params"), s.make_rng("dropout"),
                    s.push("c").make_rng("dropout"), n, kw)

        def model(scope, x):
            k0 = scope.make_rng("dropout")
            r = lift.fold_rngs(body)(scope, tag + "a", 3, kw=1)
            r2 = lift.fold_rngs(body)(scope, tag + "a", 3, kw=1)
            r3 = lift.fold_rngs(body, rngs="dropout")(scope.push("child"), tag + "b", 4)
            r4 = lift.fold_rngs(body)(scope, tag + "b", 4)  # replays r3's advance
            return (k0, r, r2, r3, r4, scope.make_rng("dropout"), scope.make_rng("params"),
                    {k: v for k, v in scope.rng_counters.items() if isinstance(k, str)})

        out_i, _ = core.init(model)(RNGS, jnp.ones(2))
        out_a = core.apply(model)({}, jnp.ones(2), rngs=RNGS)
        return out_i, out_a

    # Flax's counter-advance cache is process-wide: fresh hash keys per library and run.
    _eq(run(xcore, xlift, "x-fold-test-"), run(fcore, flift, "f-fold-test-"))
    with pytest.raises(TypeError):
        xcore.init(lambda s: xlift.fold_rngs(lambda s, hk: 0)(s, ["unhashable"]))(RNGS)


def test_linen_fold_rngs_matches_flax():
    import flax.linen as fnn

    import flaxen.linen as xnn

    def build(nn):
        class Inner(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(2)(x), self.make_rng("dropout"), self.make_rng("dropout")

        class Helper(nn.Module):
            def go(self, x):
                return self.make_rng("dropout"), self.make_rng("dropout")

        class Outer(nn.Module):
            @nn.compact
            def __call__(self, x):
                k = self.make_rng("dropout")
                folded = nn.fold_rngs(Inner)
                a, b = folded(name="f1")(x), folded()(x)
                m = nn.fold_rngs(Helper.go)(Helper(), x)
                return k, a, b, m, nn.Dense(3)(x), self.make_rng("dropout")

        return Outer()

    x = jnp.ones((1, 3))
    res = []
    for nn in (fnn, xnn):
        out, v = build(nn).init_with_output(RNGS, x)
        res.append((out, v, build(nn).apply(v, x, rngs={"dropout": jax.random.PRNGKey(5)})))
    _eq(res[1], res[0])
