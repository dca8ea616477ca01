"""The summary Table behind tabulate (summary._get_module_table, Row, Table) and tabulating
lifted transforms without leaking tracers."""

import jax
import jax.numpy as jnp

import flaxen.linen as nn
from flaxen.linen import summary

KEY = jax.random.PRNGKey(0)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, scale: float = 1.0):
        h = nn.Dense(3)(x)
        return nn.Dense(3)(h) * scale


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        block = Block()
        return nn.Dense(2)(block(block(x), scale=2.0))


def test_table_rows_follow_calls_with_shapes_and_variables():
    table = summary._get_module_table(Net(), depth=None, show_repeated=True)(
        KEY, jnp.ones((4, 3)))
    assert isinstance(table, summary.Table) and isinstance(table[0], summary.Row)
    assert table.collections == ["params"]
    assert [r.path for r in table] == [
        (), ("Block_0",), ("Block_0", "Dense_0"), ("Block_0", "Dense_1"),
        ("Block_0",), ("Block_0", "Dense_0"), ("Block_0", "Dense_1"), ("Dense_0",)]
    assert table[0].module_type is Net and table[1].method == "__call__"
    assert table[1].inputs.shape == (4, 3)
    second = table[4]
    assert second.inputs[0].shape == (4, 3) and second.inputs[1] == {"scale": 2.0}
    assert second.module_variables == {} and second.counted_variables == {}  # repeated
    assert table[2].size_and_bytes(["params"]) == {"params": (12, 48)}
    assert table[0].flops is None


def test_depth_folds_counts_and_flops_add_up():
    rows = summary._get_module_table(Net(), depth=1, show_repeated=True, compute_flops=True,
                                     compute_vjp_flops=True)(KEY, jnp.ones((4, 3)))
    assert [r.path for r in rows] == [(), ("Block_0",), ("Block_0",), ("Dense_0",)]
    assert rows[1].module_variables == {"params": {}}
    assert set(rows[1].counted_variables["params"]) == {"Dense_0", "Dense_1"}
    assert all(isinstance(r.flops, int) and r.flops > 0 for r in rows)
    assert rows[0].flops >= sum(r.flops for r in rows[1:])
    assert rows[0].vjp_flops >= sum(r.vjp_flops for r in rows[1:])


def test_tabulate_lifted_scan_leaks_no_tracers():
    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            carry = nn.LSTMCell(4).initialize_carry(jax.random.key(0), x[:, 0].shape)
            scan = nn.scan(nn.LSTMCell, variable_broadcast="params",
                           split_rngs={"params": False}, in_axes=1, out_axes=1)
            return scan(4, name="cell")(carry, x)

    with jax.check_tracer_leaks(True):
        Stack().init(KEY, jnp.ones((2, 3, 5)))
        text = Stack().tabulate(KEY, jnp.ones((2, 3, 5)), compute_flops=True,
                                console_kwargs={"force_terminal": False, "width": 200})
    assert "cell/ii" in text


def test_str_enum_input_keys_print_as_their_value():
    import enum

    class Key(str, enum.Enum):  # noqa: UP042 (the (str, Enum) form users write)
        feats = "feats"

    class Net(nn.Module):
        @nn.compact
        def __call__(self, inputs):
            return nn.Dense(2)(inputs[Key.feats])

    text = Net().tabulate(KEY, {Key.feats: jnp.ones((1, 3))},
                          console_kwargs={"force_terminal": False, "width": 200})
    assert "feats: float32[1,3]" in text
    assert "Key.feats" not in text
