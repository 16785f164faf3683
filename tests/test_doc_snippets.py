"""Every Python block of README.md and docs/*.md runs as written (collected with Sybil).

A block that loads MovieLens 100K (``Dataset.load_builtin``, ``load_dataset``, ``load_ratings``)
gets a seeded sample of 1,200 of its ratings instead (a fit on all of them runs early stopping's search of
settings; the folds of a 3-fold cross-validation, 800 ratings, do not: 1.5 instead of 4 s a fit), so the
suite stays fast; without the data files
($MOGP_DATA) it gets seeded synthetic ratings with string ids, like MovieLens'. Blocks run in
a temporary folder (files they write land there) with a non-interactive matplotlib backend.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mogp_surprise.datasets
from mogp_surprise.datasets import load_ratings, make_synthetic_ratings, to_surprise_dataset

sybil = pytest.importorskip("sybil", reason="sybil is a test dependency (pip install .[test])")
from sybil.parsers.markdown import PythonCodeBlockParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _examples(path: Path) -> list:
    return list(sybil.Sybil(parsers=[PythonCodeBlockParser()]).parse(path))


WITH_CODE = [p for p in DOCUMENTS if _examples(p)]


def _small_ratings(name: str = "ml-100k", *args, **kwargs) -> pd.DataFrame:
    """A seeded sample of 1,200 of the real ratings, or seeded synthetic ones with MovieLens-like str ids
    ("1", "2", ...) without the files."""
    try:
        df = load_ratings(name, *args, **kwargs)
    except (FileNotFoundError, OSError):
        df = make_synthetic_ratings(n_users=300, n_items=400, n_ratings=1_200, random_state=0)
        df = df.assign(user=df["user"].str[1:], item=df["item"].str[1:])  # "u12" -> "12", as MovieLens
        # every item id the docs name ("121", ...) rated at least once, as in MovieLens: one more rating each
        unrated = sorted(set(map(str, range(1, 401))) - set(df["item"]), key=int)
        extra = df.sample(n=len(unrated), replace=True, random_state=1).assign(item=unrated)
        return pd.concat([df, extra], ignore_index=True).drop_duplicates(["user", "item"])
    return df.sample(n=1_200, random_state=0).reset_index(drop=True)


def _small_dataset(name: str = "ml-100k", *args, **kwargs):
    return to_surprise_dataset(_small_ratings(name, *args, **kwargs)[["user", "item", "rating"]])


@pytest.fixture
def small_movielens(monkeypatch, tmp_path):
    import matplotlib
    import surprise

    matplotlib.use("Agg")
    monkeypatch.setattr(mogp_surprise.datasets, "load_ratings", _small_ratings)
    monkeypatch.setattr(mogp_surprise.datasets, "load_dataset", _small_dataset)
    monkeypatch.setattr(surprise.Dataset, "load_builtin",
                        classmethod(lambda cls, name="ml-100k", prompt=True: _small_dataset(name)))
    monkeypatch.chdir(tmp_path)


def test_the_documents_hold_python_blocks() -> None:
    """Guards the test below against running nothing: README and the user guide show code."""
    names = {p.name for p in WITH_CODE}
    assert {"README.md", "user_guide.md", "evaluation.md"} <= names
    assert sum(len(_examples(p)) for p in WITH_CODE) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("path", WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run_as_written(path: Path, small_movielens) -> None:
    np.random.seed(0)
    for example in _examples(path):
        example.evaluate()
