"""flaxen.jax_utils against flax.jax_utils on the same inputs."""

import flax.jax_utils as ref
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import jax_utils


def _same_tree(a, b):
    a_leaves, a_def = jax.tree_util.tree_flatten(a)
    b_leaves, b_def = jax.tree_util.tree_flatten(b)
    assert a_def == b_def
    for x, y in zip(a_leaves, b_leaves):
        if isinstance(x, jax.ShapeDtypeStruct) or isinstance(y, jax.ShapeDtypeStruct):
            assert (x.shape, x.dtype) == (y.shape, y.dtype)
            continue
        assert type(x) is type(y) or (isinstance(x, jax.Array) and isinstance(y, jax.Array))
        assert np.shape(x) == np.shape(y) and np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


TREE = {"w": np.arange(6.0).reshape(2, 3), "b": 1.5, "i": np.int64(3),
        "h": jnp.ones(2, jnp.bfloat16), "t": (np.array([True, False]),)}


def test_replicate_and_unreplicate_match():
    ours, theirs = jax_utils.replicate(TREE), ref.replicate(TREE)
    _same_tree(ours, theirs)
    _same_tree(jax_utils.unreplicate(ours), ref.unreplicate(theirs))
    devices = jax.local_devices()[1:4]
    _same_tree(jax_utils.replicate(TREE, devices), ref.replicate(TREE, devices))


def test_pmean_matches():
    xs = {"a": jnp.arange(8.0), "b": jnp.arange(8)}

    def run(impl):
        return jax.pmap(lambda t: impl.pmean(t, "i"), axis_name="i")(xs)

    with pytest.warns(DeprecationWarning, match="use jax.lax.pmean instead"):
        ours = run(jax_utils)
    _same_tree(ours, run(ref))


@pytest.mark.parametrize("rows", [8, 16])
def test_prefetch_matches(rows):
    items = [{"x": np.full((rows, 3), i, np.float32) + np.arange(rows)[:, None]}
             for i in range(4)]
    ours = list(jax_utils.prefetch_to_device(iter(items), 2))
    theirs = list(ref.prefetch_to_device(iter(items), 2))
    _same_tree(ours, theirs)


def test_partial_eval_by_shape_matches():
    key = jax.random.key(1)

    def init(x, y, key, scale=1.0):
        w = jax.random.normal(key, (x.shape[-1], 4)) * scale
        return {"w": w, "y": x @ w, "z": y.astype(jnp.float32).sum(), "n": x.shape[0]}

    spec = [(3, 5), ((2,), jnp.int32)]
    _same_tree(jax_utils.partial_eval_by_shape(init, spec, key, scale=2.0),
               ref.partial_eval_by_shape(init, spec, key, scale=2.0))


@pytest.mark.parametrize("batch", [1, 8, 20, 33])
@pytest.mark.parametrize("min_device_batch", [None, 3, 6])
def test_pad_shard_unpad_matches(batch, min_device_batch):
    def make(impl):
        seen = []

        def forward(params, x, *, bias):
            seen.append((x.shape, bias.shape))
            return {"y": x * params, "b": bias + 1}

        wrapped = impl.pad_shard_unpad(jax.pmap(forward))
        params = impl.replicate(np.float32(2.5))
        x = np.arange(batch * 2, dtype=np.float32).reshape(batch, 2)
        out = wrapped(params, x, bias=np.arange(batch, dtype=np.int32),
                      min_device_batch=min_device_batch)
        return out, seen

    ours, our_seen = make(jax_utils)
    theirs, their_seen = make(ref)
    _same_tree(ours, theirs)
    assert our_seen == their_seen


def test_pad_shard_unpad_static_return_matches():
    def make(impl):
        def step(metrics, params, batch):
            return {"n": metrics["n"] + jax.lax.psum(batch.sum(), "d")}

        wrapped = impl.pad_shard_unpad(jax.pmap(step, axis_name="d", in_axes=(None, None, 0)),
                                       static_argnums=(0, 1), static_return=True)
        return wrapped({"n": 1.0}, 0.0, np.ones(13, np.float32))

    _same_tree(make(jax_utils), make(ref))
