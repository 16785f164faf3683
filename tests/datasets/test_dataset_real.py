"""Tests on the real MovieLens files (``$MOGP_DATA`` or ``../shared/data``); skipped if absent."""
from __future__ import annotations

import hashlib

import pytest

from mogp_surprise.datasets import describe_ratings, load_dataset, load_ratings

pytestmark = pytest.mark.data

U_DATA_MD5 = "6e47046882bad158b0efbb84cd5cb987"


def _md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_ml100k(real_data_dir):
    from surprise import Dataset, Reader
    from surprise.builtin_datasets import BUILTIN_DATASETS

    root = real_data_dir("ml-100k/u.data")
    u_data = root / "ml-100k" / "u.data"
    assert _md5(u_data) == U_DATA_MD5
    df = load_ratings("ml-100k", root)
    summary = describe_ratings(df)
    assert (summary["n_ratings"], summary["n_users"], summary["n_items"]) == (100_000, 943, 1_682)
    assert list(df.columns) == ["user", "item", "rating", "timestamp"]
    # what Dataset.load_builtin('ml-100k') reads: the same file with the builtin reader
    builtin = Dataset.load_from_file(str(u_data), Reader(**BUILTIN_DATASETS["ml-100k"].reader_params))
    ours = load_dataset("ml-100k", root)
    assert [r[:3] for r in ours.raw_ratings] == [r[:3] for r in builtin.raw_ratings]
    assert _md5(u_data) == U_DATA_MD5  # loading never modifies the data


def test_ml100k_through_surprise_cache_layout(real_data_dir, isolated_env):
    root = real_data_dir("ml-100k/u.data")
    cached = isolated_env / "ml-100k" / "ml-100k"
    cached.mkdir(parents=True)
    (cached / "u.data").symlink_to(root / "ml-100k" / "u.data")  # a link, never a copy
    assert len(load_ratings("ml-100k")) == 100_000


def test_ml1m(real_data_dir):
    root = real_data_dir("ml-1m/ratings.csv.gz")
    df = load_ratings("ml-1m", root)
    summary = describe_ratings(df)
    assert summary["n_ratings"] == 1_000_209
    assert (summary["n_users"], summary["n_items"]) == (6_040, 3_706)
    assert summary["mean"] == pytest.approx(3.5816, abs=5e-5)
    assert summary["scale"] == (1.0, 5.0)
    assert isinstance(df["user"].iloc[0], str) and isinstance(df["item"].iloc[0], str)
