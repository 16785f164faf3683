"""Small data: default MW-GP against Surprise BaselineOnly and SVD on 10 % samples of MovieLens 100K.

    MOGP_DATA=../shared/data python benchmarks/small_data.py
    python benchmarks/small_data.py --quick

Protocol: for each of 5 seeds, a random 10 % of the ratings (seeded) is split 80/20 into train
(~8,000 ratings) and test. Every algorithm is fitted on the same train part through its Surprise
interface and scored on the same test part (RMSE of clipped estimates, as ``surprise.accuracy``).
MW-GP runs with its defaults (early stopping chooses the number of epochs on this data size) and
with ``early_stopping=False`` (always 20 epochs) to show what the early stopping gives.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table, write_json  # noqa: E402

from surprise import SVD, BaselineOnly, accuracy  # noqa: E402

from mogp_surprise.datasets import DATASETS  # noqa: E402
from mogp_surprise import MWGP  # noqa: E402
from mogp_surprise.datasets import to_surprise_dataset  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-100k", choices=sorted(DATASETS))
    p.add_argument("--fraction", type=float, default=0.10, help="share of the ratings in each sample (default 0.10)")
    p.add_argument("--seeds", type=int, default=5, help="number of seeded samples (default 5)")
    p.add_argument("--quick", action="store_true", help="tiny synthetic data, 2 seeds (smoke test)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    data = synthetic(20_000) if a.quick else load_or_synthesize(a.dataset)
    print(f"data: {data.source}")
    seeds = 2 if a.quick else a.seeds
    algos = {
        "BaselineOnly": lambda seed: BaselineOnly(verbose=False),
        "SVD": lambda seed: SVD(random_state=seed),
        "MW-GP (defaults)": lambda seed: MWGP(random_state=seed),
        "MW-GP, early_stopping=False": lambda seed: MWGP(random_state=seed, early_stopping=False),
    }
    rmse: dict[str, list[float]] = {name: [] for name in algos}
    chosen: list[dict] = []
    n_train = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        df = data.ratings
        sample = df.iloc[rng.choice(len(df), int(round(a.fraction * len(df))), replace=False)]
        test = rng.random(len(sample)) < 0.2
        train_df, test_df = sample[~test], sample[test]
        n_train.append(len(train_df))
        trainset = to_surprise_dataset(train_df[["user", "item", "rating"]],
                                       rating_scale=data.rating_scale).build_full_trainset()
        testset = list(test_df[["user", "item", "rating"]].itertuples(index=False, name=None))
        for name, make in algos.items():
            algo = make(seed)
            algo.fit(trainset)
            rmse[name].append(accuracy.rmse(algo.test(testset), verbose=False))
            if name == "MW-GP (defaults)":
                chosen.append({k: round(v, 5) for k, v in algo.chosen_params_.items()})
    rows = [{"algorithm": name, "rmse_mean": float(np.mean(v)), "rmse_std": float(np.std(v)),
             "per_seed": " ".join(f"{x:.4f}" for x in v)} for name, v in rmse.items()]
    print(table(rows))
    wins = int(sum(m < b for m, b in zip(rmse["MW-GP (defaults)"], rmse["BaselineOnly"])))
    print(f"MW-GP (defaults) beats BaselineOnly on {wins}/{seeds} samples; chosen: {chosen}; "
          f"train sizes: {n_train}")
    payload = {"dataset": data.source, "fraction": a.fraction, "seeds": seeds, "rows": rows,
               "epochs_chosen": [c["n_epochs"] for c in chosen], "chosen_params": chosen,
               "wins_vs_baseline": wins, "n_train": n_train}
    path = write_json("small_data", payload, a.out)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
