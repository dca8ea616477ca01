"""Every documentation page's code runs, and shown output is what the code prints."""

from __future__ import annotations

import pytest

from tests.docs import pages

PAGES = pages.pages()
# Pages that save in the legacy format on purpose: its deprecation notice is incidental to
# them (asserted in tests/test_deprecation_warnings.py).
LEGACY_CHECKPOINT_PAGES = {"checkpoints.md", "migrating.md"}
legacy_notice = pytest.mark.filterwarnings(
    "ignore:Flax Checkpointing will soon be deprecated:DeprecationWarning")


def _name(path):
    return path.relative_to(pages.DOCS).as_posix()


def test_the_site_has_its_pages():
    names = {p.relative_to(pages.DOCS).as_posix() for p in PAGES}
    for page in ("index.md", "quickstart.md", "migrating.md", "torch_import.md",
                 "checkpoints.md", "errors.md", "performance.md", "nnx_lm.md", "changelog.md",
                 "api/index.md"):
        assert page in names


@pytest.mark.parametrize(
    "path", [pytest.param(p, marks=legacy_notice) if _name(p) in LEGACY_CHECKPOINT_PAGES else p
             for p in PAGES], ids=_name)
def test_page_code_runs(path, tmp_path):
    text = path.read_text(encoding="utf-8")
    if "torch" in text and any("import torch" in s.code.text for s in pages.steps(text)):
        pytest.importorskip("torch")
    pages.run_page(path, tmp_path)


def test_runner_shares_one_namespace_and_checks_output(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "p.md"
    page.parent.mkdir()
    page.write_text("```python\nx = 2\n```\n\ntext\n\n```python\nprint(x * 3)\n```\n"
                    "```output\n6\n```\n", encoding="utf-8")
    monkeypatch.setattr(pages, "DOCS", page.parent)
    assert pages.run_page(page, tmp_path) == 2


def test_runner_reports_a_wrong_output_with_its_line(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "p.md"
    page.parent.mkdir()
    page.write_text("# t\n\n```python\nprint('found')\n```\n\n```output\nexpected\n```\n",
                    encoding="utf-8")
    monkeypatch.setattr(pages, "DOCS", page.parent)
    with pytest.raises(AssertionError, match=r"p.md:7: the block at line 3 printed\nfound"):
        pages.run_page(page, tmp_path)


def test_runner_reports_an_error_at_the_page_line(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "p.md"
    page.parent.mkdir()
    page.write_text("# t\n\n```python\nx = 1\ny = undefined_name\n```\n", encoding="utf-8")
    monkeypatch.setattr(pages, "DOCS", page.parent)
    with pytest.raises(NameError) as info:
        pages.run_page(page, tmp_path)
    assert info.traceback[-1].lineno + 1 == 5  # pytest's line numbers count from 0


def test_output_block_without_code_is_rejected():
    with pytest.raises(ValueError, match="must follow a python block"):
        pages.steps("```output\n1\n```\n")


def test_non_python_fences_are_not_run():
    text = "```bash\nrm -rf /\n```\n\n````{note}\nx\n````\n\n```python\npass\n```\n"
    assert [s.code.text for s in pages.steps(text)] == ["pass\n"]
