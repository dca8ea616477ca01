"""flaxen.layer_math: the pure layer math Linen and NNX share, and NNX's independence of Linen."""

import subprocess
import sys

import jax.numpy as jnp
import pytest

from flaxen.layer_math import einsum, embedding


def test_import_nnx_does_not_load_linen_module_system():
    code = (
        "import sys, flaxen.nnx, flaxen.experimental.nnx\n"
        "bad = sorted(m for m in sys.modules if m.startswith('flaxen.linen'))\n"
        "assert 'flaxen.linen.module' not in sys.modules, bad\n"
        "assert 'flaxen.linen._module' not in sys.modules, bad\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_linen_public_modules_reexport_the_shared_objects():
    from flaxen import layer_math, linen
    from flaxen.layer_math import activations, attention, dtypes, initializers, pooling
    from flaxen.linen import activation as lact
    from flaxen.linen import attention as latt
    from flaxen.linen import dtypes as ldt
    from flaxen.linen import pooling as lpool

    assert layer_math.__doc__
    assert linen.initializers.lecun_normal is initializers.lecun_normal
    assert linen.initializers.zeros_init is initializers.zeros_init
    assert lact.relu is activations.relu and linen.gelu is activations.gelu
    assert lact.PReLU is linen.PReLU
    assert ldt.promote_dtype is dtypes.promote_dtype
    assert lpool.max_pool is pooling.max_pool and linen.avg_pool is pooling.avg_pool
    assert latt.dot_product_attention is attention.dot_product_attention
    assert sorted(lpool.__all__) == ["avg_pool", "max_pool", "min_pool", "pool"]


@pytest.mark.parametrize(
    "spec,ndim,kernel,want",
    [
        ("abc,cde->abde", 3, (5, 6, 7), ((6, 7), (1, 1, 6, 7))),
        ("ab,bc->ca", 2, (4, 5), ((5,), (5, 1))),
        ("d...ab,bc...->ad...c", 5, (4, 5, 6, 7), ((6, 7, 5), (1, 1, 6, 7, 5))),
        # the kernel covers only the last of two '...' axes
        ("...a,...ab->...b", 3, (7, 2, 3), ((7, 3), (1, 7, 3))),
        ("ab,bc->a", 2, (4, 5), ((), (1,))),
    ],
)
def test_einsum_bias_layout(spec, ndim, kernel, want):
    assert einsum.bias_layout(spec, ndim, kernel) == want


def test_einsum_str_checks():
    assert einsum.check_einsum_str("ab, bc -> ac") == "ab,bc->ac"
    with pytest.raises(ValueError, match="explicit"):
        einsum.check_einsum_str("ab,bc")
    with pytest.raises(ValueError, match="exactly one"):
        einsum.check_einsum_str("ab,bc,cd->ad")


def test_embedding_lookup_nan_rows_and_scalar_ids():
    table = jnp.arange(6.0).reshape(3, 2)
    out = embedding.lookup(table, jnp.array([2, 3]))
    assert out[0].tolist() == [4.0, 5.0] and bool(jnp.isnan(out[1]).all())
    one = embedding.lookup(table[:1], jnp.array(0))
    assert one.shape == (2,) and one.tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="integer"):
        embedding.check_ids(jnp.ones(2))


def test_avg_pool_without_padding_counts_under_strict_rank_promotion():
    import jax

    from flaxen.layer_math.pooling import avg_pool

    x = jnp.array([1.0, 2.0, 3.0, 4.0]).reshape((1, 2, 2, 1))
    with jax.numpy_rank_promotion("raise"):
        y = avg_pool(x, (2, 2), padding="SAME", count_include_pad=False)
        unbatched = avg_pool(x[0], (2, 2), padding="SAME", count_include_pad=False)
    assert y.ravel().tolist() == [2.5, 3.0, 3.5, 4.0]
    assert unbatched.ravel().tolist() == [2.5, 3.0, 3.5, 4.0]
