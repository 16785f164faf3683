"""MWGPRegressor inside a scikit-learn Pipeline and GridSearchCV, on a DataFrame of ids.

    MOGP_DATA=../shared/data python examples/sklearn_pipeline_gridsearch.py
    python examples/sklearn_pipeline_gridsearch.py --smoke
"""
from __future__ import annotations

import argparse

import numpy as np
from sklearn.compose import ColumnTransformer
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline

from mogp_surprise import MWGPRegressor
from mogp_surprise.comparison.data import load_or_synthesize, synthetic


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()

    data = synthetic(3000) if args.smoke else load_or_synthesize("ml-100k")
    print("data:", data.describe())
    df = data.ratings
    X_train, X_test, y_train, y_test = train_test_split(df[["user", "item"]], df["rating"], test_size=0.2,
                                                        random_state=0)
    pipe = Pipeline([("ids", ColumnTransformer([("ids", "passthrough", ["user", "item"])])),
                     ("mwgp", MWGPRegressor(random_state=0))])
    grid = ({"mwgp__n_inducing": [8, 16], "mwgp__n_epochs": [2]} if args.smoke else
            {"mwgp__n_inducing": [64, 128], "mwgp__embedding_reg": [1.0, 3.0]})
    search = GridSearchCV(pipe, grid, cv=3, scoring="neg_root_mean_squared_error").fit(X_train, y_train)
    print("best:", search.best_params_, "CV RMSE %.4f" % -search.best_score_)

    model = search.best_estimator_.named_steps["mwgp"]
    mean, std = model.predict(X_test, return_std=True)
    inside = np.abs(y_test.to_numpy() - mean) <= 1.645 * std
    print(f"test RMSE {np.sqrt(np.mean((mean - y_test.to_numpy()) ** 2)):.4f}; "
          f"90% predictive intervals cover {inside.mean():.1%} of test ratings")


if __name__ == "__main__":
    main()
