"""Runs the example scripts quickly: the `make demo` CNN (1-2 tiny epochs) and linear regression."""

import importlib.util
import os

import jax
import numpy as np
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


# The digits demo saves single-file legacy checkpoints on purpose; their deprecation notice
# is incidental to these tests.
legacy_notice = pytest.mark.filterwarnings(
    "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")


@pytest.fixture
def restore_flags():
    orbax = config.flax_use_orbax_checkpointing
    partitionable = jax.config.jax_threefry_partitionable
    yield
    config.update("flax_use_orbax_checkpointing", orbax)
    jax.config.update("jax_threefry_partitionable", partitionable)


@legacy_notice
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


@legacy_notice
def test_digits_demo_log_has_one_line_per_epoch_with_epoch_means(tmp_path, capsys,
                                                                 restore_flags):
    demo = _load("digits_cnn")
    workdir = str(tmp_path / "run")
    demo.main(["--epochs", "2", "--batch-size", "128", "--workdir", workdir])
    out = capsys.readouterr().out
    # Not a terminal: no progress bar re-printed into the log, one line per epoch.
    epoch_lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in epoch_lines] == ["1", "2"], out
    assert "━" not in out  # no progress bar drawn
    # The logged training accuracy is the epoch's mean over its minibatches.
    raw = demo.checkpoints.restore_checkpoint(os.path.join(workdir, "checkpoints"), None)
    logged = float(epoch_lines[-1].split()[6])
    assert logged == pytest.approx(float(raw["history"]["train_accuracy"][-1]), abs=1e-4)


def test_digits_train_epoch_reports_means_not_the_last_batch(restore_flags):
    demo = _load("digits_cnn")
    (x, y), _ = demo.load_digits()
    state = demo.create_state(jax.random.PRNGKey(0), [(0, 2e-3, 100)])
    seen = []

    class Recorder:
        def update(self, task, **fields):
            seen.append(fields)

    perm = np.arange(len(y))
    state, loss, acc = demo.train_epoch(state, x, y, perm, 64, 9, Recorder(), 0)
    # The running means reported along the way end at the epoch's mean.
    assert seen[-1]["completed"] == 9
    assert seen[-1]["loss"] == pytest.approx(loss) and seen[-1]["acc"] == pytest.approx(acc)
    assert 0.0 <= acc <= 1.0 and int(state.step) == 9


@legacy_notice
def test_digits_resume_with_other_epochs_replans_the_schedule(tmp_path, capsys,
                                                              restore_flags):
    demo = _load("digits_cnn")
    workdir = str(tmp_path / "run")
    demo.main(["--epochs", "2", "--batch-size", "256", "--workdir", workdir])
    capsys.readouterr()
    demo.main(["--epochs", "3", "--batch-size", "256", "--workdir", workdir])
    out = capsys.readouterr().out
    assert "--epochs changed from 2 to 3: the learning rate goes on from 0.0005" in out, out
    assert "it does not restart at the peak 0.002" in out
    raw = demo.checkpoints.restore_checkpoint(os.path.join(workdir, "checkpoints"), None)
    segments = np.asarray(raw["schedule"])
    steps = 1437 // 256
    # The 2-epoch plan had decayed to 0; the rest follows a 3-epoch plan from its value at
    # step 2 * steps (a quarter of the peak), down to 0 over the last epoch.
    assert segments.shape == (2, 3)
    assert segments[1][0] == 2 * steps and segments[1][2] == steps
    assert segments[1][1] == pytest.approx(0.25 * 2e-3, rel=1e-4)
    schedule = demo.make_schedule(segments)
    assert float(schedule(2 * steps + 1)) < float(schedule(2 * steps)) <= 0.25 * 2e-3 + 1e-9
    assert float(schedule(3 * steps)) == pytest.approx(0.0, abs=1e-9)
    # Same --epochs again: the plan stands, nothing to train, no schedule message.
    demo.main(["--epochs", "3", "--batch-size", "256", "--workdir", workdir])
    out = capsys.readouterr().out
    assert "--epochs changed" not in out and "nothing to train" in out


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
