"""examples/nnx_lm.py at a tiny size: it trains, evaluates, checkpoints, resumes, plots, samples."""

from __future__ import annotations

import importlib.util
import math
import os
import sys

import pytest

from flaxen.errors import RestoreMismatchError

pytest.importorskip("matplotlib")

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                       "nnx_lm.py")
TINY = ["--d-model", "32", "--layers", "1", "--heads", "2", "--context", "16",
        "--batch-size", "4", "--corpus-mb", "0.05", "--eval-every", "3", "--ckpt-every", "3",
        "--sample-length", "12", "--learning-rate", "1e-2", "--no-progress"]


@pytest.fixture(scope="module")
def lm():
    spec = importlib.util.spec_from_file_location("example_nnx_lm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


# The example saves single-file legacy checkpoints on purpose; their deprecation notice is
# incidental here.
@pytest.mark.filterwarnings("ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")
def test_trains_checkpoints_resumes_plots_and_samples(lm, tmp_path, capsys):
    workdir = str(tmp_path / "run")
    first = lm.main([*TINY, "--steps", "6", "--workdir", workdir, "--prompt", "import "])
    out = capsys.readouterr().out
    assert [step for step, _ in first["eval"]] == [3, 6]
    assert all(math.isfinite(loss) for _, loss in first["train"] + first["eval"])
    assert first["eval"][-1][1] < math.log(256)  # better than guessing among 256 bytes
    assert first["sample"].startswith("import ") and len(first["sample"].encode()) >= 12
    assert os.path.isfile(first["plot"]) and os.path.getsize(first["plot"]) > 1000
    assert sorted(os.listdir(first["checkpoints"])) == ["checkpoint_3", "checkpoint_6"]
    assert "Sampled text:" in out and "held-out loss" in out

    second = lm.main([*TINY, "--steps", "9", "--workdir", workdir])
    out = capsys.readouterr().out
    assert "Resumed from the checkpoint of step 6" in out
    # The history comes back from the checkpoint and goes on from there.
    assert [step for step, _ in second["eval"]] == [3, 6, 9]
    assert [loss for _, loss in second["eval"][:2]] == pytest.approx(
        [loss for _, loss in first["eval"]], rel=1e-6)
    assert sorted(os.listdir(second["checkpoints"])) == ["checkpoint_6", "checkpoint_9"]

    # Resuming with another model size is refused, naming what differs.
    with pytest.raises(RestoreMismatchError, match="/blocks/0/up/kernel: shape"):
        lm.main([*TINY, "--d-model", "48", "--steps", "12", "--workdir", workdir])


def test_batches_depend_only_on_the_step(lm):
    data = lm.load_corpus(4096)
    a = lm.batch_at(data, 7, 2, 8, seed=0)
    assert a.shape == (2, 9) and (a == lm.batch_at(data, 7, 2, 8, seed=0)).all()
    assert not (a == lm.batch_at(data, 8, 2, 8, seed=0)).all()


def test_corpus_is_the_standard_library(lm):
    data = lm.load_corpus(10_000)
    assert len(data) == 10_000
    assert b"import" in data.tobytes()


def test_help_lists_the_flags(lm, capsys):
    with pytest.raises(SystemExit) as info:
        lm.parse_args(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--d-model", "--layers", "--heads", "--context", "--steps", "--batch-size",
                 "--ckpt-every", "--workdir", "--prompt", "--temperature"):
        assert flag in text


def test_bad_sizes_are_refused_with_the_flag_named(lm, capsys):
    with pytest.raises(SystemExit):
        lm.parse_args(["--d-model", "30", "--heads", "4"])
    assert "--d-model (30) must be a multiple of --heads (4)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        lm.parse_args(["--steps", "0"])
    assert "--steps must be >= 1" in capsys.readouterr().err
