"""Accuracy and fit time on one seeded 80/20 split: MW-GP vs Surprise SVD vs myFM (same split).

    MOGP_DATA=../shared/data python benchmarks/accuracy.py --dataset ml-1m
    python benchmarks/accuracy.py --quick          # ML-100K if found, else synthetic
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table, write_json  # noqa: E402

from mogp_surprise.datasets import DATASETS  # noqa: E402
from mogp_surprise.comparison import ALGORITHMS, predictive_arrays  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402
from mogp_surprise.evaluation import qp_curve, uncertainty_report  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-1m", choices=sorted(DATASETS))
    p.add_argument("--algos", nargs="+", default=["mwgp", "svd", "myfm"], choices=sorted(ALGORITHMS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from surprise.model_selection import train_test_split

    data = synthetic(5000) if a.quick else load_or_synthesize(a.dataset)
    params = {"n_epochs": 2} if a.quick else {}
    trainset, testset = train_test_split(data.surprise_dataset(), test_size=0.2, random_state=a.seed)
    rows = []
    for key in a.algos:
        spec = ALGORITHMS[key]
        try:
            algo = spec.make(a.seed, params)
            start = time.perf_counter()
            algo.fit(trainset)
            fit_s = time.perf_counter() - start
        except ImportError as exc:
            print(f"skipping {key}: {exc}")
            continue
        start = time.perf_counter()
        y, mean, std = predictive_arrays(algo, testset, trainset.rating_scale)
        test_s = time.perf_counter() - start
        curve = qp_curve(y, mean, std, quantiles=[0.8, 0.9, 1.0]).set_index("quantile")
        rep = uncertainty_report(y, mean, std)
        rows.append({"algorithm": spec.label, "rmse": float(curve.loc[1.0, "rmse"]), "rmse_q90": float(curve.loc[0.9, "rmse"]),
                     "rmse_q80": float(curve.loc[0.8, "rmse"]), "mae": float(curve.loc[1.0, "mae"]),
                     "nll": rep["nll"], "coverage_90": rep["coverage_90"], "fit_s": fit_s, "test_s": test_s})
    print(f"{data.source}; 80/20 split (seed {a.seed})")
    print(table(rows))
    path = write_json("accuracy_" + ("quick" if a.quick else data.name), {"source": data.source, "rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
