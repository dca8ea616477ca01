"""flaxen.linen.fp8_ops against flax.linen.fp8_ops: the same values, gradients and FP8 state."""

import warnings

import flax.linen as ref_nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.linen import fp8_ops as ref
from jax import lax

import flaxen.linen as nn
from flaxen.linen import fp8_ops
from tests import _inputs


def _assert_same_trees(a, b):
    a_leaves, b_leaves = (jax.tree_util.tree_flatten_with_path(t)[0] for t in (a, b))
    assert [jax.tree_util.keystr(p) for p, _ in a_leaves] == [
        jax.tree_util.keystr(p) for p, _ in b_leaves]
    for (path, x), (_, y) in zip(a_leaves, b_leaves):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("cls", ["Fp8DirectDotGeneralOp", "Fp8DotGeneralOp",
                                 "NANOOFp8DotGeneralOp"])
def test_dense_general_training_steps_match(cls):
    x = jax.random.normal(jax.random.key(1), (3, 5, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Fp8DotGeneralOp, in both
        theirs = ref_nn.DenseGeneral(features=(2, 3), dot_general_cls=getattr(ref_nn, cls))
        ours = nn.DenseGeneral(features=(2, 3), dot_general_cls=getattr(nn, cls))
        v_ref = theirs.init(jax.random.key(0), x)
        v = ours.init(jax.random.key(0), x)
        for _ in range(3):  # the scales move away from 1 after the first step
            loss_ref, g_ref = jax.value_and_grad(lambda v: (theirs.apply(v, x) ** 2).sum())(v_ref)
            loss, g = jax.value_and_grad(lambda v: (ours.apply(v, x) ** 2).sum())(v)
            np.testing.assert_allclose(loss, loss_ref, rtol=1e-6)
            _assert_same_trees(g, g_ref)
            step = lambda v, g: {  # noqa: E731
                "params": jax.tree.map(lambda p, d: p - 0.1 * d, v["params"], g["params"]),
                fp8_ops.OVERWRITE_WITH_GRADIENT: g[fp8_ops.OVERWRITE_WITH_GRADIENT]}
            v_ref, v = step(v_ref, g_ref), step(v, g)


def test_einsum_and_transposes_match():
    lhs, rhs = _inputs.normal(1, (2, 3, 4)), _inputs.normal(2, (4, 5))
    variables = ref.Fp8Einsum().init(jax.random.key(0), "abc,cd->abd", lhs, rhs)

    def grads_of(m):
        loss = lambda v, l, r: (m.apply(v, "abc,cd->abd", l, r) ** 2).sum()  # noqa: E731, E741
        return jax.grad(loss, argnums=(0, 1, 2))(variables, lhs, rhs)

    grads = [grads_of(ref.Fp8Einsum()), grads_of(fp8_ops.Fp8Einsum())]
    _assert_same_trees(grads[1], grads[0])
    a, b = _inputs.normal(1, (2, 3, 4, 5)), _inputs.normal(2, (5, 2, 6, 3))
    dn = (((3, 1), (0, 3)), ((0,), (1,)))
    g = _inputs.normal(3, lax.dot_general(a, b, dn).shape)
    kw = dict(dimension_numbers=dn, precision=None, preferred_element_type=None)
    for name in ("dot_general_transpose_lhs", "dot_general_transpose_rhs"):
        np.testing.assert_allclose(getattr(fp8_ops, name)(g, a, b, **kw),
                                   getattr(ref, name)(g, a, b, **kw), rtol=1e-5)


def test_fm32_meta_gradients_match():
    def run(mod):
        s = lax.convert_element_type(jnp.ones((1,)), mod.fm32)
        h = lax.convert_element_type(jnp.array([1.0, 3.0, 0.0]), mod.fm32)

        def loss(x, s, h):
            q = lambda v: mod.in_qdq(jnp.float32, jnp.float8_e4m3fn, v, s, h)  # noqa: E731
            return (q(x) + q(3 * x)).sum()

        _, vjp = jax.vjp(loss, jnp.array([1.0, 2.0]), s, h)
        return [lax.convert_element_type(t, jnp.float32) if t.dtype == mod.fm32 else t
                for t in vjp(jnp.float32(1.0))]

    _assert_same_trees(jax.jit(lambda: run(fp8_ops))(), jax.jit(lambda: run(ref))())
