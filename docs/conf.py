"""Sphinx configuration: the Markdown pages of docs/ plus an API reference from the docstrings.

Build: ``sphinx-build -W -b html docs docs/_build/html`` (tests/test_docs_build.py does this).
"""
from __future__ import annotations

import mogp_surprise

project = "mogp_surprise"
author = "mogp_surprise developers"
release = mogp_surprise.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax", "myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"
myst_heading_anchors = 3
html_theme = "alabaster"
