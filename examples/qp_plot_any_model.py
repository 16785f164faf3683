"""QP-plot for any model with a predictive distribution (here MW-GP; SVD as a homoscedastic line).

    MOGP_DATA=../shared/data python examples/qp_plot_any_model.py --out qp.png
    python examples/qp_plot_any_model.py --smoke --out /tmp/qp.png

Any Surprise algorithm whose predictions carry details["std"] (or "var") works; wrap a point
estimator as HomoscedasticBaseline(SVD()) to give it one residual variance.
"""
from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from surprise import SVD  # noqa: E402
from surprise.model_selection import train_test_split  # noqa: E402

from mogp_surprise import HomoscedasticBaseline, MWGP  # noqa: E402
from mogp_surprise.evaluation import (plot_qp, qp_curve_from_predictions, save_figure,  # noqa: E402
                                      uncertainty_report_from_predictions)
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="qp.png")
    args = parser.parse_args()

    data = synthetic(3000) if args.smoke else load_or_synthesize("ml-100k")
    print("data:", data.describe())
    trainset, testset = train_test_split(data.surprise_dataset(), test_size=0.2, random_state=0)
    models = {"MW-GP": MWGP(random_state=0, **({"n_epochs": 2} if args.smoke else {}))}
    svd = HomoscedasticBaseline(SVD(random_state=0)).fit(trainset)
    curves = {}
    for name, algo in models.items():
        preds = algo.fit(trainset).test(testset)
        curves[name] = qp_curve_from_predictions(preds, quantiles=10)
        print(name, {k: round(v, 4) for k, v in uncertainty_report_from_predictions(preds).items()})
    svd_rmse = qp_curve_from_predictions(svd.test(testset), quantiles=[1.0])["rmse"].iloc[0]
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_qp(curves, metric="rmse", baselines={"SVD": svd_rmse}, ax=ax, title=data.source)
    print("saved", save_figure(fig, args.out))


if __name__ == "__main__":
    main()
