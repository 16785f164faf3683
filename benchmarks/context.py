"""Context mode: does a time-bin factor (k = k_user * k_item * k_time) help on ML-100K?

    MOGP_DATA=../shared/data python benchmarks/context.py
    python benchmarks/context.py --quick

Both models are MWGPRegressor with default settings on the same seeded 80/20 split; the context
model gets a third id column: the rating's timestamp cut into --bins equal-count bins.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table, write_json  # noqa: E402

from mogp_surprise import MWGPRegressor  # noqa: E402
from mogp_surprise.evaluation import qp_curve, uncertainty_report  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bins", type=int, nargs="+", default=[4, 12])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.quick:
        data = synthetic(4000)
        data.ratings["timestamp"] = np.random.default_rng(0).integers(0, 10 ** 6, len(data.ratings))
    else:
        data = load_or_synthesize("ml-100k")
    df = data.ratings
    if "timestamp" not in df:
        raise SystemExit(f"{data.source} has no timestamps; the context benchmark needs ML-100K's u.data")
    rng = np.random.default_rng(a.seed)
    test = rng.random(len(df)) < 0.2
    params = {"random_state": a.seed, **({"n_epochs": 2} if a.quick else {})}
    variants = {"user, item": df[["user", "item"]]}
    for bins in a.bins:
        codes = pd.qcut(df["timestamp"].rank(method="first"), bins, labels=False).astype(int)
        variants[f"user, item, time ({bins} bins)"] = df[["user", "item"]].assign(time=codes)
    rows = []
    y = df["rating"].to_numpy(float)
    for name, X in variants.items():
        start = time.perf_counter()
        est = MWGPRegressor(**params).fit(X[~test], y[~test])
        fit_s = time.perf_counter() - start
        mean, std = est.predict(X[test], return_std=True)
        mean = np.clip(mean, 1, 5)
        curve = qp_curve(y[test], mean, std, quantiles=[0.8, 1.0]).set_index("quantile")
        rep = uncertainty_report(y[test], mean, std)
        rows.append({"model": name, "rmse": float(curve.loc[1.0, "rmse"]), "rmse_q80": float(curve.loc[0.8, "rmse"]),
                     "mae": rep["mae"], "nll": rep["nll"], "fit_s": fit_s})
    print(f"{data.source}; seeded 80/20 split")
    print(table(rows))
    path = write_json("context" + ("_quick" if a.quick else ""), {"source": data.source, "rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
