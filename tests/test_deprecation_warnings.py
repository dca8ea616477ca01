"""The deprecated APIs warn as Flax's do (DeprecationWarning, one per call or construction),
with the phrases users filter on; flaxen itself never triggers them."""

import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as nn
from flaxen import config, jax_utils, traverse_util
from flaxen.training import checkpoints


def test_self_attention_warns_on_every_call():
    layer = nn.SelfAttention(num_heads=1)
    x = jnp.ones((1, 2, 2))
    with pytest.warns(DeprecationWarning, match="SelfAttention will be deprecated soon"):
        variables = layer.init(jax.random.key(0), x)
    with pytest.warns(DeprecationWarning, match="MultiHeadDotProductAttention"):
        layer.apply(variables, x)


def test_every_traversal_construction_warns():
    with pytest.warns(DeprecationWarning, match="Traversal` will be deprecated") as record:
        traverse_util.ModelParamTraversal(lambda path, value: True)
    assert len(record) == 1
    with pytest.warns(DeprecationWarning) as record:
        traverse_util.t_identity["a"].each()
    assert len(record) == 4  # TraverseItem, its compose, TraverseEach, its compose


def test_pmean_warns_and_averages():
    with pytest.warns(DeprecationWarning, match="use jax.lax.pmean instead"):
        out = jax.pmap(lambda x: jax_utils.pmean(x, "i"), axis_name="i")(jnp.ones((1, 2)))
    np.testing.assert_array_equal(out, np.ones((1, 2)))


@pytest.mark.parametrize("save", [checkpoints.save_checkpoint,
                                  checkpoints.save_checkpoint_multiprocess])
def test_legacy_checkpoint_saves_warn(save):
    with config.temp_flip_flag("use_orbax_checkpointing", False):
        with pytest.warns(DeprecationWarning, match="Flax Checkpointing will soon be deprecated"):
            save(tempfile.mkdtemp(), {"w": np.ones(2)}, step=1)


def test_importing_and_orbax_saves_do_not_warn():
    code = (
        "import warnings, tempfile, numpy as np\n"
        "warnings.filterwarnings('error', category=DeprecationWarning, module='flaxen')\n"
        "import flaxen.traverse_util, flaxen.jax_utils, flaxen.linen\n"
        "from flaxen.training import checkpoints\n"
        "checkpoints.save_checkpoint(tempfile.mkdtemp(), {'w': np.ones(2)}, step=1)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
