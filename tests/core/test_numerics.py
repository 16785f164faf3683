"""Numerical robustness: no NaN/inf over seeds x data x dtypes, NaN losses reported, dtypes agree."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, NumericalError, fit_mwgp
from mogp_surprise.core import objective
from mogp_surprise.datasets import make_synthetic_ratings
from tests.conftest import DATA_DIR

SEEDS = range(5)
QUICK = {"n_epochs": 3, "n_inducing": 32, "batch_size": 1024}


def _encode(df):
    users = df["user"].astype("category").cat.codes.to_numpy()
    items = df["item"].astype("category").cat.codes.to_numpy()
    return np.stack([users, items], 1).astype(np.int64), df["rating"].to_numpy(float), (users.max() + 1, items.max() + 1)


def _data(name: str):
    if name == "synthetic-1..5":
        return _encode(make_synthetic_ratings(300, 200, 6000, random_state=0))
    if name == "synthetic-real-wide":
        return _encode(make_synthetic_ratings(300, 200, 6000, rating_scale=(-10, 10), integer=False,
                                              noise_std=(0.5, 6.0), random_state=0))
    path = DATA_DIR / "ml-100k" / "u.data"
    if not path.exists():
        pytest.skip(f"MovieLens 100K not found under {DATA_DIR} (set MOGP_DATA)")
    import pandas as pd
    df = pd.read_csv(path, sep="\t", names=["user", "item", "rating", "ts"], nrows=20000)
    return _encode(df)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("data", ["synthetic-1..5", "synthetic-real-wide", "ml-100k"])
def test_no_nan_and_positive_variances(data, dtype):
    index, y, n_levels = _data(data)
    unseen = np.array([[-1, 0], [0, -1], [-1, -1]])
    for seed in SEEDS:
        res = fit_mwgp(index, y, n_levels, MWGPConfig(random_state=seed, dtype=dtype, **QUICK))
        assert np.all(np.isfinite(res.loss_history))
        mean, var = res.posterior.predict(np.concatenate([index[:500], unseen]))
        assert np.all(np.isfinite(mean)) and np.all(np.isfinite(var))
        assert np.all(var > 0)
        _, latent = res.posterior.predict(index[:500], include_noise=False)
        assert np.all(latent > 0)


def test_nan_loss_is_reported_with_advice(monkeypatch):
    index, y, n_levels = _data("synthetic-1..5")

    def broken(module, *args, **kwargs):
        return torch.tensor(float("nan"), dtype=module.dtype, requires_grad=True)
    monkeypatch.setattr(objective, "expected_log_lik", broken)
    with pytest.raises(NumericalError, match="lower `lr`"):
        fit_mwgp(index, y, n_levels, MWGPConfig(random_state=0, **QUICK))


def test_diverging_parameters_are_reported_not_propagated():
    index, y, n_levels = _data("synthetic-1..5")
    with pytest.raises(NumericalError, match="lr"):
        fit_mwgp(index, y, n_levels, MWGPConfig(random_state=0, lr=1e6, **QUICK))


@pytest.mark.data
def test_float32_and_float64_fits_agree_on_ml100k(ml100k):
    from surprise.model_selection import train_test_split

    from mogp_surprise import MWGP

    trainset, testset = train_test_split(ml100k, test_size=0.2, random_state=0)
    y = np.array([r for _, _, r in testset])
    rmse = {}
    for dtype in ("float32", "float64"):
        algo = MWGP(random_state=0, dtype=dtype, n_epochs=10, early_stopping=False)  # (one run, not two)
        est = np.array([p.est for p in algo.fit(trainset).test(testset)])
        rmse[dtype] = float(np.sqrt(np.mean((est - y) ** 2)))
    assert abs(rmse["float32"] - rmse["float64"]) < 0.005, rmse


def _equal_ratings():
    rng = np.random.default_rng(0)
    pairs = np.unique(np.stack([rng.integers(0, 40, 600), rng.integers(0, 20, 600)], 1), axis=0)[:375]
    return pairs.astype(np.int64), np.full(len(pairs), 3.0), (40, 20)


def test_a_model_that_float32_would_not_serve_exactly_is_kept_in_float64():
    """Every rating 3: the GP is pinned down and its variance (the prior's less k M k, |M| ~ 1e5) loses all its
    digits in float32 (a pair's variance 0.27 against 0.21): the fitted posterior stays float64."""
    index, y, n_levels = _equal_ratings()
    post = fit_mwgp(index, y, n_levels, MWGPConfig(random_state=0, device="cpu")).posterior
    assert post.dtype == torch.float64
    cast = post.to(dtype="float32")
    grid = np.array([[u, i] for u in range(-1, 40) for i in range(-1, 20)])
    exact, rounded = post.predict(grid)[1], cast.predict(grid)[1]
    assert np.abs(rounded - exact).max() > 0.01 * exact.max()  # what float32 would have served
    assert post.predict_pair((3, 4)) == pytest.approx(tuple(v[0] for v in post.predict(grid[[4 * 21 + 5]])),
                                                      rel=1e-9)


def test_rating_data_keep_the_faster_float32_model():
    index, y, n_levels = _data("synthetic-1..5")
    post = fit_mwgp(index, y, n_levels, MWGPConfig(random_state=0, device="cpu", **QUICK)).posterior
    assert post.dtype == torch.float32


def test_ratings_around_a_million_are_not_rounded_to_float32s_last_place():
    """1e6 + N(0, 1): a float32 sum with the mean rounds to 1/16; the batched mean is the pair's to 1e-6."""
    rng = np.random.default_rng(0)
    index, y, n_levels = _data("synthetic-1..5")
    y = 1e6 + rng.normal(0.0, 1.0, len(y))
    post = fit_mwgp(index, y, n_levels, MWGPConfig(random_state=0, device="cpu", **QUICK)).posterior
    mean = post.predict(index[:200])[0]
    pairs = np.array([post.predict_pair(tuple(int(k) for k in row))[0] for row in index[:200]])
    np.testing.assert_allclose(mean, pairs, rtol=0, atol=1e-3)
    assert np.abs(mean - np.round(mean * 16) / 16).max() > 1e-3  # not on float32's grid of 1/16 there
