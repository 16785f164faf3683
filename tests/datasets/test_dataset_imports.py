"""The datasets layer imports only numpy and pandas (conventions: layers); its public names work."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import mogp_surprise.datasets as datasets


def test_import_does_not_pull_surprise_or_torch():
    code = ("import sys, mogp_surprise.datasets; "
            "bad = [m for m in ('surprise', 'torch', 'sklearn', 'matplotlib') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_api():
    assert set(datasets.__all__) >= {"DATASETS", "find_data_dir", "load_ratings", "load_dataset",
                                     "to_surprise_dataset", "describe_ratings",
                                     "make_synthetic_ratings"}
    missing = [name for name in datasets.__all__ if not hasattr(datasets, name)]
    assert not missing, missing  # ``from mogp_surprise.datasets import *`` would fail on them


def test_registry_and_data_folders(tmp_path, monkeypatch, isolated_env):
    """DATASETS, DatasetSpec, FileLayout, DATA_ENV, find_data_dir, surprise_cache_dir."""
    assert datasets.DATA_ENV == "MOGP_DATA"
    scales = {name: spec.rating_scale for name, spec in datasets.DATASETS.items()}
    assert scales == {"ml-100k": (1.0, 5.0), "ml-1m": (1.0, 5.0), "ml-10m": (0.5, 5.0),
                      "jester": (-10.0, 10.0)}
    for name, spec in datasets.DATASETS.items():
        assert type(spec) is datasets.DatasetSpec and spec.name == name and spec.url.startswith("https://")
        assert spec.layouts
        assert all(type(lay) is datasets.FileLayout and callable(lay.parser) for lay in spec.layouts)
    assert [lay.path for lay in datasets.DATASETS["ml-100k"].layouts][:2] == ["ml-100k/u.data", "u.data"]
    assert datasets.DATASETS["ml-10m"].surprise_layout is None  # Surprise cannot download ML-10M
    assert datasets.DATASETS["ml-1m"].surprise_layout.path == "ml-1m/ml-1m/ratings.dat"
    # an explicit folder wins over $MOGP_DATA; neither set: None (the autouse fixture cleared it)
    assert datasets.find_data_dir() is None
    monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path))
    assert datasets.find_data_dir() == tmp_path
    assert datasets.find_data_dir(tmp_path / "other") == tmp_path / "other"
    assert datasets.surprise_cache_dir() == isolated_env  # $SURPRISE_DATA_FOLDER, read at call time


def test_loaders_return_the_file_content(tmp_path, files):
    """load_ratings, describe_ratings, load_dataset, to_surprise_dataset and load_item_titles on a u.data."""
    files.u_data(tmp_path / "ml-100k" / "u.data")  # 4 ratings 3, 3, 1, 5 by 4 users of 4 items
    titles = "242|Kolya (1996)|24-Jan-1997\n51|Legends (1994)|01-Jan-1994\n"
    (tmp_path / "ml-100k" / "u.item").write_text(titles, encoding="latin-1")
    df = datasets.load_ratings("ml-100k", tmp_path)
    assert list(df.columns) == ["user", "item", "rating", "timestamp"]
    assert df["rating"].dtype == np.float64 and df["timestamp"].dtype == np.int64
    assert list(df.itertuples(index=False, name=None)) == files.rows  # str ids, "007" keeps its zeros
    assert datasets.describe_ratings(df) == {
        "n_ratings": 4, "n_users": 4, "n_items": 4, "density": 0.25,
        "mean": 3.0, "std": pytest.approx(np.sqrt(2.0)), "scale": (1.0, 5.0)}  # population std of 3 3 1 5
    data = datasets.load_dataset("ml-100k", tmp_path)
    assert [r[:3] for r in data.raw_ratings] == [r[:3] for r in files.rows]
    assert data.reader.rating_scale == (1.0, 5.0)  # the registry's scale
    inferred = datasets.to_surprise_dataset(df[df["rating"] >= 3])  # scale from the ratings: (3, 5)
    assert inferred.reader.rating_scale == (3.0, 5.0) and len(inferred.raw_ratings) == 3
    assert datasets.load_item_titles("ml-100k", tmp_path) == {"242": "Kolya (1996)", "51": "Legends (1994)"}
    assert datasets.load_item_titles("jester", tmp_path) is None  # Jester has no titles file


def test_make_synthetic_ratings_content():
    df = datasets.make_synthetic_ratings(n_users=30, n_items=20, n_ratings=200, noise_std=(0.3, 1.2),
                                         random_state=0)
    assert df.shape == (200, 5) and list(df.columns) == ["user", "item", "rating", "f_true", "noise_std"]
    assert all(df[c].dtype == np.float64 for c in ("rating", "f_true", "noise_std"))
    assert set(np.unique(df["rating"])) <= {1.0, 2.0, 3.0, 4.0, 5.0} and df["rating"].nunique() >= 4
    assert df["user"].str.fullmatch(r"u\d+").all() and df["user"].str[1:].astype(int).between(0, 29).all()
    assert df["item"].str.fullmatch(r"i\d+").all() and df["item"].str[1:].astype(int).between(0, 19).all()
    assert not df.duplicated(["user", "item"]).any()  # distinct pairs
    assert df["noise_std"].between(0.3, 1.2).all() and df["noise_std"].std() > 0.05  # heteroscedastic
    # the ratings follow the noise-free signal (rounded, clipped, noisy): correlated, not copies
    assert 0.5 < np.corrcoef(df["rating"], df["f_true"])[0, 1] < 1.0
    pd.testing.assert_frame_equal(df, datasets.make_synthetic_ratings(n_users=30, n_items=20, n_ratings=200,
                                                                      noise_std=(0.3, 1.2), random_state=0))
