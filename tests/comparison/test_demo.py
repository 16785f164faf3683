"""The demo's numbers: MW-GP next to SVD on one split, its std, cold start and top-N before and after fold-in."""
from __future__ import annotations

import numpy as np
from surprise.model_selection import train_test_split

from mogp_surprise.comparison.data import synthetic
from mogp_surprise.comparison.demo import run_demo


def test_demo_reports_both_models_uncertainty_cold_start_and_recommendations():
    data = synthetic(12_000, random_state=0)  # enough ratings per user for the std to rank (3,000: a flat QP curve)
    result = run_demo(data, mwgp_params={"n_epochs": 5, "n_inducing": 16})
    trainset, testset = train_test_split(data.surprise_dataset(), test_size=0.2, random_state=0)  # the demo's split
    constant = np.sqrt(np.mean([(r - trainset.global_mean) ** 2 for *_, r in testset]))
    table = result.table.set_index("algorithm")
    assert list(table.index) == ["SVD (Surprise)", "MW-GP"]
    assert np.isnan(table.loc["SVD (Surprise)", "rmse_q80"])  # no std: no QP entries
    mwgp = table.loc["MW-GP"]
    assert mwgp["rmse"] < 0.96 * constant and table.loc["SVD (Surprise)", "rmse"] < 0.96 * constant
    assert mwgp["rmse_q80"] <= mwgp["rmse_q90"] <= mwgp["rmse"] and mwgp["fit_s"] > 0
    assert len(result.examples) == 8 and (result.examples["mwgp_std"] > 0).all()
    cold = result.cold_start
    assert cold["std"] > cold["mean_std_known"]  # an unseen user is less certain than the known test pairs
    rec = result.recommendations
    assert len(rec["user_top"]) == len(rec["new_top"]) == 5 and len(rec["new_ratings"]) == 5
    assert list(rec["questions"]["item"]) == list(rec["new_ratings"])  # the answers are those to ask's questions
    assert rec["questions"]["gain"].is_monotonic_decreasing and (rec["new_top"]["est"] <= 5).all()
    assert not set(rec["new_top_folded"]["item"]) & set(rec["new_ratings"])  # rated items are excluded
    before, after = rec["new_top"], rec["new_top_folded"]  # the ratings changed the list or its predictions
    assert list(after["item"]) != list(before["item"]) or np.abs(after["est"].to_numpy()
                                                                - before["est"].to_numpy()).max() > 1e-3
