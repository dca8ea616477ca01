"""NNX objects (and Linen Modules) render as structured objects in treescope, imported lazily."""

import subprocess
import sys

import jax.numpy as jnp
import pytest

from flaxen.experimental import nnx

treescope = pytest.importorskip("treescope")


def test_module_variables_and_state_render_structurally():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    text = treescope.render_to_text(model)
    assert text.startswith("Linear(") and "kernel=Param(" in text and "in_features=2" in text
    assert "object at 0x" not in text
    state_text = treescope.render_to_text(nnx.state(model))
    assert state_text.startswith("State({") and "'kernel': VariableState(" in state_text
    assert "type=Param" in state_text
    var = nnx.Param(jnp.ones(2), sharding=("model",))
    var_text = treescope.render_to_text(var)
    assert var_text.startswith("Param(") and "sharding=('model',)" in var_text


def test_linen_module_renders_with_its_fields():
    import flaxen.linen as nn

    text = treescope.render_to_text(nn.Dense(3))
    assert text.startswith("Dense(") and "features=3" in text


def test_flaxen_does_not_import_treescope():
    code = "import sys, flaxen, flaxen.nnx, flaxen.linen; print('treescope' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "False"
