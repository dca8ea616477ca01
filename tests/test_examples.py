"""Runs the example scripts quickly: the `make demo` CNN (1-2 tiny epochs) and linear regression."""

import importlib.util
import os

import jax
import pytest

from flaxen import config

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")


def _load(name):
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def restore_flags():
    orbax = config.flax_use_orbax_checkpointing
    partitionable = jax.config.jax_threefry_partitionable
    yield
    config.update("flax_use_orbax_checkpointing", orbax)
    jax.config.update("jax_threefry_partitionable", partitionable)


def test_digits_demo_trains_checkpoints_plots_and_resumes(tmp_path, capsys, restore_flags):
    demo = _load("digits_cnn")
    workdir = str(tmp_path / "run")
    acc = demo.main(["--epochs", "1", "--batch-size", "64", "--workdir", workdir])
    out = capsys.readouterr().out
    assert acc > 0.5  # one epoch of 22 steps already learns a lot
    assert "Final held-out accuracy" in out and os.path.join(workdir, "curves.png") in out
    assert os.path.getsize(os.path.join(workdir, "curves.png")) > 0
    assert os.listdir(os.path.join(workdir, "checkpoints")) == ["checkpoint_1"]

    acc2 = demo.main(["--epochs", "2", "--batch-size", "64", "--workdir", workdir])
    out = capsys.readouterr().out
    assert "Resumed from the checkpoint of epoch 1" in out and "after 2 epochs" in out
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["checkpoint_1",
                                                                       "checkpoint_2"]
    assert acc2 >= acc - 0.05


def test_digits_demo_help_and_bad_flags(capsys):
    demo = _load("digits_cnn")
    with pytest.raises(SystemExit) as e:
        demo.parse_args(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--epochs", "--batch-size", "--learning-rate", "--workdir"):
        assert flag in out
    with pytest.raises(SystemExit):
        demo.parse_args(["--epochs", "0"])


def test_linear_regression_reproduces_the_guide(capsys, restore_flags):
    result = _load("linear_regression").main(["--steps", "101"])
    out = capsys.readouterr().out
    assert "parameter shapes: {'params': {'bias': (5,), 'kernel': (10, 5)}}" in out
    # Values printed in the Flax Basics guide (L1080-L1105, L1160-L1180 of the spec).
    assert result["true_loss"] == pytest.approx(0.023639796, rel=1e-4)
    assert result["sgd_losses"][0] == pytest.approx(35.343872, rel=1e-4)
    assert result["sgd_losses"][-1] == pytest.approx(0.011578696, rel=1e-4)
    assert result["adam_losses"][-1] == pytest.approx(0.011585519, rel=1e-4)
    assert result["roundtrip_ok"]
