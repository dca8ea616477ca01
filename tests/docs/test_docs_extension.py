"""The site's Sphinx extension (docs/_ext/flaxen_docs.py): member summaries and error sources."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

from tests.docs import pages


@pytest.fixture(scope="module")
def ext():
    path = pages.DOCS / "_ext" / "flaxen_docs.py"
    spec = importlib.util.spec_from_file_location("flaxen_docs_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_summary_is_the_first_sentence_and_a_full_stop_in_a_literal_does_not_end_it(ext):
    def f():
        """Weights ``softmax(q . k)`` per head. More text.

        Details.
        """

    assert ext.summary_line(f) == "Weights ``softmax(q . k)`` per head."


def test_summary_drops_markup_the_cut_left_unbalanced(ext):
    def g():
        """Calls ``fn(*args, **kwargs)`` with *emphasis."""

    assert ext.summary_line(g) == "Calls ``fn(*args, **kwargs)`` with \\*emphasis."

    def h():
        """Opens ``a literal and. never closes it"""

    assert ext.summary_line(h) == "Opens a literal and. never closes it"


def test_type_aliases_are_summarised_as_aliases(ext):
    assert ext.summary_line(dict[str, Any]) == "Type alias: ``dict[str, typing.Any]``."


def test_public_members_prefers_all(ext):
    from flaxen import struct

    assert ext.public_members(struct) == sorted(struct.__all__, key=lambda n: (n.lower(), n))


def test_errors_are_traced_to_the_public_modules_that_raise_them(ext):
    found = ext.raised_from(["ScopeParamShapeError", "AssignSubModuleError", "NNXError"])
    assert "flaxen.core.scope" in found["ScopeParamShapeError"]
    assert found["AssignSubModuleError"] == ["flaxen.linen"]  # private linen files -> flaxen.linen
    assert all("._" not in m and not m.startswith("_") for ms in found.values() for m in ms)
    # NNXError is only subclassed (`class X(NNXError)`), never raised itself.
    assert found["NNXError"] == []
