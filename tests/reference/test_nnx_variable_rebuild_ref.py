"""Differential test: the metadata order of a Variable rebuilt by a pytree unflatten
(``jax.tree.map``, a jitted call's output), flaxen.nnx next to flax.nnx 0.12.8."""

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _orders(lib):
    p = lib.Param(jnp.ones(2), zeta=1, alpha=2)
    s = lib.with_partitioning(lambda k, sh: jnp.ones(sh), ("a",))(None, (2,))
    out = []
    for v in (p, lib.Param(s) if not isinstance(s, lib.Variable) else s):
        out.append([list(v.get_metadata()),
                    list(jax.tree.map(lambda x: x, v).get_metadata()),
                    list(jax.jit(lambda x: x)(v).get_metadata())])
    return out


def test_rebuilt_variables_list_metadata_like_flax():
    with nnx.use_eager_sharding(False), fnnx.use_eager_sharding(False):
        assert _orders(nnx) == _orders(fnnx)
