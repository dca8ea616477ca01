"""`make docs` in a test: the site builds with warnings as errors, and its pages are there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flaxen import errors
from tests.docs import pages


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    # -E: no cached environment, so this is the build a fresh clone gets.
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
         str(pages.DOCS), str(out)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_site_builds_without_warnings_and_has_every_page(site):
    for page in pages.pages():
        html = site / page.relative_to(pages.DOCS).with_suffix(".html")
        assert html.is_file(), html


def test_errors_page_catalogues_every_error_class(site):
    text = (site / "errors.html").read_text(encoding="utf-8")
    for name in errors.__all__:
        assert f'id="{name.lower()}"' in text, name
    # A message is shown with placeholders, fix included.
    assert "Pass overwrite=True to replace it" in text


def test_api_reference_lists_public_members(site):
    text = (site / "api" / "linen.html").read_text(encoding="utf-8")
    assert "MultiHeadDotProductAttention" in text and "flaxen.linen.initializers" in text
    text = (site / "api" / "nnx.html").read_text(encoding="utf-8")
    assert "Optimizer" in text


def test_readme_sections_are_included_whole_and_alone(site):
    performance = (site / "performance.html").read_text(encoding="utf-8")
    assert "Linen MLP-100" in performance  # README's speed table
    assert "builds the documentation site" not in performance  # the next README section
    migrating = (site / "migrating.html").read_text(encoding="utf-8")
    assert "deliberately differs" in migrating  # README's compatibility notes
    assert "What is implemented" not in migrating


def test_pages_link_error_classes_to_the_catalogue(site):
    text = (site / "checkpoints.html").read_text(encoding="utf-8")
    assert 'href="errors.html#flaxen.errors.RestoreMismatchError"' in text


def test_every_internal_link_and_anchor_exists(site):
    import re
    from urllib.parse import unquote, urlsplit

    ids: dict = {}
    broken = []
    pages_html = sorted(site.rglob("*.html"))
    for page in pages_html:
        ids[page] = set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))
    for page in pages_html:
        for href in re.findall(r'\bhref="([^"]+)"', page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", href):  # http:, https:, mailto:
                continue
            if href.startswith(("#svg-", "#furo-")):  # the theme's icon sprite and skip link
                continue
            parts = urlsplit(href)  # drops the ?v=... cache busters of static files
            path, anchor = unquote(parts.path), unquote(parts.fragment)
            target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.name}: {href}")
            elif anchor and target.suffix == ".html" and anchor not in ids[target]:
                broken.append(f"{page.name}: {href} (no such anchor)")
    assert not broken, broken[:20]


def test_changelog_page_shows_the_repository_changelog(site):
    import flaxen

    text = (site / "changelog.html").read_text(encoding="utf-8")
    assert "Keep a Changelog" in text and flaxen.__version__ in text
