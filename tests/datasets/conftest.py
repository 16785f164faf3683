"""Fixtures for the dataset tests: an isolated environment, small rating files, the real data."""
from __future__ import annotations

import gzip
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

# Read before the autouse fixture below clears it for the other tests.
_MOGP_DATA = os.environ.get("MOGP_DATA", "").strip()
_REPO_ROOT = Path(__file__).resolve().parents[2]

# (user, item, rating, timestamp): string ids as Surprise reads them, one with leading zeros.
ROWS = [("196", "242", 3.0, 881250949), ("186", "302", 3.0, 891717742),
        ("22", "377", 1.0, 878887116), ("007", "51", 5.0, 880606923)]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """No MOGP_DATA, and a private, empty Surprise cache, unless a test sets them."""
    monkeypatch.delenv("MOGP_DATA", raising=False)
    cache = tmp_path_factory.mktemp("surprise_cache")
    monkeypatch.setenv("SURPRISE_DATA_FOLDER", str(cache))
    return cache


def write_u_data(path: Path, rows=ROWS) -> Path:
    """MovieLens 100K ``u.data``: tab-separated, no header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{u}\t{i}\t{r:g}\t{t}\n" for u, i, r, t in rows))
    return path


def write_ratings_dat(path: Path, rows=ROWS) -> Path:
    """MovieLens 1M/10M ``ratings.dat``: ``::`` separated, no header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{u}::{i}::{r:g}::{t}\n" for u, i, r, t in rows))
    return path


def write_ratings_csv_gz(path: Path, rows=ROWS) -> Path:
    """The shared-data layout: gzip CSV with header ``user,item,rating``, no timestamps."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as handle:
        handle.write("user,item,rating\n")
        handle.writelines(f"{u},{i},{r:g}\n" for u, i, r, _ in rows)
    return path


JESTER_ROWS = [("1", "5", 0.219), ("1", "7", -9.281), ("63978", "150", 10.0), ("2", "8", -10.0)]


def write_jester(path: Path, rows=JESTER_ROWS) -> Path:
    """Jester ``jester_ratings.dat`` as Surprise ships it: whitespace separated ``user item rating``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{u}\t\t{i}\t\t{r}\n" for u, i, r in rows))
    return path


@pytest.fixture
def real_data_dir():
    """Folder with the real MovieLens files: ``$MOGP_DATA`` or ``<repo>/../shared/data``."""
    candidates = ([Path(_MOGP_DATA).expanduser()] if _MOGP_DATA else []) + [
        _REPO_ROOT.parent / "shared" / "data"]

    def find(relative: str) -> Path:
        for root in candidates:
            if (root / relative).is_file():
                return root
        pytest.skip(f"MovieLens data not found: set MOGP_DATA=/path/to/data holding {relative} "
                    f"(looked in {', '.join(map(str, candidates))})")

    return find


@pytest.fixture
def files():
    """The file writers above and their rows, for tests (conftest modules are not importable)."""
    return SimpleNamespace(u_data=write_u_data, ratings_dat=write_ratings_dat,
                           csv_gz=write_ratings_csv_gz, jester=write_jester,
                           rows=ROWS, jester_rows=JESTER_ROWS)
