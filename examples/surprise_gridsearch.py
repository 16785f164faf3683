"""Tune MW-GP with Surprise's GridSearchCV, then look at predictive uncertainty.

    MOGP_DATA=../shared/data python examples/surprise_gridsearch.py
    python examples/surprise_gridsearch.py --smoke
"""
from __future__ import annotations

import argparse

import numpy as np
from surprise.model_selection import GridSearchCV, train_test_split

from mogp_surprise import MWGP
from mogp_surprise.comparison.data import load_or_synthesize, synthetic


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()

    data = synthetic(3000) if args.smoke else load_or_synthesize("ml-100k")
    print("data:", data.describe())
    dataset = data.surprise_dataset()
    grid = ({"n_inducing": [8, 16], "n_epochs": [2], "random_state": [0]} if args.smoke else
            {"n_inducing": [64, 128], "latent_dim": [4, 8], "random_state": [0]})
    gs = GridSearchCV(MWGP, grid, measures=["rmse", "mae"], cv=3)
    gs.fit(dataset)
    print("best RMSE %.4f with %s" % (gs.best_score["rmse"], gs.best_params["rmse"]))

    trainset, testset = train_test_split(dataset, test_size=0.2, random_state=0)
    algo = gs.best_estimator["rmse"].fit(trainset)
    predictions = algo.test(testset)
    std = np.array([p.details["std"] for p in predictions])
    err = np.array([abs(p.est - p.r_ui) for p in predictions])
    sure = std <= np.quantile(std, 0.2)
    print(f"mean |error| on the 20% most confident predictions: {err[sure].mean():.3f}, "
          f"on the rest: {err[~sure].mean():.3f}")
    uid, iid, _ = testset[0]
    mean, var = algo.predict_dist(uid, iid)
    print(f"user {uid}, item {iid}: {mean:.2f} ± {np.sqrt(var):.2f}")


if __name__ == "__main__":
    main()
