"""The demo: MW-GP next to Surprise ``SVD`` on one split, with its uncertainty, cold start and top-N (no printing here)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .data import LoadedData


@dataclass
class DemoResult:
    source: str
    table: pd.DataFrame  # one row per algorithm
    examples: pd.DataFrame  # a few test predictions with their std
    cold_start: dict[str, Any] = field(default_factory=dict)
    # top-5 of one training user, and of a new user before and after folding in a few ratings
    recommendations: dict[str, Any] = field(default_factory=dict)


def run_demo(data: LoadedData, mwgp_params: dict[str, Any] | None = None, test_size: float = 0.2,
             n_examples: int = 8, random_state: int = 0) -> DemoResult:
    """MW-GP next to Surprise ``SVD`` on one seeded train/test split."""
    from surprise import SVD
    from surprise.model_selection import train_test_split

    from ..adapters.surprise_algo import MWGP
    from ..evaluation import qp_curve

    trainset, testset = train_test_split(data.surprise_dataset(), test_size=test_size, random_state=random_state)
    y = np.array([r for _, _, r in testset])
    rows, preds = [], {}
    for label, algo in (("SVD (Surprise)", SVD(random_state=random_state)),
                        ("MW-GP", MWGP(random_state=random_state, **(mwgp_params or {})))):
        start = time.perf_counter()
        algo.fit(trainset)
        fitted = time.perf_counter()
        pred = algo.test(testset)
        fit_time, test_time = fitted - start, time.perf_counter() - fitted
        est = np.array([p.est for p in pred])
        row = {"algorithm": label, "rmse": float(np.sqrt(np.mean((est - y) ** 2))),
               "mae": float(np.mean(np.abs(est - y))), "fit_s": fit_time, "test_s": test_time}
        if "std" in pred[0].details:
            std = np.array([p.details["std"] for p in pred])
            curve = qp_curve(y, est, std, quantiles=[0.8, 0.9, 1.0], metrics=("rmse",)).set_index("quantile")
            row.update(rmse_q90=float(curve.loc[0.9, "rmse"]), rmse_q80=float(curve.loc[0.8, "rmse"]))
        rows.append(row)
        preds[label] = (algo, pred)
    mwgp, mwgp_pred = preds["MW-GP"]
    svd_pred = preds["SVD (Surprise)"][1]
    pick = np.random.default_rng(random_state).choice(len(testset), size=min(n_examples, len(testset)), replace=False)
    examples = pd.DataFrame([{"user": testset[k][0], "item": testset[k][1], "rating": testset[k][2],
                              "svd": svd_pred[k].est, "mwgp_est": mwgp_pred[k].est,
                              "mwgp_std": mwgp_pred[k].details["std"]} for k in pick])
    known_item = testset[int(pick[0])][1]
    cold_mean, cold_var = mwgp.predict_dist("<a user never seen>", known_item)
    known_std = float(np.mean([p.details["std"] for p in mwgp_pred]))
    cold = {"item": known_item, "mean": cold_mean, "std": float(np.sqrt(cold_var)), "mean_std_known": known_std}
    return DemoResult(data.source, pd.DataFrame(rows), examples, cold, _demo_recommendations(mwgp, trainset, data))


def _demo_recommendations(mwgp, trainset, data: LoadedData, n: int = 5) -> dict[str, Any]:
    """Top-n of a typical training user (median number of ratings), and a new user onboarded: the top-n before
    any rating, the items ``ask`` chooses among those another, frequent training rater has rated (the films
    the newcomer says they have seen), and the top-n after folding in that rater's answers."""
    def titled(frame: pd.DataFrame, columns=("rank", "item", "title", "est", "std")) -> pd.DataFrame:
        names = data.titles or {}
        frame = frame.assign(title=[names.get(str(i), "") for i in frame["item"]]) if names else frame
        return frame[[c for c in columns if c in frame]]

    users = sorted(trainset.ur, key=lambda u: -len(trainset.ur[u]))
    user = trainset.to_raw_uid(users[len(users) // 2])
    donor = {trainset.to_raw_iid(i): r for i, r in trainset.ur[users[len(users) // 4]]}  # another, frequent rater
    new = "a new user"
    questions = mwgp.ask(new, n=n, candidates=list(donor))
    rated = {item: donor[item] for item in questions["item"]}
    return {"user": user, "user_top": titled(mwgp.recommend(user, n=n)),
            "new_top": titled(mwgp.recommend(new, n=n)),
            "questions": titled(questions, ("rank", "item", "title", "gain")),
            "new_ratings": rated, "new_top_folded": titled(mwgp.recommend(new, n=n, ratings=rated))}
