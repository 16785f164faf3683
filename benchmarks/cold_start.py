"""Honest cold start: hold out 10 % of users (or items) entirely and check their predictive std and coverage.

    MOGP_DATA=../shared/data python benchmarks/cold_start.py --dataset ml-1m
    MOGP_DATA=../shared/data python benchmarks/cold_start.py --dataset ml-100k --cold item
    python benchmarks/cold_start.py --quick

Protocol: 10 % of users (seeded; ``--cold item``: of items) go to the cold test set with all their
ratings; the other ratings are split 80/20 into train / warm test. MW-GP is fitted on train only.
Reported: RMSE, mean predictive std and 90 % interval coverage on warm and cold ratings, and the
std ratio. myFM (if installed) is reported for contrast.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hold_out_users, table, write_json  # noqa: E402

from mogp_surprise.datasets import DATASETS  # noqa: E402
from mogp_surprise.comparison import ALGORITHMS  # noqa: E402
from mogp_surprise.datasets import to_surprise_dataset  # noqa: E402
from mogp_surprise.evaluation import arrays_from_predictions, interval_coverage  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-1m", choices=sorted(DATASETS))
    p.add_argument("--share", "--cold-users", dest="share", type=float, default=0.10,
                   help="share of the users (or items) held out (default 0.10)")
    p.add_argument("--cold", choices=["user", "item"], default="user", help="hold out users (default) or items")
    p.add_argument("--algos", nargs="+", default=["mwgp", "myfm"], choices=sorted(ALGORITHMS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    data = synthetic(5000) if a.quick else load_or_synthesize(a.dataset)
    df = data.ratings
    rng = np.random.default_rng(a.seed)
    held, is_cold = hold_out_users(df, a.share, rng, column=a.cold)
    warm = df[~is_cold]
    test_mask = rng.random(len(warm)) < 0.2
    train, warm_test, cold_test = warm[~test_mask], warm[test_mask], df[is_cold]
    trainset = to_surprise_dataset(train[["user", "item", "rating"]], rating_scale=data.rating_scale).build_full_trainset()
    rows = []
    for key in a.algos:
        try:
            algo = ALGORITHMS[key].make(a.seed, {"n_epochs": 2} if a.quick else {})
            algo.fit(trainset)
        except ImportError as exc:
            print(f"skipping {key}: {exc}")
            continue
        out = {"algorithm": ALGORITHMS[key].label}
        for name, part in (("warm", warm_test), ("cold", cold_test)):
            testset = list(part[["user", "item", "rating"]].itertuples(index=False, name=None))
            y, mean, std = arrays_from_predictions(algo.test(testset))
            out[f"rmse_{name}"] = float(np.sqrt(np.mean((y - mean) ** 2)))
            out[f"std_{name}"] = float(std.mean())
            out[f"cov90_{name}"] = float(interval_coverage(y, mean, std, levels=(0.9,))[0.9])
        out["std_ratio"] = out["std_cold"] / out["std_warm"]
        rows.append(out)
    print(f"{data.source}: {len(held)} cold {a.cold}s ({len(cold_test):,} ratings), "
          f"{len(train):,} train / {len(warm_test):,} warm test ratings")
    print(table(rows))
    path = write_json("cold_start" + ("_quick" if a.quick else f"_{data.name}" + ("_items" if a.cold == "item" else "")),
                      {"source": data.source, "cold": a.cold, "rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
