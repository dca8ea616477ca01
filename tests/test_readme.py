"""The README's code blocks run as written (they are the first code a user copies)."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index):
    source = BLOCKS[index]
    if "torch" in source:
        pytest.importorskip("torch")
    namespace: dict = {"__name__": f"readme_block_{index}"}
    exec(compile(source, f"README.md[block {index}]", "exec"), namespace)  # noqa: S102
