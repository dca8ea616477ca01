"""Tests for flaxen.core.lift: every transform through init and apply, RNGs and mutation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen.core import Partitioned, apply, init, lift, meta

K = jax.random.PRNGKey(0)
X = jnp.ones((2, 3))


def dense(scope, x, f=3):
    w = scope.param("kernel", jax.nn.initializers.lecun_normal(), (x.shape[-1], f))
    return x @ w


def _shapes(tree):
    return jax.tree_util.tree_map(jnp.shape, tree)


def test_jit_mutation_survives_and_fresh_keys_per_call():
    def inc(s, x):
        v = s.variable("s", "n", lambda: 0.0)
        v.value = v.value + 1
        return s.make_rng("dropout")

    def m(scope, x):
        # as Flax's: fn(scope, module_hash_key, *args), the key part of the cache key
        y = lift.jit(lambda s, _, x: dense(s, x))(scope.push("j"), "dense", x)
        k1 = lift.jit(lambda s, _, x: inc(s, x))(scope, "inc", x)
        k2 = lift.jit(lambda s, _, x: inc(s, x))(scope, "inc", x)
        return y, k1, k2

    (y, k1, k2), v = init(m)({"params": K, "dropout": K}, X)
    assert _shapes(v["params"]) == {"j": {"kernel": (3, 3)}}
    assert v["s"]["n"] == 2
    assert not np.array_equal(k1, k2)
    (y2, _, _), mutated = apply(m, mutable=["s"])(v, X, rngs={"dropout": K})
    np.testing.assert_allclose(y2, y)
    assert mutated["s"]["n"] == 4


def test_remat_scan_stacks_one_axis_per_level():
    fn = lambda s, c: lift.remat_scan(dense, lengths=(2, 3))(s, c)  # noqa: E731
    y, v = init(fn)(K, jnp.ones((1, 3)))
    assert _shapes(v) == {"params": {"kernel": (2, 3, 3, 3)}}
    np.testing.assert_allclose(apply(fn)(v, jnp.ones((1, 3))), y, rtol=1e-6)


def test_autodiff_transforms():
    def f(scope, x):
        return dense(scope, x).sum()

    _, v = init(f)(K, X)
    grads, x_ct = apply(lambda s, x: lift.vjp(f, s, x)[1](jnp.ones(())))(v, X)
    ref = jax.grad(lambda p, x: apply(f)({"params": p}, x), argnums=(0, 1))(v["params"], X)
    np.testing.assert_allclose(grads["params"]["kernel"], ref[0]["kernel"], rtol=1e-6)
    np.testing.assert_allclose(x_ct, ref[1], rtol=1e-6)
    y, (gx,) = apply(lambda s, x: lift.value_and_grad(f, s, x))(v, X)
    np.testing.assert_allclose(gx, ref[1], rtol=1e-6)
    zero_t = {"params": jax.tree_util.tree_map(jnp.zeros_like, v["params"])}
    y, y_t = apply(lambda s, x: lift.jvp(f, s, (x,), (jnp.ones_like(x),), zero_t))(v, X)
    np.testing.assert_allclose(y_t, jnp.sum(ref[1]), rtol=1e-5)

    def fwd(s, x):
        return f(s, x), x

    def bwd(res, g):
        return ({"params": jax.tree_util.tree_map(jnp.ones_like, v["params"])}, res * 3)

    g = jax.grad(lambda x: apply(lambda s, x: lift.custom_vjp(f, fwd, bwd)(s, x))(v, x))(X)
    np.testing.assert_array_equal(g, 3 * X)


def test_while_loop_carries_variables():
    def wl(scope, x):
        scope.variable("count", "i", lambda: 0)

        def body_fn(s, c):
            v = s.variable("count", "i")
            v.value = v.value + 1
            return c + 1

        return lift.while_loop(lambda s, c: c < 5, body_fn, scope, 0, carry_variables="count")

    out, v = init(wl)(K, X)
    assert out == 5 and v["count"]["i"] == 5


def test_while_loop_rejects_new_variables_in_body():
    def wl(scope):
        def body_fn(s, c):
            s.variable("count", "new", lambda: 0)
            return c + 1
        return lift.while_loop(lambda s, c: c < 2, body_fn, scope, 0, carry_variables="count")

    with pytest.raises(ValueError, match="cannot be created"):
        init(wl)(K)


def test_cond_and_switch_init_and_apply():
    def sw(scope, x, i):
        return lift.switch(i, [lambda s, x: dense(s, x), lambda s, x: 2 * dense(s, x)], scope, x)

    y, v = init(sw)(K, X, 1)
    assert _shapes(v) == {"params": {"kernel": (3, 3)}}
    np.testing.assert_allclose(apply(sw)(v, X, 0) * 2, apply(sw)(v, X, 1), rtol=1e-6)
    c = apply(lambda s, x: lift.cond(False, lambda s, x: dense(s, x), lambda s, x: -dense(s, x),
                                     s, x))(v, X)
    np.testing.assert_allclose(c, -apply(sw)(v, X, 0), rtol=1e-6)


def test_map_variables_maps_inputs():
    def mv(scope, x):
        return lift.map_variables(dense, "params", lambda t: jax.tree_util.tree_map(
            lambda a: a * 0, t), init=True)(scope, x)

    y, v = init(mv)(K, X)
    assert _shapes(v) == {"params": {"kernel": (3, 3)}}
    np.testing.assert_array_equal(apply(mv)(v, X), jnp.zeros((2, 3)))


def test_vmap_partitioned_metadata_gets_axis():
    init_fn = meta.with_partitioning(jax.nn.initializers.ones, ("in", "out"))

    def body(scope, x):
        return x @ scope.param("w", init_fn, (3, 2))

    fn = lift.vmap(body, variable_axes={"params": 0}, split_rngs={"params": True},
                   metadata_params={meta.PARTITION_NAME: "batch"})
    _, v = init(fn)(K, jnp.ones((4, 3)))
    w = v["params"]["w"]
    assert isinstance(w, Partitioned) and w.names == ("batch", "in", "out")
    assert w.value.shape == (4, 3, 2)
    no_name = lift.vmap(body, variable_axes={"params": 0}, split_rngs={"params": True})
    from flaxen import errors
    with pytest.raises(errors.PartitioningUnspecifiedError):
        init(no_name)(K, jnp.ones((4, 3)))


def test_scan_carry_cannot_be_created_in_body():
    def body(scope, c, x):
        scope.variable("state", "s", lambda: 0.0)
        return c, x

    fn = lift.scan(body, variable_carry="state", length=2)
    with pytest.raises(ValueError, match="cannot be created"):
        init(fn)(K, 0.0, jnp.ones((2,)))


def test_pack_unlifted_collection_is_invisible():
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups):
        scope = scope_fn(variable_groups, rng_groups)
        return scope.has_variable("other", "x"), repack_fn(scope)

    def m(scope):
        scope.put_variable("other", "x", 1)
        return lift.pack(wrapper, (["params"],), (["params"],), (True,))(scope)

    seen, _ = init(m)(K)
    assert seen is False


def test_named_call_and_fold_rngs():
    y, v = init(lift.named_call(dense, "blk"))(K, X)
    assert y.shape == (2, 3)
    # fold_rngs passes the module hash key through to fn; on the root scope there is no
    # name suffix to drop and the counters are shared, so the key equals a plain make_rng.
    k1, _ = init(lambda s: lift.fold_rngs(lambda s, hk: s.make_rng("params"))(s, "h"))(K)
    k2, _ = init(lambda s: s.make_rng("params"))(K)
    np.testing.assert_array_equal(k1, k2)


def test_scan_first_pass_only_when_observable():
    """The pre-loop trace runs only when it can create broadcast variables or draw keys."""
    traces = []

    def body(scope, c, _):
        traces.append(1)
        return c @ scope.param("kernel", jax.nn.initializers.lecun_normal(), (3, 3)), None

    def model(scope, x):
        return lift.scan(body, variable_axes={"params": 0},
                         split_rngs={"params": True, "dropout": False},
                         length=4)(scope, x, None)[0]

    y, v = init(model)(K, X)
    assert len(traces) == 2  # keys drawn: the first pass runs, as in Flax
    traces.clear()
    np.testing.assert_array_equal(apply(model)(v, X), y)
    assert len(traces) == 1  # no RNGs, nothing mutable: only the loop body is traced
    traces.clear()
    np.testing.assert_array_equal(apply(model)(v, X, rngs={"dropout": K}), y)
    assert len(traces) == 2  # an RNG stream enters: the first pass advances its counter

    def bcast_body(scope, c, _):
        traces.append(1)
        b = scope.variable("consts", "b", lambda: jnp.full((3,), 2.0))
        return c + b.value, None

    def bcast(scope, x):
        return lift.scan(bcast_body, variable_broadcast="consts", length=2)(scope, x, None)[0]

    traces.clear()
    y, v = init(bcast)({}, X)
    assert len(traces) == 2 and v["consts"]["b"].shape == (3,)
    np.testing.assert_array_equal(y, X + 4.0)
    traces.clear()
    np.testing.assert_array_equal(apply(bcast)(v, X), X + 4.0)
    assert len(traces) == 1


def test_scan_broadcast_variable_from_split_rng_is_rejected():
    """As in Flax: a key split per iteration cannot initialise a shared variable."""

    def body(scope, c, _):
        e = scope.variable("consts", "e", lambda: jax.random.normal(scope.make_rng("params"),
                                                                    (3,)))
        return c + e.value, None

    def model(split):
        return lambda scope, x: lift.scan(body, variable_broadcast="consts",
                                          split_rngs={"params": split}, length=2)(
            scope, x, None)[0]

    with pytest.raises(ValueError, match="RNG split per iteration"):
        init(model(True))(K, X)
    y, v = init(model(False))(K, X)
    np.testing.assert_allclose(y, X + 2 * v["consts"]["e"], rtol=1e-6)
