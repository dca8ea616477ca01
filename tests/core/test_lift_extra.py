"""More flaxen.core.lift tests: transform/map_variables, autodiff under init and with mutable
collections, control flow that mutates, RNG splitting in loops, remat_scan and scan unroll."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import errors
from flaxen.core import apply, init, lift

K = jax.random.PRNGKey(0)
X = jnp.arange(6.0).reshape(2, 3) / 5


def dense(scope, x, f=3):
    w = scope.param("kernel", jax.nn.initializers.lecun_normal(), (x.shape[-1], f))
    b = scope.param("bias", jax.nn.initializers.normal(), (f,))
    return x @ w + b


def counted_dense(scope, x):
    """dense that also counts its calls in collection 'counter' (when mutable)."""
    n = scope.variable("counter", "n", lambda: jnp.zeros((), jnp.int32))
    if scope.is_mutable_collection("counter"):
        n.value = n.value + 1
    return dense(scope, x)


def _shapes(tree):
    return jax.tree_util.tree_map(jnp.shape, tree)


def _params():
    return init(dense)(K, X)[1]


# -- aliases and small wrappers -----------------------------------------------------------


def test_remat_is_checkpoint_and_matches_plain_call():
    assert lift.remat is lift.checkpoint
    f = lift.remat(counted_dense)
    y, v = init(f)(K, X)
    y_ref, v_ref = init(counted_dense)(K, X)
    np.testing.assert_array_equal(y, y_ref)
    jax.tree_util.tree_map(np.testing.assert_array_equal, v, v_ref)
    y2, upd = apply(f, mutable="counter")(v, X)
    assert int(upd["counter"]["n"]) == 2
    g = jax.grad(lambda p: apply(f)({**v, "params": p}, X).sum())(v["params"])
    g_ref = jax.grad(lambda p: apply(counted_dense)({**v, "params": p}, X).sum())(v["params"])
    jax.tree_util.tree_map(np.testing.assert_allclose, g, g_ref)


def test_swap_collection_reads_and_writes_the_other_collection():
    def body(scope):
        v = scope.variable("a", "x", lambda: jnp.zeros(()))
        old = v.value
        v.value = old + 1
        return old

    f = lift.swap_collection(body, "a", "b")
    out, v = apply(f, mutable=True)({"a": {"x": 10.0}, "b": {"x": 20.0}})
    # The body sees collection 'b' under the name 'a' and writes back into 'b'.
    assert float(out) == 20.0
    assert float(v["b"]["x"]) == 21.0 and float(v["a"]["x"]) == 10.0


# -- transform / map_variables ----------------------------------------------------------------


def _scale_params(factor):
    return lambda t: jax.tree_util.tree_map(lambda a: a * factor, t)


def test_transform_is_map_variables_with_trans_out_fn_on_init():
    f = lift.transform(dense, "params", trans_in_fn=_scale_params(2.0),
                       trans_out_fn=_scale_params(0.5), init=True)
    y, v = init(f)(K, X)
    # Params are stored through trans_out_fn (halved) and read through trans_in_fn (doubled):
    # the stored values are half the freshly drawn ones, the output uses the drawn ones.
    drawn = _params()["params"]
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b / 2, rtol=1e-6),
                           v["params"], drawn)
    np.testing.assert_allclose(y, apply(dense)({"params": drawn}, X), rtol=1e-6)
    np.testing.assert_allclose(apply(f)(v, X), y, rtol=1e-6)


def test_map_variables_without_init_cannot_create_the_mapped_collection():
    f = lift.map_variables(dense, "params", _scale_params(2.0))
    with pytest.raises(errors.FlaxError):
        init(f)(K, X)


def test_map_variables_mutable_writes_back_through_map_out_fn():
    def body(scope):
        v = scope.variable("state", "s", lambda: jnp.zeros(2))
        v.value = v.value + 1.0
        return v.value

    f = lift.map_variables(body, "state", map_in_fn=_scale_params(10.0),
                           map_out_fn=_scale_params(0.1), mutable=True)
    out, upd = apply(f, mutable="state")({"state": {"s": jnp.ones(2)}})
    np.testing.assert_allclose(out, 11.0 * jnp.ones(2))  # 1 * 10 + 1
    np.testing.assert_allclose(upd["state"]["s"], 1.1 * jnp.ones(2), rtol=1e-6)


def test_map_variables_immutable_mapped_collection_cannot_be_written():
    def body(scope):
        v = scope.variable("state", "s", lambda: jnp.zeros(2))
        v.value = v.value + 1.0
        return v.value

    f = lift.map_variables(body, "state", map_in_fn=_scale_params(10.0))
    with pytest.raises(errors.ModifyScopeVariableError):
        apply(f, mutable="state")({"state": {"s": jnp.ones(2)}})


def test_map_variables_unmapped_collections_stay_mutable_and_rngs_flow():
    def body(scope, x):
        y = counted_dense(scope, x)
        return y, scope.make_rng("dropout")

    f_init = lift.map_variables(body, "params", _scale_params(0.0), init=True)
    rngs = {"params": K, "dropout": jax.random.PRNGKey(7)}
    (y, key), v = init(f_init)(rngs, X)
    assert int(v["counter"]["n"]) == 1
    np.testing.assert_array_equal(y, jnp.zeros_like(y))
    # Like Flax, an init=True map_variables cannot be applied with another collection
    # mutable (it re-runs the body and loses the immutable mapped collection), so apply uses
    # the same map without init.
    f = lift.map_variables(body, "params", _scale_params(0.0))
    (_, key2), upd = apply(f, mutable="counter")(v, X, rngs={"dropout": jax.random.PRNGKey(7)})
    assert int(upd["counter"]["n"]) == 2
    # The outer 'dropout' stream reaches the body: deterministic in the key, and a new key
    # gives a new draw.
    (_, key3), _ = apply(f, mutable="counter")(v, X, rngs={"dropout": jax.random.PRNGKey(7)})
    (_, key4), _ = apply(f, mutable="counter")(v, X, rngs={"dropout": jax.random.PRNGKey(8)})
    np.testing.assert_array_equal(jax.random.key_data(key2), jax.random.key_data(key3))
    assert not np.array_equal(jax.random.key_data(key2), jax.random.key_data(key4))
    # With rngs=False the transform sees no RNG streams.
    no_rng = lift.map_variables(body, "params", rngs=False)
    with pytest.raises(errors.FlaxError):
        apply(no_rng, mutable="counter")(v, X, rngs={"dropout": K})


# -- autodiff ----------------------------------------------------------------------------------


def test_vjp_under_init_creates_params_and_mutates_collections():
    def f(scope, x):
        y, bwd = lift.vjp(lambda s, x: counted_dense(s, x).sum(), scope, x)
        return y, bwd(jnp.ones(()))

    (y, (var_ct, x_ct)), v = init(f)(K, X)
    assert _shapes(v["params"]) == {"kernel": (3, 3), "bias": (3,)}
    assert int(v["counter"]["n"]) == 1
    # Params created inside the vjp were no input of it: no cotangent for them (as in Flax).
    assert var_ct == {}
    ref_y, ref_v = init(dense)(K, X)
    jax.tree_util.tree_map(np.testing.assert_array_equal, v["params"], ref_v["params"])
    np.testing.assert_allclose(y, ref_y.sum(), rtol=1e-6)
    (_, (var_ct, x_ct)), upd = apply(f, mutable="counter")(v, X)
    assert int(upd["counter"]["n"]) == 2
    g = jax.grad(lambda p, x: apply(dense)({"params": p}, x).sum(), argnums=(0, 1))(
        v["params"], X)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                           var_ct["params"], g[0])
    np.testing.assert_allclose(x_ct, g[1], rtol=1e-6)


def test_vjp_has_aux_and_vjp_variables_filter():
    def f(scope, x):
        def fn(s, x):
            s.variable("state", "m", lambda: jnp.ones(3))
            y = dense(s, x)
            return (y * s.get_variable("state", "m")).sum(), y
        y, bwd, aux = lift.vjp(fn, scope, x, has_aux=True, vjp_variables=["params", "state"])
        return y, aux, bwd(jnp.ones(()))

    (y, aux, (var_ct, _)), v = init(f)(K, X)
    assert aux.shape == (2, 3) and var_ct == {}
    y, aux, (var_ct, _) = apply(f)(v, X)
    assert set(var_ct) == {"params", "state"}
    np.testing.assert_allclose(var_ct["state"]["m"], aux.sum(0), rtol=1e-6)


def test_value_and_grad_and_grad():
    def f(scope, x):
        return dense(scope, x).sum()

    v = _params()
    y, (gx,) = apply(lambda s, x: lift.value_and_grad(f, s, x))(v, X)
    np.testing.assert_allclose(y, apply(f)(v, X), rtol=1e-6)
    gx_ref = jax.grad(lambda x: apply(f)(v, x))(X)
    np.testing.assert_allclose(gx, gx_ref, rtol=1e-6)
    (g2,) = apply(lambda s, x: lift.grad(f, s, x))(v, X)
    np.testing.assert_allclose(g2, gx_ref, rtol=1e-6)
    grads, aux = apply(lambda s, x: lift.grad(lambda s, x: (f(s, x), 7), s, x, has_aux=True))(
        v, X)
    assert aux == 7
    np.testing.assert_allclose(grads[0], gx_ref, rtol=1e-6)


def test_value_and_grad_under_init_creates_params_and_mutates():
    def f(scope, x):
        return lift.value_and_grad(lambda s, x: counted_dense(s, x).sum(), scope, x)

    (y, (gx,)), v = init(f)(K, X)
    assert _shapes(v["params"]) == {"kernel": (3, 3), "bias": (3,)}
    assert int(v["counter"]["n"]) == 1
    np.testing.assert_allclose(gx, jnp.broadcast_to(v["params"]["kernel"].sum(1), X.shape),
                               rtol=1e-6)


def test_jvp_under_init_and_with_mutable_collection():
    def f(scope, x):
        zero_t = {"params": jax.tree_util.tree_map(jnp.zeros_like, scope.variables()["params"])
                  } if scope.has_variable("params", "kernel") else None
        if zero_t is None:
            counted_dense(scope, x)  # creates the params (and the counter) first
            zero_t = {"params": jax.tree_util.tree_map(jnp.zeros_like,
                                                       scope.variables()["params"])}
        return lift.jvp(counted_dense, scope, (x,), (jnp.ones_like(x),), zero_t)

    (y, y_t), v = init(f)(K, X)
    assert int(v["counter"]["n"]) == 2  # once directly, once inside the jvp
    np.testing.assert_allclose(y_t, jnp.broadcast_to(v["params"]["kernel"].sum(0), y.shape),
                               rtol=1e-6)
    (y2, _), upd = apply(f, mutable="counter")(v, X)
    assert int(upd["counter"]["n"]) == 3
    np.testing.assert_allclose(y2, y, rtol=1e-6)


def test_jvp_creates_params_inside():
    def f(scope, x):
        return lift.jvp(dense, scope, (x,), (jnp.zeros_like(x),), {})

    (y, y_t), v = init(f)(K, X)
    assert _shapes(v["params"]) == {"kernel": (3, 3), "bias": (3,)}
    np.testing.assert_array_equal(y_t, jnp.zeros_like(y))
    np.testing.assert_allclose(y, apply(dense)(v, X), rtol=1e-6)


def test_jvp_param_tangents():
    v = _params()
    t = {"params": {"kernel": jnp.ones((3, 3)), "bias": jnp.zeros(3)}}
    y, y_t = apply(lambda s, x: lift.jvp(dense, s, (x,), (jnp.zeros_like(x),), t))(v, X)
    np.testing.assert_allclose(y_t, jnp.broadcast_to(X.sum(1, keepdims=True), (2, 3)),
                               rtol=1e-6)


def _custom_dense():
    def fwd(s, x):
        return counted_dense(s, x), x

    def bwd(res, g):
        # Custom rule: every param cotangent is 1, the input cotangent 3 * x.
        p_ct = {"kernel": jnp.ones((3, 3)), "bias": jnp.ones(3)}
        return {"params": p_ct}, 3 * res

    return lift.custom_vjp(counted_dense, fwd, bwd)


def test_custom_vjp_under_init_creates_params_and_mutates():
    f = _custom_dense()
    y, v = init(f)(K, X)
    ref_y, ref_v = init(counted_dense)(K, X)
    jax.tree_util.tree_map(np.testing.assert_array_equal, v, ref_v)
    np.testing.assert_array_equal(y, ref_y)
    _, upd = apply(f, mutable="counter")(v, X)
    assert int(upd["counter"]["n"]) == 2
    g = jax.grad(lambda x: apply(f)(v, x).sum())(X)
    np.testing.assert_allclose(g, 3 * X, rtol=1e-6)


def test_custom_vjp_param_cotangents_come_from_backward_fn():
    f = _custom_dense()
    v = init(f)(K, X)[1]
    gp = jax.grad(lambda p: apply(f)({**v, "params": p}, X).sum())(v["params"])
    np.testing.assert_array_equal(gp["kernel"], jnp.ones((3, 3)))
    np.testing.assert_array_equal(gp["bias"], jnp.ones(3))


# -- control flow --------------------------------------------------------------------------------


def _bump(amount):
    def branch(scope, x):
        n = scope.variable("counter", "n", lambda: jnp.zeros((), jnp.int32))
        n.value = n.value + amount
        return dense(scope, x) * amount

    return branch


@pytest.mark.parametrize("pred, amount", [(True, 1), (False, 5)])
def test_cond_mutates_a_collection(pred, amount):
    def f(scope, x, pred):
        return lift.cond(pred, _bump(1), _bump(5), scope, x)

    y, v = init(f)(K, X, pred)
    assert int(v["counter"]["n"]) == amount
    p = {"params": v["params"]}
    y2, upd = apply(f, mutable="counter")({**p, "counter": {"n": jnp.array(10)}}, X,
                                          jnp.asarray(pred))
    assert int(upd["counter"]["n"]) == 10 + amount
    np.testing.assert_allclose(y2, apply(dense)(p, X) * amount, rtol=1e-6)


def test_switch_mutates_a_collection_under_jit():
    def f(scope, x, i):
        return lift.switch(i, [_bump(1), _bump(2), _bump(3)], scope, x)

    _, v = init(f)(K, X, 0)
    assert int(v["counter"]["n"]) == 1
    run = jax.jit(apply(f, mutable="counter"))
    for i, want in [(2, 4), (1, 3), (7, 4)]:  # out-of-range indices clamp to the last branch
        y, upd = run(v, X, i)
        assert int(upd["counter"]["n"]) == want
    with pytest.raises(Exception):
        apply(f)(v, X, 1)  # 'counter' is not mutable


def test_while_loop_split_rngs_gives_fresh_keys_per_iteration():
    def f(scope, x, split):
        scope.variable("keys", "k", lambda: jnp.zeros((3, 2), jnp.uint32))

        def body(s, c):
            i, acc = c
            k = s.variable("keys", "k")
            key = jax.random.key_data(s.make_rng("noise"))
            k.value = k.value.at[i].set(key)
            return i + 1, acc + jax.random.normal(s.make_rng("noise"), ())

        return lift.while_loop(lambda s, c: c[0] < 3, body, scope, (0, 0.0),
                               carry_variables="keys", split_rngs={"noise": split})

    rngs = {"params": K, "noise": jax.random.PRNGKey(3)}
    _, v = init(f)(rngs, X, True)
    keys = np.asarray(v["keys"]["k"])
    assert len({tuple(k) for k in keys}) == 3  # one distinct key per iteration
    _, v_same = init(f)(rngs, X, False)
    same = np.asarray(v_same["keys"]["k"])
    assert len({tuple(k) for k in same}) == 1  # unsplit: every iteration draws the same key
    # Deterministic given the key.
    _, v_again = init(f)(rngs, X, True)
    np.testing.assert_array_equal(v_again["keys"]["k"], keys)


# -- remat_scan and scan ----------------------------------------------------------------------


def test_remat_scan_with_rngs_gives_each_layer_its_own_params_and_dropout():
    def body(scope, c):
        h = dense(scope, c)
        key = scope.make_rng("dropout")
        keep = jax.random.bernoulli(key, 0.5, h.shape)
        return jnp.where(keep, jnp.tanh(h), 0.0)

    f = lift.remat_scan(body, lengths=(2, 3))
    rngs = {"params": K, "dropout": jax.random.PRNGKey(5)}
    y, v = init(f)(rngs, X)
    assert _shapes(v["params"]) == {"kernel": (2, 3, 3, 3), "bias": (2, 3, 3)}
    kernels = np.asarray(v["params"]["kernel"]).reshape(6, -1)
    assert len({k.tobytes() for k in kernels}) == 6
    # The same computation, unrolled by hand with the stored params, needs the masks: check
    # that apply is deterministic in the dropout key and differs across keys.
    a1 = apply(f)(v, X, rngs={"dropout": jax.random.PRNGKey(5)})
    a2 = apply(f)(v, X, rngs={"dropout": jax.random.PRNGKey(5)})
    a3 = apply(f)(v, X, rngs={"dropout": jax.random.PRNGKey(6)})
    np.testing.assert_array_equal(a1, a2)
    assert not np.array_equal(a1, a3)
    np.testing.assert_array_equal(a1, y)
    # Gradients flow through the rematerialised levels.
    g = jax.grad(lambda p: apply(f)({"params": p}, X, rngs={"dropout": K}).sum())(v["params"])
    assert _shapes(g) == _shapes(v["params"])
    assert float(jnp.abs(g["kernel"]).sum()) > 0


def test_remat_scan_without_dropout_matches_a_python_loop():
    f = lift.remat_scan(lambda s, c: jnp.tanh(dense(s, c)), lengths=(2, 2))
    y, v = init(f)(K, X)
    want = X
    for i in range(2):
        for j in range(2):
            p = jax.tree_util.tree_map(lambda a, i=i, j=j: a[i, j], v["params"])
            want = jnp.tanh(apply(dense)({"params": p}, want))
    np.testing.assert_allclose(y, want, rtol=1e-5)
    np.testing.assert_allclose(apply(f)(v, X), y, rtol=1e-6)


@pytest.mark.parametrize("unroll", [1, 2, 4])
def test_scan_unroll_gives_the_same_result(unroll):
    def body(scope, c, x):
        h = jnp.tanh(dense(scope, c) + x)
        return h, h.sum()

    def model(scope, xs, unroll=1):
        return lift.scan(body, variable_axes={"params": 0}, split_rngs={"params": True},
                         unroll=unroll)(scope, jnp.zeros((2, 3)), xs)

    xs = jnp.arange(4 * 2 * 3, dtype=jnp.float32).reshape(4, 2, 3) / 20
    ref, v_ref = init(model)(K, xs)
    got, v = init(lambda s, xs: model(s, xs, unroll))(K, xs)
    jax.tree_util.tree_map(np.testing.assert_array_equal, v, v_ref)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), got, ref)
    applied = jax.jit(apply(lambda s, xs: model(s, xs, unroll)))(v, xs)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                           applied, ref)
    assert v["params"]["kernel"].shape == (4, 3, 3)


@pytest.mark.parametrize("use_linen", [False, True])
def test_scan_split_transpose_same_outputs_and_grads(use_linen):
    xs = jnp.arange(12.0).reshape(4, 3) / 7

    if use_linen:
        import flaxen.linen as nn

        class Cell(nn.Module):
            @nn.compact
            def __call__(self, c, x):
                c = jnp.tanh(nn.Dense(3)(c) + x)
                return c, c * 2

        def make(st):
            return nn.scan(Cell, variable_axes={"params": 0}, split_rngs={"params": True},
                           length=4, _split_transpose=st)()

        variables = make(False).init(K, jnp.ones(3), xs)

        def loss(v, c, st):
            c, ys = make(st).apply(v, c, xs)
            return jnp.sum(c) + jnp.sum(ys ** 2)
    else:
        def body(scope, c, x):
            c = jnp.tanh(dense(scope, c) + x)
            return c, c * 2

        def make(st):
            return lambda scope, c: lift.scan(
                body, variable_axes={"params": 0}, split_rngs={"params": True},
                _split_transpose=st)(scope, c, xs)

        _, variables = init(make(False))(K, jnp.ones(3))

        def loss(v, c, st):
            c, ys = apply(make(st))(v, c)
            return jnp.sum(c) + jnp.sum(ys ** 2)

    outs = [jax.value_and_grad(loss, argnums=(0, 1))(variables, jnp.ones(3), st)
            for st in (False, True)]
    for a, b in zip(jax.tree_util.tree_leaves(outs[0]), jax.tree_util.tree_leaves(outs[1])):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_remat_concrete_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="concrete=True"):
        lift.checkpoint(dense, concrete=True)


def test_core_reexports_lifted_transforms_like_flax_core():
    import flaxen.core as core

    for name in ("jit", "vmap", "scan", "remat", "remat_scan", "vjp", "jvp", "custom_vjp",
                 "while_loop"):
        assert getattr(core, name) is getattr(core.lift, name), name
