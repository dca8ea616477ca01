"""Sphinx configuration of flaxen's documentation site (``make docs``).

Pages are MyST Markdown. The API reference is generated from the public modules: autodoc
renders each module's docstring, and the local ``flaxen_docs`` extension (``docs/_ext``) a
table of its members and the errors catalogue from ``flaxen.errors``. The build runs offline
with warnings as errors.
"""

from __future__ import annotations

import os
import pathlib
import sys

_HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE / "_ext"))
sys.path.insert(0, str(_HERE.parent))
# The API pages import flaxen (and through it JAX): keep that on the CPU, quiet and quick.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flaxen  # noqa: E402

project = "flaxen"
author = "the flaxen authors"
copyright = "2026, the flaxen authors"
release = flaxen.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "flaxen_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# _include holds fragments pulled into pages (the generated benchmark table), not pages.
exclude_patterns = ["_build", "_include", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True

html_theme = "furo"
html_title = f"flaxen {release}"
html_static_path = ["_static"]
html_css_files = ["flaxen.css"]
