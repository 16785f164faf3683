"""Shared fixtures: real MovieLens data (when present), small synthetic ratings, fast settings."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("MOGP_DATA") or REPO_ROOT.parent / "shared" / "data")

#: hyper-parameters small enough for unit tests (seconds, not minutes)
FAST = {"n_epochs": 3, "n_inducing": 16, "batch_size": 256, "random_state": 0}

#: where a fit is bit-reproducible: tests that compare two fits, a resumed fit or a model loaded onto the CPU
#: bit for bit train here. On a GPU, CUDA's atomic additions sum in no fixed order (two fits from one seed
#: differ in the last float32 digits) and a saved model loads onto the CPU unless asked otherwise.
ON_CPU = {"device": "cpu"}


def constant_rmse(data, cv) -> "np.ndarray":
    """Per-fold test RMSE of the training fold's global mean: the bound any model must beat."""
    import numpy as np

    out = []
    for trainset, testset in cv.split(data):
        y = np.array([r for *_, r in testset])
        out.append(float(np.sqrt(np.mean((y - trainset.global_mean) ** 2))))
    return np.array(out)


def _skip_reason(name: str) -> str:
    return (f"MovieLens {name} not found under {DATA_DIR} (set MOGP_DATA to a folder holding "
            f"{name}/, e.g. MOGP_DATA=../shared/data)")


@pytest.fixture(scope="session")
def ml100k():
    """ML-100K as a Surprise Dataset; the test is skipped, with the reason, when absent."""
    from mogp_surprise.datasets import load_dataset

    if not (DATA_DIR / "ml-100k" / "u.data").exists() and not (DATA_DIR / "u.data").exists():
        pytest.skip(_skip_reason("ml-100k"))
    return load_dataset("ml-100k", data_dir=DATA_DIR)


@pytest.fixture(scope="session")
def synthetic_df():
    """3,000 synthetic 1..5 ratings from 120 users x 80 items with known noise."""
    from mogp_surprise.datasets import make_synthetic_ratings

    return make_synthetic_ratings(n_users=120, n_items=80, n_ratings=3000, random_state=0)


@pytest.fixture(scope="session")
def synthetic_data(synthetic_df):
    """The same ratings as a Surprise Dataset."""
    from mogp_surprise.datasets import to_surprise_dataset

    return to_surprise_dataset(synthetic_df[["user", "item", "rating"]], rating_scale=(1, 5))
