"""Does ranking by uncertainty pay off? Mean vs LCB vs UCB top-N on held-out ratings, and top-10 speed.

    MOGP_DATA=../shared/data python benchmarks/topn.py --dataset ml-1m --plot docs/results/topn_ml-1m.png
    python benchmarks/topn.py --quick

Protocol: seeded 80/20 split of the ratings; every algorithm (default: MW-GP and myFM's Bayesian FM,
whose predictive std comes from its MCMC samples) fitted on the 80 %. For every test user with at
least 2*N held-out ratings, that user's held-out items are ranked by mean, by mean - kappa*std
(LCB, risk-averse) or mean + kappa*std (UCB); of the top N we report the share the user really
rated >= 4 (precision) and the share rated <= 2 (bad picks), averaged over users, and the change of
bad picks against the same algorithm's mean ranking. Random ranking is the floor. Then MW-GP's
top-10 over all items for every user (recommend_many) is timed.
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

from mogp_surprise.datasets import DATASETS  # noqa: E402
from mogp_surprise.comparison import ALGORITHMS  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402
from mogp_surprise.evaluation import precision_recall_at_k, top_k_mask  # noqa: E402


def ranked_metrics(frame: pd.DataFrame, score: np.ndarray, n: int) -> tuple[float, float]:
    """Precision@n (every top-n item counts as recommended: the scores are not ratings) and bad picks@n
    (share of the top n rated <= 2), averaged over users; ranking and ties as mogp_surprise.evaluation's."""
    precision, _ = precision_recall_at_k(frame["user"], frame["rating"], score, k=n, threshold=4,
                                         recommend_above_threshold=False)
    top = frame[top_k_mask(frame["user"], score, k=n)]
    bad = (top["rating"] <= 2).groupby(top["user"]).mean()
    return precision, float(bad.mean())


def strategy_rows(label: str, test: pd.DataFrame, mean: np.ndarray, std: np.ndarray, n: int,
                  kappas: list[float]) -> list[dict]:
    """Precision and bad picks of the mean, LCB and UCB rankings of one algorithm's predictions."""
    def row(strategy: str, kappa: float, score: np.ndarray) -> dict:
        precision, bad = ranked_metrics(test, score, n)
        return {"algorithm": label, "strategy": strategy, "kappa": kappa, "precision": precision, "bad": bad}

    rows = [row("mean", 0.0, mean)]
    for kappa in kappas:
        for name, sign in (("lcb", -1.0), ("ucb", 1.0)):
            rows.append(row(name, kappa, mean + sign * kappa * std))
    for r in rows:  # against this algorithm's own mean ranking
        r["bad_vs_mean"] = r["bad"] / rows[0]["bad"] - 1.0 if rows[0]["bad"] > 0 else float("nan")
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-1m", choices=sorted(DATASETS))
    p.add_argument("--algos", nargs="+", default=["mwgp", "myfm"], choices=sorted(ALGORITHMS))
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
    test = pd.DataFrame(testset, columns=["user", "item", "rating"])
    counts = test["user"].value_counts()
    test = test[test["user"].isin(counts[counts >= 2 * a.n].index)].reset_index(drop=True)
    pairs = list(test.itertuples(index=False, name=None))
    rng = np.random.default_rng(a.seed)
    precision, bad = ranked_metrics(test, rng.random(len(test)), a.n)
    rows = [{"algorithm": "-", "strategy": "random", "kappa": 0.0, "precision": precision, "bad": bad,
             "bad_vs_mean": float("nan")}]
    t_top10 = float("nan")
    n_top10 = 0
    for key in a.algos:
        spec = ALGORITHMS[key]
        hint = spec.missing() if spec.missing else ""
        if hint:
            print(f"skipping {key}: {hint}")
            continue
        algo = spec.make(a.seed, {"n_epochs": 2} if a.quick else {})
        algo.fit(trainset)
        mean, var = algo.predict_dist(pairs)
        rows += strategy_rows(spec.label, test, mean, np.sqrt(var), a.n, a.kappas)
        if key == "mwgp":
            users = [trainset.to_raw_uid(u) for u in range(trainset.n_users)]
            start = time.perf_counter()
            n_top10 = len(algo.recommend_many(users, n=10, strategy="lcb"))
            t_top10 = time.perf_counter() - start
    print(f"{data.source}: {test['user'].nunique():,} users with >= {2 * a.n} held-out ratings; top-{a.n} among "
          "their held-out items")
    print(table(rows))
    if n_top10:
        print(f"top-10 (LCB) over all {trainset.n_items:,} items for all {trainset.n_users:,} users: {t_top10:.1f} s "
              f"({n_top10:,} rows)")
    if a.plot:
        plot(rows, a.n, data.source, a.plot)
        print("saved", a.plot)
    path = write_json("topn" + ("_quick" if a.quick else f"_{data.name}"),
                      {"source": data.source, "rows": rows, "top10_all_users_s": t_top10, "n": a.n}, a.out)
    print("wrote", path)
    return {"rows": rows, "t_top10": t_top10}


def plot(rows: list[dict], n: int, source: str, path: str) -> None:
    """Precision and bad picks of LCB / UCB against kappa, with each algorithm's mean ranking as a line (the
    random ranking, far off, is given in each panel's title)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    algos = [x for x in frame["algorithm"].unique() if x != "-"]
    for ax, metric, label in ((axes[0], "precision", f"precision@{n} (rated >= 4)"),
                              (axes[1], "bad", f"bad picks@{n} (rated <= 2)")):
        for colour, algo in zip(colours, algos):
            sub = frame[frame["algorithm"] == algo]
            for name, style in (("lcb", "o-"), ("ucb", "s--")):
                part = sub[sub["strategy"] == name]
                ax.plot(part["kappa"], part[metric], style, color=colour, label=f"{algo}: {name.upper()}")
            ax.axhline(sub.loc[sub["strategy"] == "mean", metric].iloc[0], color=colour, lw=1, ls="-.",
                       label=f"{algo}: mean")
        ax.set_title(f"random ranking: {frame.loc[frame['strategy'] == 'random', metric].iloc[0]:.3f}", fontsize=8)
        ax.set_xlabel("kappa")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.suptitle(f"{source}: ranking held-out items by mean ± kappa·std", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
