"""flaxen ships type information: a user's mypy run checks calls into flaxen.

The package is built into a wheel from a copy of the sources (as ``pip install .`` does), the
wheel is unpacked into a folder that plays the user's site-packages, and mypy checks a short
user script with two mistakes against it. Without ``flaxen/py.typed`` in the wheel mypy skips
flaxen (``import-untyped``) and both mistakes pass unnoticed.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytest.importorskip("mypy")
pytest.importorskip("setuptools")

USER_SCRIPT = """\
from flaxen import serialization
from flaxen.training import checkpoints

blob: str = serialization.to_bytes({"w": [1.0, 2.0]})
path: int = checkpoints.save_checkpoint("ckpts", {"w": 1}, step=0)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    # A copy keeps the build's egg-info and build/ folders out of the shared checkout.
    shutil.copytree(ROOT / "flaxen", src / "flaxen",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         str(src), "-w", str(work / "dist")],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    (whl,) = (work / "dist").glob("flaxen-*.whl")
    return whl


def _mypy(site: pathlib.Path, script_dir: pathlib.Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
         "--config-file", os.devnull, "script.py"],
        cwd=script_dir, env=env, capture_output=True, text=True,
    )
    return out.stdout + out.stderr


def test_wheel_ships_py_typed(wheel):
    with zipfile.ZipFile(wheel) as zf:
        assert "flaxen/py.typed" in zf.namelist()


def test_user_mistakes_are_caught_against_the_installed_package(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    user = tmp_path / "user"
    user.mkdir()
    (user / "script.py").write_text(USER_SCRIPT)

    report = _mypy(site, user)
    assert "import-untyped" not in report, report
    assert 'expression has type "bytes", variable has type "str"' in report, report
    assert 'expression has type "str", variable has type "int"' in report, report
    assert "Found 2 errors in 1 file" in report, report

    # The same package without its marker: mypy no longer looks inside, so nothing is caught.
    (site / "flaxen" / "py.typed").unlink()
    report = _mypy(site, user)
    assert "import-untyped" in report, report
    assert "variable has type" not in report, report
