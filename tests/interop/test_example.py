"""examples/torch_import.py runs: both models convert, verify and fine-tune."""

import importlib.util
import os
import sys

import pytest

pytest.importorskip("torch")

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples", "torch_import.py")


def test_torch_import_example(capsys):
    spec = importlib.util.spec_from_file_location("example_torch_import", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the dataclass machinery looks the module up
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    result = module.main(["--steps", "2"])
    out = capsys.readouterr().out
    assert out.count("All compared outputs match.") == 2
    for name in ("cnn", "encoder"):
        assert result[name]["ok"]
        losses = result[name]["losses"]
        assert len(losses) == 2 and losses[-1] < losses[0]
