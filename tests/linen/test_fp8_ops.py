"""flaxen.linen.fp8_ops: FP8 rounding helpers, delayed scaling, the fm32 dtype, the transposes
of dot_general, and the FP8 dot_general/einsum modules in training."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax

import flaxen.linen as nn
from flaxen.linen import fp8_ops
from flaxen.training import train_state

E4M3_MAX = 448.0
E4M3 = jnp.float8_e4m3fn
COL = fp8_ops.OVERWRITE_WITH_GRADIENT


def test_qdq_rounds_to_e4m3_and_keeps_the_0_8_3_name():
    x = jnp.array([1.0, 1.07, 1000.0])
    y = fp8_ops.qdq(x, E4M3, jnp.ones((1,)), jnp.float32)
    assert y.dtype == jnp.float32
    np.testing.assert_array_equal(y, [1.0, 1.125, E4M3_MAX])  # rounded, then clipped
    assert fp8_ops.quantize_dequantize is fp8_ops.qdq
    q = fp8_ops.quantize(jnp.array([2.0, -8.0]), E4M3, jnp.array([2.0]), jnp.float32)
    assert q.dtype == E4M3 and q.astype(jnp.float32).tolist() == [1.0, -4.0]
    assert fp8_ops.dequantize(q, jnp.float32, jnp.array([2.0])).tolist() == [2.0, -8.0]


def test_compute_scale_maps_amax_to_the_fp8_max_and_keeps_old_scale_for_zero():
    s = fp8_ops.compute_scale(jnp.float32(2.0), jnp.float32(1.0), jnp.float32(E4M3_MAX))
    np.testing.assert_allclose(s, 2.0 / E4M3_MAX)
    kept = fp8_ops.compute_scale(jnp.float32(0.0), jnp.float32(0.5), jnp.float32(E4M3_MAX))
    np.testing.assert_allclose(kept, 0.5)
    kept = fp8_ops.compute_scale(jnp.float32(jnp.inf), jnp.float32(0.5), jnp.float32(E4M3_MAX))
    np.testing.assert_allclose(kept, 0.5)


def test_update_fp8_meta_and_quantize_dequantize_update():
    hist = jnp.array([3.0, 0.0, 1.0])
    x = jnp.array([-2.0, 0.5])
    scale, new_hist = fp8_ops.update_fp8_meta(x, E4M3, jnp.ones(1), hist)
    np.testing.assert_allclose(scale, [3.0 / E4M3_MAX])  # from the old history's max
    np.testing.assert_array_equal(new_hist, [2.0, 1.0, 3.0])  # rolled, new amax first
    y, s2, h2 = fp8_ops.quantize_dequantize_update(x, E4M3, jnp.ones(1), hist, jnp.float32)
    np.testing.assert_array_equal(s2, scale)
    np.testing.assert_array_equal(h2, new_hist)
    np.testing.assert_allclose(y, x, rtol=0.07)


def test_in_qdq_gradients_are_the_new_scale_and_history():
    hist = jnp.array([3.0, 0.0, 1.0])
    scale = jnp.ones((1,))
    x = jnp.array([-2.0, 0.5])
    gx, gscale, ghist = jax.grad(
        lambda x, s, h: fp8_ops.in_qdq(jnp.float32, E4M3, x, s, h).sum(), argnums=(0, 1, 2)
    )(x, scale, hist)
    np.testing.assert_array_equal(gx, [1.0, 1.0])  # straight through
    np.testing.assert_allclose(gscale, [3.0 / E4M3_MAX])
    np.testing.assert_array_equal(ghist, [2.0, 1.0, 3.0])


def test_out_qdq_rounds_the_gradient_in_the_given_format():
    y = jnp.array([1.0, 2.0])
    f = lambda y, s, h: (fp8_ops.out_qdq(jnp.float32, jnp.float8_e5m2, y, s, h)  # noqa: E731
                         * jnp.array([1.1, 3.0])).sum()
    gy, gs, gh = jax.grad(f, argnums=(0, 1, 2))(y, jnp.ones(1), jnp.zeros(2))
    np.testing.assert_array_equal(gy, [1.0, 3.0])  # 1.1 rounded in e5m2 (2 mantissa bits)
    np.testing.assert_array_equal(gh, [3.0, 0.0])
    np.testing.assert_array_equal(gs, [1.0])  # history was zeros: old scale kept


def test_in_q_and_out_dq():
    x = jnp.array([4.0, -1.0])
    q, s = fp8_ops.in_q(jnp.float32, E4M3, x, jnp.ones(1), jnp.array([8.96]))
    np.testing.assert_allclose(s, [8.96 / E4M3_MAX], rtol=1e-6)
    assert q.dtype == E4M3
    back = fp8_ops.out_dq(jnp.float32, s, jnp.ones(1), q)
    np.testing.assert_allclose(back, x, rtol=0.07)
    g_scale, g_hist = jax.grad(
        lambda s, h: fp8_ops.in_q(jnp.float32, E4M3, x, s, h)[0].astype(jnp.float32).sum(),
        argnums=(0, 1))(jnp.ones(1), jnp.array([8.96]))
    np.testing.assert_allclose(g_scale, s)
    np.testing.assert_array_equal(g_hist, [4.0])
    g_out = jax.grad(lambda o: fp8_ops.out_dq(jnp.float32, s, s, o).sum())(jnp.ones(2))
    np.testing.assert_array_equal(g_out, [1.0, 1.0])  # passes straight through


@pytest.mark.parametrize("dn,lhs_shape,rhs_shape", [
    ((((1,), (0,)), ((), ())), (3, 4), (4, 5)),
    ((((3, 1), (0, 3)), ((0,), (1,))), (2, 3, 4, 5), (5, 2, 6, 3)),
    ((((2,), (1,)), ((0, 1), (0, 2))), (2, 3, 4), (2, 4, 3)),
])
def test_dot_general_transposes_match_autodiff(dn, lhs_shape, rhs_shape):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    x, y = jax.random.normal(k1, lhs_shape), jax.random.normal(k2, rhs_shape)
    out, vjp = jax.vjp(lambda a, b: lax.dot_general(a, b, dn), x, y)
    g = jax.random.normal(k3, out.shape)
    want_x, want_y = vjp(g)
    kw = dict(dimension_numbers=dn, precision=lax.Precision.HIGHEST,
              preferred_element_type=None)
    np.testing.assert_allclose(fp8_ops.dot_general_transpose_lhs(g, x, y, **kw), want_x,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fp8_ops.dot_general_transpose_rhs(g, x, y, **kw), want_y,
                               rtol=1e-5, atol=1e-5)


def test_fm32_gradients_of_shared_meta_combine_by_max():
    x = jnp.array([1.0, 2.0])

    def grads(to_meta):
        def loss(x, s, h):
            qdq = lambda v: fp8_ops.in_qdq(jnp.float32, E4M3, v, s, h)  # noqa: E731
            return (qdq(x) + qdq(3 * x)).sum()

        s, h = to_meta(jnp.ones(1)), to_meta(jnp.array([1.0, 3.0, 0.0]))
        _, vjp = jax.vjp(loss, x, s, h)
        _, gs, gh = vjp(jnp.float32(1.0))
        return gs, gh

    as_meta = lambda v: lax.convert_element_type(v, fp8_ops.fm32)  # noqa: E731
    gs, gh = jax.jit(lambda: grads(as_meta))()  # fm32 arrays leave jit as extended arrays
    assert gh.dtype == fp8_ops.fm32 and repr(gh.dtype) == "fp8_meta32"
    np.testing.assert_array_equal(lax.convert_element_type(gh, jnp.float32), [6.0, 0.0, 1.0])
    np.testing.assert_allclose(lax.convert_element_type(gs, jnp.float32), [3.0 / E4M3_MAX])
    _, gh_plain = grads(lambda v: v)  # float32: the two uses add up
    np.testing.assert_array_equal(gh_plain, [8.0, 0.0, 2.0])
    assert jnp.issubdtype(fp8_ops.fm32, jax.dtypes.extended)
    assert fp8_ops.fm32.name == "fp8_meta32" and fp8_ops.fp32_max_grad == fp8_ops.fm32


def test_dot_general_with_precision_forward_and_jvp():
    a, b = jnp.arange(6.0).reshape(2, 3), jnp.ones((3, 2))
    dn = (((1,), (0,)), ((), ()))
    out, tangent = jax.jvp(lambda a, b: fp8_ops.dot_general_with_precision(a, b, dn),
                           (a, b), (jnp.ones_like(a), jnp.zeros_like(b)))
    np.testing.assert_array_equal(out, a @ b)
    np.testing.assert_array_equal(tangent, jnp.full((2, 2), 3.0))
    with pytest.warns(UserWarning, match="ignores"):
        fp8_ops.dot_general_with_precision(a, b, dn, lax.Precision.HIGH)


def _meta(n=4):
    ones, hist = jnp.ones(1), jnp.zeros(n)
    return dict(lhs_scale=ones, rhs_scale=ones, grad_scale=ones, lhs_amax_history=hist,
                rhs_amax_history=hist, grad_amax_history=hist)


def test_fp8_scaled_dot_general_values_gradients_and_precision_warning():
    k1, k2 = jax.random.split(jax.random.key(2))
    x, w = jax.random.normal(k1, (4, 8)), jax.random.normal(k2, (8, 3))
    dn = (((1,), (0,)), ((), ()))
    meta = _meta()
    meta["lhs_amax_history"] = jnp.full(4, jnp.abs(x).max())
    meta["rhs_amax_history"] = jnp.full(4, jnp.abs(w).max())
    f = lambda x, w, m: fp8_ops.fp8_scaled_dot_general(  # noqa: E731
        x, w, dn, preferred_element_type=jnp.float32, **m)
    y = f(x, w, meta)
    np.testing.assert_allclose(y, x @ w, rtol=0.15, atol=0.15)  # 3 mantissa bits per operand
    gx, gw, gm = jax.grad(lambda x, w, m: f(x, w, m).sum(), argnums=(0, 1, 2))(x, w, meta)
    np.testing.assert_allclose(gx, jnp.ones((4, 3)) @ w.T, rtol=0.15, atol=0.15)
    np.testing.assert_allclose(gw, x.T @ jnp.ones((4, 3)), rtol=0.15, atol=0.15)
    np.testing.assert_array_equal(gm["grad_amax_history"][0], 1.0)  # amax of d(sum)/dy
    np.testing.assert_allclose(gm["lhs_amax_history"][0], jnp.abs(x).max())
    with pytest.warns(UserWarning, match="precision"):
        fp8_ops.fp8_scaled_dot_general(x, w, dn, lax.Precision.HIGHEST,
                                       preferred_element_type=jnp.float32, **meta)


def test_dense_with_fp8_dot_general_variables_and_train_state_overwrite():
    dense = nn.DenseGeneral(features=4, dot_general_cls=nn.Fp8DirectDotGeneralOp)
    x = jax.random.normal(jax.random.key(1), (2, 3))
    variables = dense.init(jax.random.key(0), x)
    fp8 = variables[COL]["Fp8DirectDotGeneralOp_0"]
    assert jax.tree_util.tree_map(jnp.shape, dict(fp8)) == {
        "input_amax_history": (1024,), "kernel_amax_history": (1024,),
        "output_grad_amax_history": (1024,), "input_scale": (1,), "kernel_scale": (1,),
        "output_grad_scale": (1,),
    }
    state = train_state.TrainState.create(params=variables, tx=optax.sgd(0.1),
                                          apply_fn=dense.apply)
    grads = jax.grad(lambda v: state.apply_fn(v, x).sum())(state.params)
    state = state.apply_gradients(grads=grads)
    new = state.params[COL]["Fp8DirectDotGeneralOp_0"]
    np.testing.assert_allclose(new["input_amax_history"][0], jnp.max(jnp.abs(x)), rtol=1e-6)
    np.testing.assert_array_equal(new["input_scale"], [1.0])  # history was all zeros
    np.testing.assert_array_equal(new["output_grad_amax_history"][0], 1.0)  # d(sum)/dy
    assert nn.Fp8DotGeneral is nn.Fp8DirectDotGeneralOp is fp8_ops.Fp8DotGeneral


def test_fp8_dot_general_op_is_deprecated_but_works_and_nanoo_uses_fnuz_formats():
    x = jax.random.normal(jax.random.key(1), (2, 3))
    with pytest.warns(DeprecationWarning, match="Fp8DirectDotGeneralOp"):
        dense = nn.Dense(4, dot_general_cls=nn.Fp8DotGeneralOp)
        v = dense.init(jax.random.key(0), x)
        y = dense.apply(v, x)
    plain = nn.Dense(4).apply({"params": v["params"]}, x)
    np.testing.assert_allclose(y, plain, rtol=0.15, atol=0.15)
    op = nn.NANOOFp8DotGeneralOp()
    assert op.e4m3_dtype == jnp.float8_e4m3fnuz and op.e5m2_dtype == jnp.float8_e5m2fnuz
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only the plain Fp8DotGeneralOp warns
        dense = nn.Dense(4, dot_general_cls=nn.NANOOFp8DotGeneralOp)
        v = dense.init(jax.random.key(0), x)
        g = jax.grad(lambda v: dense.apply(v, x).sum())(v)
    assert g[COL]["NANOOFp8DotGeneralOp_0"]["output_grad_amax_history"][0] == 1.0


def test_fp8_einsum_module():
    k1, k2 = jax.random.split(jax.random.key(4))
    lhs, rhs = jax.random.normal(k1, (2, 3, 4)), jax.random.normal(k2, (4, 5))
    op = nn.Fp8Einsum()
    v = op.init(jax.random.key(0), "abc,cd->abd", lhs, rhs)
    assert set(v[COL]) == {"input_amax_history", "kernel_amax_history",
                           "output_grad_amax_history", "input_scale", "kernel_scale",
                           "output_grad_scale"}
    out = op.apply(v, "abc,cd->abd", lhs, rhs)
    np.testing.assert_allclose(out, jnp.einsum("abc,cd->abd", lhs, rhs), rtol=0.2, atol=0.2)
    gv, grhs = jax.grad(lambda v, r: op.apply(v, "abc,cd->abd", lhs, r).sum(),
                        argnums=(0, 1))(v, rhs)
    np.testing.assert_allclose(grhs, jnp.einsum("abc->c", lhs)[:, None] * jnp.ones((4, 5)),
                               rtol=0.2, atol=0.2)
    np.testing.assert_allclose(gv[COL]["kernel_amax_history"][0], jnp.abs(rhs).max())
