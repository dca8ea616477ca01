"""The attributes NNX layers keep, in Flax 0.12.8's order and with its stored defaults.

A Module's repr and treescope list attributes in ``__dict__`` order, and user code reads
them, so both the order and the stored values are behaviour. (The side-by-side check with
Flax itself is ``tests/reference/test_nnx_layer_attrs_ref.py``; these run without Flax.)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from flaxen import nnx


def _public(module) -> list[str]:
    return [k for k in vars(module) if not k.startswith("_")]


def test_conv_keeps_kernel_size_after_the_features():
    names = _public(nnx.Conv(2, 3, 3, rngs=nnx.Rngs(0)))
    assert names[:6] == [
        "kernel_shape", "kernel", "bias", "in_features", "out_features", "kernel_size"
    ]
    assert nnx.Conv(2, 3, 3, rngs=nnx.Rngs(0)).kernel_size == (3,)


def test_conv_transpose_creates_its_params_last():
    layer = nnx.ConvTranspose(2, 3, [3], transpose_kernel=True, rngs=nnx.Rngs(0))
    names = _public(layer)
    assert names[0] == "kernel_size" and names[-3:] == ["kernel_shape", "kernel", "bias"]
    assert layer.kernel_size == (3,) and layer.kernel_shape == (3, 3, 2)


def test_attention_keeps_head_dim_after_the_settings():
    names = _public(nnx.MultiHeadAttention(2, 4, decode=False, rngs=nnx.Rngs(0)))
    assert names.index("head_dim") == names.index("out_dot_general_cls") + 1
    assert names.index("head_dim") + 1 == names.index("query")


@pytest.mark.parametrize("cell", [nnx.LSTMCell, nnx.OptimizedLSTMCell, nnx.GRUCell])
def test_gated_cells_keep_carry_init_last(cell):
    assert _public(cell(2, 3, rngs=nnx.Rngs(0)))[-1] == "carry_init"


def test_rnn_state_axes_is_the_carry_default_and_rngs_come_before_it():
    rnn = nnx.RNN(nnx.LSTMCell(2, 3, rngs=nnx.Rngs(0)))
    assert _public(rnn)[-3:] == ["rngs", "state_axes", "broadcast_rngs"]
    assert rnn.state_axes == nnx.StateAxes({...: nnx.Carry})
    # the default given explicitly is accepted too; anything else is refused clearly
    nnx.RNN(nnx.LSTMCell(2, 3, rngs=nnx.Rngs(0)), state_axes={...: nnx.Carry})
    with pytest.raises(NotImplementedError, match="state_axes"):
        nnx.RNN(nnx.LSTMCell(2, 3, rngs=nnx.Rngs(0)), state_axes={nnx.Param: None, ...: 0})
    assert rnn(jnp.ones((1, 4, 2))).shape == (1, 4, 3)


def test_group_norm_keeps_feature_axis_not_num_features():
    gn = nnx.GroupNorm(4, num_groups=None, group_size=2, rngs=nnx.Rngs(0))
    assert _public(gn)[:5] == ["feature_axis", "num_groups", "group_size", "scale", "bias"]
    assert gn.feature_axis == -1 and (gn.num_groups, gn.group_size) == (2, 2)
    assert not hasattr(gn, "num_features")
    assert gn(jnp.ones((1, 3, 4))).shape == (1, 3, 4)


def test_embed_dtype_defaults_to_the_tables_numpy_dtype():
    embed = nnx.Embed(4, 3, param_dtype=jnp.float16, rngs=nnx.Rngs(0))
    assert embed.dtype == np.dtype("float16") and isinstance(embed.dtype, np.dtype)
    assert nnx.Embed(4, 3, dtype=jnp.bfloat16, rngs=nnx.Rngs(0)).dtype is jnp.bfloat16


def test_sequences_are_kept_as_given():
    drop = nnx.Dropout(0.5, broadcast_dims=[0], rngs=nnx.Rngs(0))
    assert drop.broadcast_dims == [0]
    y = np.asarray(drop(jnp.ones((2, 8))))
    np.testing.assert_array_equal(y[0], y[1])  # one mask shared along axis 0
    einsum = nnx.Einsum("ab,bc->ac", [2, 3], [3], rngs=nnx.Rngs(0))
    assert einsum.kernel_shape == [2, 3] and einsum.bias_shape == [3]
    assert einsum(jnp.ones((1, 2))).shape == (1, 3)


def test_weight_norm_scales_are_plain_arrays_and_draw_no_key():
    rngs = nnx.Rngs(0)
    wn = nnx.WeightNorm(nnx.Linear(2, 3, rngs=rngs), rngs=rngs)
    assert rngs.params.count[...] == 2  # the Linear's kernel and bias only
    scale = wn.scales[("kernel",)]
    assert not isinstance(scale, nnx.Variable) and scale.shape == (3,)
    assert "scales" not in nnx.state(wn, nnx.Param)
    assert "scales" in nnx.state(wn)
    assert wn.scale_init is nnx.initializers.ones
    assert wn.promote_dtype is nnx.nn.dtypes.promote_dtype
    assert nnx.WeightNorm(nnx.Linear(2, 3, rngs=rngs), use_scale=False, rngs=rngs).scales is None
    with pytest.raises(TypeError, match="deterministic init"):
        nnx.WeightNorm(
            nnx.Linear(2, 3, rngs=rngs), scale_init=nnx.initializers.normal(), rngs=rngs
        )
