"""What a newcomer meets before the code: packaging metadata, install instructions, messages, docs."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]


def test_license_metadata_uses_the_current_form():
    """An SPDX ``license`` string with the license file (the table form and license classifiers make
    setuptools print ~80 lines of deprecation warnings on every build)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "BSD-3-Clause"
    assert not any(c.startswith("License ::") for c in meta["project"].get("classifiers", []))
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77
               for r in meta["build-system"]["requires"])
    assert "BSD 3-Clause" in (ROOT / "LICENSE").read_text()


def test_readme_shows_the_cpu_build_of_pytorch():
    readme = (ROOT / "README.md").read_text()
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme


def test_missing_optional_packages_name_a_command_that_works_from_a_checkout(monkeypatch):
    import mogp_surprise.comparison.myfm as myfm_algo
    from mogp_surprise.evaluation import plot_qp

    monkeypatch.setattr(myfm_algo, "myfm_available", lambda: False)
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[myfm]'")):
        myfm_algo.MyFMBaseline().fit(None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.delitem(sys.modules, "matplotlib.pyplot", raising=False)
    curve = pd.DataFrame({"quantile": [0.5, 1.0], "rmse": [0.8, 0.9]})
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[plot]'")):
        plot_qp({"a model": curve})


def test_docs_are_written_for_users():
    """Only the labelled history page talks about issues, work sessions and missed targets."""
    pages = [ROOT / "README.md", *(p for p in (ROOT / "docs").glob("*.md") if p.name != "history.md")]
    for page in pages:
        text = page.read_text()
        for pattern in (r"\bissue #?\d+", r"\bsession\b", r"\bmissed\b", r"\bTODO\b"):
            assert not re.search(pattern, text, re.IGNORECASE), f"{page.name}: {pattern}"


def test_the_docs_build_suppresses_no_warnings():
    conf = (ROOT / "docs" / "conf.py").read_text()
    assert "suppress_warnings" not in conf and "nitpick_ignore" not in conf
