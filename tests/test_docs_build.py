"""The documentation site builds with Sphinx, warnings as errors (the docs are part of CI)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="sphinx is a test dependency (pip install .[test])")
    pytest.importorskip("myst_parser", reason="myst-parser is a test dependency (pip install .[test])")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", "html", str(DOCS),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    api = (tmp_path / "html" / "api.html").read_text()
    for name in ("predict_dist", "recommend", "n_inducing", "qp_curve", "make_synthetic_ratings"):
        assert name in api, f"{name} missing from the API reference"
    assert (tmp_path / "html" / "evaluation.html").exists()
