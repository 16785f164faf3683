"""MyFMBaseline: myFM's Bayesian FM with the shared predictive surface (optional dependency)."""
from __future__ import annotations

import pytest

from mogp_surprise.comparison import compare


def test_myfm_baseline_if_installed(synthetic_data):
    pytest.importorskip("myfm", reason="myFM is optional (pip install -e '.[myfm]')")
    from surprise.model_selection import KFold

    from tests.conftest import constant_rmse

    result = compare(synthetic_data, algos=["myfm"], n_folds=2)
    row = result.summary().iloc[0]
    assert row["uncertainty"] == "predictive" and 0.1 < row["sharpness_mean"] < 2.0
    constant = constant_rmse(synthetic_data, KFold(2, random_state=0, shuffle=True))  # compare's folds
    assert row["rmse_q100_mean"] < 0.95 * constant.mean() and 0.8 < row["coverage_90_mean"] < 0.97

