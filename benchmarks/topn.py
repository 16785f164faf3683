"""Does ranking by uncertainty pay off? Mean vs LCB vs UCB top-N on held-out ratings, and top-10 speed.

    MOGP_DATA=../shared/data python benchmarks/topn.py --dataset ml-1m --plot docs/results/topn_ml-1m.png
    python benchmarks/topn.py --quick

Protocol: seeded 80/20 split of the ratings; MW-GP fitted on the 80 %. For every test user with at
least 2*N held-out ratings, that user's held-out items are ranked by mean, by mean - kappa*std
(LCB, risk-averse) or mean + kappa*std (UCB); of the top N we report the share the user really
rated >= 4 (precision) and the share rated <= 2 (bad picks), averaged over users. Random ranking
is the floor. Then top-10 over all items for every user (recommend_many) is timed.
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

from mogp_surprise import MWGP  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402


def ranked_metrics(frame: pd.DataFrame, score: np.ndarray, n: int) -> tuple[float, float]:
    frame = frame.assign(score=score).sort_values(["user", "score"], ascending=[True, False], kind="stable")
    top = frame.groupby("user", sort=False).head(n)
    per_user = top.groupby("user").agg(precision=("rating", lambda r: np.mean(r >= 4)),
                                       bad=("rating", lambda r: np.mean(r <= 2)))
    return float(per_user["precision"].mean()), float(per_user["bad"].mean())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-1m")
    p.add_argument("--n", type=int, default=5)
    p.add_argument("--kappas", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--plot", default=None)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from surprise.model_selection import train_test_split

    data = synthetic(5000) if a.quick else load_or_synthesize(a.dataset)
    trainset, testset = train_test_split(data.surprise_dataset(), test_size=0.2, random_state=a.seed)
    algo = MWGP(random_state=a.seed, **({"n_epochs": 2} if a.quick else {})).fit(trainset)
    test = pd.DataFrame(testset, columns=["user", "item", "rating"])
    counts = test["user"].value_counts()
    test = test[test["user"].isin(counts[counts >= 2 * a.n].index)].reset_index(drop=True)
    mean, var = algo.predict_dist(list(test.itertuples(index=False, name=None)))
    std = np.sqrt(var)
    rng = np.random.default_rng(a.seed)
    rows = [{"strategy": "random", "kappa": 0.0, **dict(zip(("precision", "bad"),
                                                           ranked_metrics(test, rng.random(len(test)), a.n)))},
            {"strategy": "mean", "kappa": 0.0, **dict(zip(("precision", "bad"), ranked_metrics(test, mean, a.n)))}]
    for kappa in a.kappas:
        for name, sign in (("lcb", -1.0), ("ucb", 1.0)):
            rows.append({"strategy": name, "kappa": kappa,
                         **dict(zip(("precision", "bad"), ranked_metrics(test, mean + sign * kappa * std, a.n)))})
    users = [trainset.to_raw_uid(u) for u in range(trainset.n_users)]
    start = time.perf_counter()
    top10 = algo.recommend_many(users, n=10, strategy="lcb")
    t_top10 = time.perf_counter() - start
    print(f"{data.source}: {test['user'].nunique():,} users with >= {2 * a.n} held-out ratings; top-{a.n} among "
          "their held-out items")
    print(table(rows))
    print(f"top-10 (LCB) over all {trainset.n_items:,} items for all {len(users):,} users: {t_top10:.1f} s "
          f"({len(top10):,} rows)")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        frame = pd.DataFrame(rows)
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for ax, metric, label in ((axes[0], "precision", f"precision@{a.n} (rated >= 4)"),
                                  (axes[1], "bad", f"bad picks@{a.n} (rated <= 2)")):
            for name, style in (("lcb", "o-"), ("ucb", "s--")):
                sub = frame[frame["strategy"] == name]
                ax.plot(sub["kappa"], sub[metric], style, label=name.upper())
            ax.axhline(frame.loc[frame["strategy"] == "mean", metric].iloc[0], color="k", lw=1, label="mean")
            ax.axhline(frame.loc[frame["strategy"] == "random", metric].iloc[0], color="grey", ls=":", label="random")
            ax.set_xlabel("kappa")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{data.source}: ranking held-out items by mean ± kappa·std", fontsize=9)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=90)
        print("saved", a.plot)
    path = write_json("topn" + ("_quick" if a.quick else f"_{data.name}"),
                      {"source": data.source, "rows": rows, "top10_all_users_s": t_top10, "n": a.n}, a.out)
    print("wrote", path)
    return {"rows": rows, "t_top10": t_top10}


if __name__ == "__main__":
    main()
