"""RNG streams: the counter is a JAX array, what a stream accepts as its seed, and which
streams ``Rngs.split/broadcast/fork`` restart, fork or split."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx
from flaxen.errors import InvalidNNXValueError


def _data(key):
    return jax.random.key_data(key).tolist()


def test_count_is_a_jax_array_with_a_sharding():
    rngs = nnx.Rngs(0, dropout=1)
    count = rngs.default.count.get_value()
    assert isinstance(count, jax.Array) and count.dtype == jnp.uint32 and count.shape == ()
    assert "Array(0, dtype=uint32)" in repr(rngs.default.count)
    shardings = jax.tree.leaves(jax.tree.map(lambda a: a.sharding, nnx.state(rngs)))
    assert len(shardings) == 4
    rngs.params()
    count = rngs.default.count.get_value()
    assert isinstance(count, jax.Array) and int(count) == 1 and count.dtype == jnp.uint32


def test_fast_paths_give_the_public_bits():
    for seed in (0, 7, -3, 2**31, 2**40, 2**63 - 1):
        rngs = nnx.Rngs(seed)
        base = jax.random.key(seed)
        assert _data(rngs.default.key.get_value()) == _data(base)
        for i in range(3):
            assert _data(rngs.params()) == _data(jax.random.fold_in(base, i))


def test_counts_made_under_jit_are_traced_and_come_back_as_arrays():
    @jax.jit
    def make():
        rngs = nnx.Rngs(3)
        rngs()
        return rngs.default.count.get_value()

    assert int(make()) == 1


def test_seed_offset_and_impl_are_honoured():
    base = _data(jax.random.key(5))
    jax.config.update("jax_random_seed_offset", 4)
    try:
        assert _data(nnx.Rngs(5).default.key.get_value()) == _data(jax.random.key(5)) != base
    finally:
        jax.config.update("jax_random_seed_offset", 0)
    with jax.default_prng_impl("rbg"):
        key = nnx.Rngs(5).default.key.get_value()
        assert _data(key) == _data(jax.random.key(5)) and key.shape == ()


@pytest.mark.parametrize("seed", [3.5, np.int32(3), np.uint32(3), jnp.array(3),
                                  np.asarray(jax.random.PRNGKey(0)), "a", [0, 0]])
def test_seeds_flax_refuses_raise_value_errors(seed):
    with pytest.raises(InvalidNNXValueError, match="nnx.Rngs") as info:
        nnx.Rngs(seed)
    assert isinstance(info.value, ValueError)


def test_seeds_flax_accepts():
    assert _data(nnx.Rngs(True).default.key.get_value()) == _data(jax.random.key(1))
    raw = jax.random.PRNGKey(4)
    assert _data(nnx.Rngs(raw).default.key.get_value()) == raw.tolist()
    typed = jax.random.key(4)
    assert nnx.Rngs(typed).default.key.get_value() is typed


def test_split_and_broadcast_restart_the_streams_they_leave():
    rngs = nnx.Rngs(0, params=1)
    rngs(), rngs.params()
    for out in (rngs.split({"params": 2, ...: None}), rngs.broadcast({"params": 2})):
        assert out.default is not rngs.default
        assert int(out.default.count.get_value()) == 0
        assert _data(out.default.key.get_value()) == _data(rngs.default.key.get_value())
        assert out.params.key.get_value().shape == (2,)


def test_fork_forks_the_streams_a_split_spec_maps_to_none():
    rngs = nnx.Rngs(0, params=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        out = rngs.fork(split={"params": 2, ...: None})
    expected = jax.random.fold_in(jax.random.key(0), 0)
    assert _data(out.default.key.get_value()) == _data(expected)
    assert int(rngs.default.count.get_value()) == 1
    assert out.params.key.get_value().shape == (2,)
