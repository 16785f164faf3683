"""Tests for mogp_surprise.datasets.synthetic.make_synthetic_ratings."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.datasets import make_synthetic_ratings, to_surprise_dataset

SMALL = dict(n_users=200, n_items=100, n_ratings=3000)


def test_seeded_reproducibility():
    a = make_synthetic_ratings(**SMALL, random_state=3)
    pd.testing.assert_frame_equal(a, make_synthetic_ratings(**SMALL, random_state=3))
    pd.testing.assert_frame_equal(
        a, make_synthetic_ratings(**SMALL, random_state=np.random.default_rng(3)))
    assert not a.equals(make_synthetic_ratings(**SMALL, random_state=4))


def test_columns_sizes_and_valid_unique_ids():
    df = make_synthetic_ratings(**SMALL, random_state=0)
    assert list(df.columns) == ["user", "item", "rating", "f_true", "noise_std"]
    assert len(df) == SMALL["n_ratings"]
    assert not df.duplicated(["user", "item"]).any()
    assert all(isinstance(u, str) for u in df["user"].head(50))
    users = df["user"].str[1:].astype(int)
    items = df["item"].str[1:].astype(int)
    assert df["user"].str[0].eq("u").all() and df["item"].str[0].eq("i").all()
    assert users.between(0, SMALL["n_users"] - 1).all()
    assert items.between(0, SMALL["n_items"] - 1).all()
    for column in ("rating", "f_true", "noise_std"):
        assert df[column].dtype == np.float64 and np.isfinite(df[column]).all()


def test_integer_ratings_on_scale():
    df = make_synthetic_ratings(**SMALL, rating_scale=(1, 5), random_state=0)
    assert set(df["rating"].unique()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert df["rating"].nunique() == 5  # the whole scale is used
    assert df["f_true"].between(1, 5).all()
    assert 2.8 < df["rating"].mean() < 4.0


def test_real_valued_scale():
    df = make_synthetic_ratings(**SMALL, rating_scale=(-10, 10), integer=False,
                                noise_std=(0.5, 3.0), random_state=1)
    assert df["rating"].between(-10, 10).all()
    assert (df["rating"] != np.round(df["rating"])).mean() > 0.9
    assert df["noise_std"].between(0.5, 3.0).all()
    inside = df["rating"].between(-9.99, 9.99)  # unclipped ratings: rating = f_true + noise
    z = (df["rating"] - df["f_true"])[inside] / df["noise_std"][inside]
    assert abs(z.mean()) < 0.1 and 0.9 < z.std() < 1.1


def test_noise_std_heteroscedastic_within_range():
    df = make_synthetic_ratings(**SMALL, noise_std=(0.3, 1.2), random_state=2)
    assert df["noise_std"].between(0.3, 1.2).all()
    assert df["noise_std"].std() > 0.1
    # varies per user and per item
    assert df.groupby("user")["noise_std"].mean().std() > 0.05
    assert df.groupby("item")["noise_std"].mean().std() > 0.05
    constant = make_synthetic_ratings(**SMALL, noise_std=0.5, random_state=2)
    np.testing.assert_allclose(constant["noise_std"], 0.5)


def test_popularity_skew():
    skewed = make_synthetic_ratings(**SMALL, popularity_skew=1.0, random_state=0)
    uniform = make_synthetic_ratings(**SMALL, popularity_skew=0.0, random_state=0)
    counts = skewed["item"].value_counts()
    assert counts.max() > 8 * counts.median()
    assert uniform["item"].value_counts().max() < 2 * uniform["item"].value_counts().median()


def test_nonlinearity_changes_the_signal():
    linear = make_synthetic_ratings(**SMALL, nonlinearity=0.0, random_state=5)
    nonlinear = make_synthetic_ratings(**SMALL, nonlinearity=3.0, random_state=5)
    assert (linear[["user", "item"]].values == nonlinear[["user", "item"]].values).all()
    assert not np.allclose(linear["f_true"], nonlinear["f_true"])


def test_dense_and_extreme_skew_cases():
    full = make_synthetic_ratings(n_users=30, n_items=20, n_ratings=600, random_state=0)
    assert len(full.drop_duplicates(["user", "item"])) == 600
    start = time.perf_counter()
    steep = make_synthetic_ratings(n_users=2000, n_items=500, n_ratings=200_000,
                                   popularity_skew=3.0, random_state=0)
    assert time.perf_counter() - start < 5.0
    assert not steep.duplicated(["user", "item"]).any()


def test_builds_a_surprise_dataset():
    df = make_synthetic_ratings(n_users=50, n_items=40, n_ratings=500, random_state=0)
    trainset = to_surprise_dataset(df, (1, 5)).build_full_trainset()
    assert trainset.n_ratings == 500 and trainset.rating_scale == (1, 5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_users=0), r"n_users must be an integer >= 1; got 0"),
    (dict(n_items=2.5), r"n_items must be an integer >= 1; got 2.5"),
    (dict(n_ratings=True), r"n_ratings must be an integer"),
    (dict(latent_dim=0), r"latent_dim must be an integer >= 1"),
    (dict(n_users=10, n_items=10, n_ratings=101), r"n_ratings must be <= n_users \* n_items = 100; got 101"),
    (dict(rating_scale=(5, 1)), r"rating_scale must be .*low < high; got \(5, 1\)"),
    (dict(rating_scale=(1,)), r"rating_scale must be a pair"),
    (dict(rating_scale=(0.5, 5)), r"integer bounds when integer=True"),
    (dict(integer="no"), r"integer must be a bool"),
    (dict(noise_std=(1.0, 0.5)), r"noise_std must be .*0 <= low <= high; got \(1.0, 0.5\)"),
    (dict(noise_std=(-0.1, 0.5)), r"noise_std must be"),
    (dict(noise_std=(0.1, np.inf)), r"noise_std must be"),
    (dict(nonlinearity=-1), r"nonlinearity must be a finite number >= 0.0; got -1"),
    (dict(random_state=-1), r"random_state must be None, an int >= 0 or a numpy Generator; got -1"),
    (dict(random_state="a"), r"random_state must be None, an int >= 0 or a numpy Generator; got 'a'"),
    (dict(popularity_skew="big"), r"popularity_skew must be a finite number"),
])
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_synthetic_ratings(**kwargs)


def test_million_ratings_fast():
    start = time.perf_counter()
    df = make_synthetic_ratings(n_users=20_000, n_items=5_000, n_ratings=1_000_000, random_state=0)
    elapsed = time.perf_counter() - start
    assert len(df) == 1_000_000
    assert elapsed < 8.0, f"10^6 ratings took {elapsed:.1f} s"


def test_dense_data_do_not_depend_on_the_order_argpartition_returns(monkeypatch):
    # numpy's argpartition orders the chosen pairs differently on CPUs with and without AVX-512: the same seed
    # must give the same rows in the same order on every machine
    want = make_synthetic_ratings(n_users=60, n_items=40, n_ratings=1500, random_state=0)
    partition = np.argpartition

    def reordered(a, kth):  # the same partition, each side in another order
        order = partition(a, kth)
        return np.concatenate([order[:kth + 1][::-1], order[kth + 1:][::-1]])

    monkeypatch.setattr(np, "argpartition", reordered)
    got = make_synthetic_ratings(n_users=60, n_items=40, n_ratings=1500, random_state=0)
    pd.testing.assert_frame_equal(got, want)
