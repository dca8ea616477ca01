"""The package metadata tells the truth: license, changelog, extras, the jax minimum."""

from __future__ import annotations

import pathlib
import re
import tomllib

import flaxen

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def test_license_file_and_spdx_id_agree():
    assert PROJECT["license"] == "Apache-2.0"
    assert "LICENSE" in PROJECT["license-files"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text


def test_changelog_opens_with_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[?([0-9][^\]\s]*)\]?", text, flags=re.M)
    assert versions, "CHANGELOG.md has no version sections"
    assert versions[0] == flaxen.__version__


def test_users_extras_have_ranges_and_only_dev_pins_exactly():
    extras = PROJECT["optional-dependencies"]
    pinned = {name: [r for r in reqs if "==" in r] for name, reqs in extras.items()
              if name != "dev"}
    assert not any(pinned.values()), pinned
    assert any("==" in r for r in extras["dev"])  # the test suite's exact versions


def test_jax_minimum_is_the_one_the_changelog_reports():
    (jax_req,) = [r for r in PROJECT["dependencies"] if re.match(r"jax\b", r)]
    minimum = re.fullmatch(r"jax>=([0-9.]+)", jax_req).group(1)
    assert f"jax {minimum}" in (ROOT / "CHANGELOG.md").read_text()


def test_classifiers_and_typing_marker():
    classifiers = PROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert f"Programming Language :: Python :: {PROJECT['requires-python'][2:]}" in classifiers
    assert (ROOT / "flaxen" / "py.typed").exists()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["flaxen"]
