"""Differential test: RNG stream counters, accepted seeds and Rngs.split/broadcast/fork,
flaxen.nnx next to flax.nnx 0.12.8."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx

fnnx = pytest.importorskip("flax.nnx")


def _stream_facts(rngs, original):
    return [(name, s is original.__dict__.get(name), np.asarray(s.count.get_value()).tolist(),
             jax.random.key_data(s.key.get_value()).tolist()) for name, s in rngs.items()]


SPECS = [2, {"params": 2, ...: None}, {"params": 2}, {"params": None, ...: (2,)}, {...: None}]


def _derived(lib, method, spec):
    rngs = lib.Rngs(0, params=1, dropout=2)
    rngs(), rngs.params()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        out = rngs.fork(split=spec) if method == "fork" else getattr(rngs, method)(spec)
    return _stream_facts(out, rngs), _stream_facts(rngs, rngs)


@pytest.mark.parametrize("method", ["split", "broadcast", "fork"])
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_derived_rngs_as_flax(method, spec):
    assert _derived(nnx, method, spec) == _derived(fnnx, method, spec)


def test_counter_as_flax():
    def facts(lib):
        rngs = lib.Rngs(0)
        rngs()
        count = rngs.default.count
        leaves = jax.tree.leaves(lib.state(rngs))
        return (repr(count).replace("flax.", ""), [type(x).__name__ for x in leaves],
                [str(x.sharding) for x in leaves])

    assert facts(nnx) == facts(fnnx)


SEEDS = {"int": 3, "bool": True, "big": 2**40, "float": 3.5, "np.int32": np.int32(3),
         "jnp int": jnp.array(3), "jnp uint32": jnp.array(3, jnp.uint32),
         "np key data": np.asarray(jax.random.PRNGKey(3)), "key data": jax.random.PRNGKey(3),
         "key": jax.random.key(3), "str": "a"}


def _seed(lib, seed):
    try:
        return jax.random.key_data(lib.Rngs(seed)()).tolist()
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return [c for c in (ValueError, TypeError) if isinstance(e, c)]


@pytest.mark.parametrize("name", list(SEEDS))
def test_seed_accepted_or_refused_as_flax(name):
    assert _seed(nnx, SEEDS[name]) == _seed(fnnx, SEEDS[name])
