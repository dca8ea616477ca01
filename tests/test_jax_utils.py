"""Tests for flaxen.jax_utils on the 8 host CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import jax_utils

N_DEV = jax.local_device_count()


def test_eight_devices():
    assert N_DEV == 8


# --- replicate / unreplicate ------------------------------------------------------------


def test_replicate_stacks_one_copy_per_device():
    tree = {"w": np.arange(6.0).reshape(2, 3), "b": 1.5, "i": np.int8(3)}
    reps = jax_utils.replicate(tree)
    assert reps["w"].shape == (N_DEV, 2, 3) and reps["w"].dtype == jnp.float32
    assert reps["b"].shape == (N_DEV,) and reps["b"].dtype == jnp.float32
    assert reps["i"].dtype == jnp.int8
    for row in np.asarray(reps["w"]):
        np.testing.assert_array_equal(row, tree["w"])
    # One row per device, in jax.local_devices() order.
    shard_devices = [s.device for s in sorted(reps["w"].addressable_shards,
                                              key=lambda s: s.index[0].start)]
    assert shard_devices == jax.local_devices()
    assert all(s.data.shape == (1, 2, 3) for s in reps["w"].addressable_shards)


def test_replicate_on_chosen_devices():
    devices = jax.local_devices()[2:5]
    reps = jax_utils.replicate(jnp.ones(4), devices=devices)
    assert reps.shape == (3, 4)
    assert {s.device for s in reps.addressable_shards} == set(devices)


def test_replicate_typed_prng_key():
    key = jax.random.key(42)
    reps = jax_utils.replicate(key)
    assert reps.shape == (N_DEV,)
    assert jnp.issubdtype(reps.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(jax_utils.unreplicate(reps)),
                                  jax.random.key_data(key))


def test_replicated_tree_feeds_pmap_and_unreplicate_inverts():
    params = {"w": jnp.arange(3.0)}
    out = jax.pmap(lambda p: p["w"] * 2)(jax_utils.replicate(params))
    assert out.shape == (N_DEV, 3)
    np.testing.assert_array_equal(jax_utils.unreplicate(out), [0.0, 2.0, 4.0])
    back = jax_utils.unreplicate(jax_utils.replicate(params))
    np.testing.assert_array_equal(back["w"], params["w"])


def test_unreplicate_takes_first_row():
    tree = {"a": np.arange(12).reshape(4, 3), "b": (np.array([7, 8]),)}
    out = jax_utils.unreplicate(tree)
    np.testing.assert_array_equal(out["a"], [0, 1, 2])
    assert out["b"][0] == 7


# --- pmean --------------------------------------------------------------------------------


def test_pmean_over_pytree():
    fn = jax.pmap(lambda x: jax_utils.pmean({"a": x, "b": [x * 3]}, "batch"),
                  axis_name="batch")
    with pytest.warns(DeprecationWarning, match="use jax.lax.pmean instead"):
        out = fn(jnp.arange(float(N_DEV)))
    mean = (N_DEV - 1) / 2
    np.testing.assert_allclose(out["a"], np.full(N_DEV, mean))
    np.testing.assert_allclose(out["b"][0], np.full(N_DEV, 3 * mean))


# --- prefetch_to_device -------------------------------------------------------------------


def test_prefetch_yields_every_item_in_order_sharded():
    items = [{"x": np.full((N_DEV, 2), float(i))} for i in range(5)]
    got = list(jax_utils.prefetch_to_device(iter(items), 2))
    assert len(got) == 5
    for i, item in enumerate(got):
        assert isinstance(item["x"], jax.Array)
        np.testing.assert_array_equal(item["x"], items[i]["x"])
        assert len(item["x"].addressable_shards) == N_DEV
        assert item["x"].addressable_shards[0].data.shape == (1, 2)


def test_prefetch_splits_a_multiple_of_the_devices_in_blocks():
    x = np.arange(2 * N_DEV * 3, dtype=np.float32).reshape(2 * N_DEV, 3)
    (item,) = jax_utils.prefetch_to_device(iter([x]), 1)
    np.testing.assert_array_equal(item, x)
    shards = sorted(item.addressable_shards, key=lambda s: s.index[0].start)
    assert [s.data.shape for s in shards] == [(2, 3)] * N_DEV
    np.testing.assert_array_equal(shards[1].data, x[2:4])  # consecutive rows per device


def test_prefetch_reads_only_size_items_ahead():
    consumed = []

    def source():
        for i in range(10):
            consumed.append(i)
            yield np.full((N_DEV,), i)

    it = jax_utils.prefetch_to_device(source(), 3)
    first = next(it)
    assert int(first[0]) == 0
    assert len(consumed) == 4  # the item handed out plus three in flight
    assert [int(x[0]) for x in it] == list(range(1, 10))


def test_prefetch_to_chosen_devices():
    devices = jax.local_devices()[:2]
    (item,) = jax_utils.prefetch_to_device(iter([np.ones((2, 3))]), 1, devices=devices)
    assert {s.device for s in item.addressable_shards} == set(devices)


def test_prefetch_errors_name_the_leaf_and_size():
    with pytest.raises(ValueError, match=r"\['x'\].*\(3, 2\).*8"):
        next(jax_utils.prefetch_to_device(iter([{"x": np.ones((3, 2))}]), 2))
    with pytest.raises(ValueError, match="size >= 1"):
        next(jax_utils.prefetch_to_device(iter([np.ones(N_DEV)]), 0))


# --- partial_eval_by_shape ----------------------------------------------------------------


def test_partial_eval_returns_known_values_and_shapes():
    def fn(x, y, scale, *, offset):
        return {"sum": x.sum() + y.sum(), "const": jnp.ones(3) * scale + offset,
                "y": y, "shape": x.shape}

    out = jax_utils.partial_eval_by_shape(fn, [(2, 3), ((4,), jnp.int32)], 5.0, offset=1.0)
    assert out["sum"] == jax.ShapeDtypeStruct((), jnp.float32)
    assert out["y"] == jax.ShapeDtypeStruct((4,), jnp.int32)
    np.testing.assert_array_equal(out["const"], [6.0, 6.0, 6.0])
    assert out["shape"] == (2, 3)


def test_partial_eval_accepts_shape_dtype_structs_and_non_array_outputs():
    spec = [jax.ShapeDtypeStruct((2,), jnp.bfloat16)]
    out, dtype = jax_utils.partial_eval_by_shape(lambda x: (x * 2, x.dtype), spec)
    assert out == jax.ShapeDtypeStruct((2,), jnp.bfloat16)
    assert dtype == jnp.bfloat16


def test_partial_eval_does_not_run_on_data():
    key = jax.random.key(0)

    def init(x, key):
        w = jax.random.normal(key, (x.shape[-1], 2))
        return w, x @ w

    w, y = jax_utils.partial_eval_by_shape(init, [(5, 3)], key)
    np.testing.assert_array_equal(w, jax.random.normal(key, (3, 2)))
    assert y == jax.ShapeDtypeStruct((5, 2), jnp.float32)


# --- pad_shard_unpad ----------------------------------------------------------------------


def _traced_shapes_model():
    shapes = []

    def forward(params, x):
        shapes.append(x.shape)  # runs once per compilation
        return x * params["scale"] + 1

    return jax.pmap(forward), shapes


@pytest.mark.parametrize("batch", [1, 5, 8, 13, 16, 20])
def test_pad_shard_unpad_is_exact_for_any_batch(batch):
    forward, _ = _traced_shapes_model()
    params = jax_utils.replicate({"scale": np.float32(3.0)})
    x = np.arange(batch * 2, dtype=np.float32).reshape(batch, 2)
    out = jax_utils.pad_shard_unpad(forward)(params, x)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x * 3 + 1)


def test_min_device_batch_gives_one_compile_for_ragged_last_batch():
    forward, shapes = _traced_shapes_model()
    wrapped = jax_utils.pad_shard_unpad(forward)
    params = jax_utils.replicate({"scale": np.float32(2.0)})
    data = np.arange(37 * 3, dtype=np.float32).reshape(37, 3)
    outs = [wrapped(params, data[i:i + 16], min_device_batch=2)
            for i in range(0, len(data), 16)]
    assert [len(o) for o in outs] == [16, 16, 5]
    np.testing.assert_array_equal(np.concatenate(outs), data * 2 + 1)
    assert shapes == [(2, 3)]


def test_per_device_batch_rule():
    seen = []

    def record(params, x):
        seen.append(x.shape)
        return x

    wrapped = jax_utils.pad_shard_unpad(record)
    for batch, minimum in [(20, None), (20, 2), (20, 4), (3, 4), (16, 1), (17, None)]:
        wrapped(None, np.ones((batch, 1)), min_device_batch=minimum)
    per_device = [s[1] for s in seen]
    assert per_device == [3, 3, 4, 4, 2, 3]
    assert all(s[0] == N_DEV for s in seen)


def test_padding_rows_are_zeros_and_kwargs_are_padded():
    got = {}

    def record(params, x, *, mask):
        got["x"], got["mask"] = x, mask
        return x

    jax_utils.pad_shard_unpad(record)(None, np.arange(1.0, 6.0), mask=np.ones(5, bool))
    np.testing.assert_array_equal(got["x"].ravel(), [1, 2, 3, 4, 5, 0, 0, 0])
    np.testing.assert_array_equal(got["mask"].ravel(), [1] * 5 + [0] * 3)
    assert got["mask"].dtype == bool


def test_static_arguments_and_static_return():
    calls = []

    def step(metrics, params, batch, *, label):
        calls.append((metrics, params, label, batch["x"].shape))
        return {"count": metrics["count"] + batch["x"].shape[0]}

    wrapped = jax_utils.pad_shard_unpad(step, static_argnums=(0, 1),
                                        static_argnames=("label",), static_return=True)
    out = wrapped({"count": 10}, "params", {"x": np.ones((11, 2))}, label="hello")
    assert calls == [({"count": 10}, "params", "hello", (N_DEV, 2, 2))]
    assert out == {"count": 10 + N_DEV}


def test_dict_inputs_and_outputs_keep_dtypes():
    wrapped = jax_utils.pad_shard_unpad(lambda p, batch: batch, static_argnums=(0,))
    batch = {"a": np.arange(5, dtype=np.int8), "b": np.ones((5, 3), bool)}
    out = wrapped(None, batch)
    assert out["a"].dtype == np.int8 and out["b"].shape == (5, 3)
    np.testing.assert_array_equal(out["a"], batch["a"])


def test_jax_array_inputs_are_accepted():
    out = jax_utils.pad_shard_unpad(jax.pmap(lambda x: x - 1), static_argnums=())(
        jnp.arange(3.0))
    np.testing.assert_array_equal(out, [-1.0, 0.0, 1.0])


def test_pad_shard_unpad_errors_are_explicit():
    ident = jax_utils.pad_shard_unpad(lambda p, x, y: x)
    with pytest.raises(ValueError, match=r"args\[1\] has 5.*args\[2\] has 7") as info:
        ident(None, np.ones(5), np.ones(7))
    assert isinstance(info.value, AssertionError)  # what Flax's assert raises
    with pytest.raises(ValueError, match=r"args\[2\] is a scalar"):
        ident(None, np.ones(5), 3.0)
    with pytest.raises(AssertionError, match="no non-static array"):
        jax_utils.pad_shard_unpad(lambda p: p)(np.ones(3))
    reduce = jax_utils.pad_shard_unpad(lambda p, x: {"loss": x.sum(axis=1)})
    with pytest.raises(ValueError, match=r"\['loss'\].*static_return=True"):
        reduce(None, np.ones(20))


def test_scan_in_dim_one_axis_several_axes_and_keepdims():
    scan_in_dim = jax_utils.scan_in_dim
    xs = jnp.arange(24.0).reshape(2, 3, 4)
    # One axis: a running sum along axis 1.
    carry, ys = scan_in_dim(lambda c, x: (c + x, c + x), jnp.zeros((2, 4)), xs, axis=1)
    np.testing.assert_allclose(ys, np.cumsum(np.asarray(xs), axis=1))
    np.testing.assert_allclose(carry, np.asarray(xs).sum(1))

    # Two axes (0 outermost, then 2): the order of visits is row-major over them.
    order = []

    def record(c, x):
        order.append(x.shape)
        return c + 1, x * c

    count, ys = scan_in_dim(record, 0, xs, axis=(0, 2), unroll=(1, 2))
    want = np.asarray(xs) * np.arange(8).reshape(2, 1, 4)
    np.testing.assert_allclose(ys, want)
    assert int(count) == 8 and order[0] == (3,)

    # keepdims: the body sees (and returns) slices with size-1 scanned axes.
    def keep(c, x):
        assert x.shape == (1, 3, 1)
        return c + x.sum(), x * 2

    total, ys = scan_in_dim(keep, 0.0, xs, axis=(0, -1), keepdims=True)
    np.testing.assert_allclose(ys, 2 * np.asarray(xs))
    assert float(total) == float(np.asarray(xs).sum())


def test_scan_in_dim_bad_arguments():
    scan_in_dim = jax_utils.scan_in_dim
    with pytest.raises(ValueError, match="distinct axes"):
        scan_in_dim(lambda c, x: (c, x), 0, jnp.ones((2, 3)), axis=(0, 0))



def test_scan_in_dim_pads_short_unroll_on_the_left_like_flax(monkeypatch):
    seen = []
    real_scan = jax.lax.scan

    def spy(f, init, xs, **kw):
        seen.append(kw.get("unroll"))
        return real_scan(f, init, xs, **kw)

    monkeypatch.setattr(jax.lax, "scan", spy)
    xs = jnp.arange(24.0).reshape(2, 3, 4)
    add = lambda c, x: (c + x.sum(), x)  # noqa: E731
    for unroll, expected in [((1,), [1, 1]), (3, [1, 3]), ((2, 3, 4), [2, 3]), ((1, 1), [1, 1])]:
        seen.clear()
        total, ys = jax_utils.scan_in_dim(add, 0.0, xs, axis=(0, 2), unroll=unroll)
        assert seen == expected, (unroll, seen)
        assert float(total) == float(xs.sum())
        np.testing.assert_array_equal(ys, xs)
    seen.clear()
    jax_utils.scan_in_dim(add, 0.0, xs)  # default unroll=(1,) on one axis
    assert seen == [1]


def test_replicate_and_prefetch_name_the_mesh_axis():
    n = jax.local_device_count()
    r = jax_utils.replicate({"w": np.ones(2)})
    assert r["w"].sharding.spec == jax.sharding.PartitionSpec("_device_put_sharded")
    r = jax_utils.replicate(np.ones(2), axis_name="batch")
    assert r.sharding.mesh.axis_names == ("batch",) and r.shape == (n, 2)
    it = jax_utils.prefetch_to_device(iter([np.ones((n, 3))]), 1, axis_name="data")
    (b,) = list(it)
    assert b.sharding.spec == jax.sharding.PartitionSpec("data")
