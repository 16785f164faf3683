"""Fold-in of held-out users without a refit, against a full refit and other algorithms' refits.

    MOGP_DATA=../shared/data python benchmarks/foldin.py --dataset ml-1m
    python benchmarks/foldin.py --quick

Protocol: 10 % of the users (seeded) are held out entirely; MW-GP is fitted on the other users'
ratings. Each held-out user with at least 25 ratings gets a seeded random order of their ratings:
the first k in (0, 5, 10, 20) are folded in, and the ratings after the 20th are the test set (the
same test set for every k). Per k: RMSE, mean predictive std and 90 % interval coverage of
 - fold-in (``MWGP.fold_in``; the model is not refitted),
 - a full refit of MW-GP on the training ratings plus every held-out user's first k ratings,
 - Surprise SVD and myFM (if installed) refitted the same way (they cannot fold in).
k = 0 is the cold start (and the fitted model itself). Gap recovered at k = 20:
(RMSE cold - RMSE fold-in) / (RMSE cold - RMSE refit).

Speed and memory are measured in a fresh process that only loads the saved model: fold-in of 20
ratings (``MWGP.fold_in``), top-10 over the whole catalogue for one user (``MWGP.recommend``),
and the extra peak memory of ``recommend_many`` for 10,000 users in one call.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hold_out_users, table, write_json  # noqa: E402

from mogp_surprise.datasets import DATASETS  # noqa: E402
from mogp_surprise import MWGP  # noqa: E402
from mogp_surprise.comparison import ALGORITHMS  # noqa: E402
from mogp_surprise.datasets import to_surprise_dataset  # noqa: E402
from mogp_surprise.evaluation import arrays_from_predictions, interval_coverage  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402

KS = (0, 5, 10, 20)

_SPEED = r"""
import json, sys, time
import numpy as np
from mogp_surprise import MWGP
algo = MWGP.load(sys.argv[1])
users = json.loads(sys.argv[2])  # [[uid, [[iid, r], ...]], ...] new users with 20 ratings each
known = list(algo.trainset._raw2inner_id_users)[:200]
algo.recommend(known[0], n=10)  # warm-up
top = []
for uid in known:
    t = time.perf_counter(); algo.recommend(uid, n=10); top.append(time.perf_counter() - t)
algo.recommend("warm-up", n=10, ratings=[tuple(p) for p in users[0][1]])  # warm-up: first-call imports
fold = []
for uid, ratings in users:
    t = time.perf_counter(); algo.fold_in(uid, [tuple(p) for p in ratings]); fold.append(time.perf_counter() - t)
many = (list(algo.trainset._raw2inner_id_users) * 2)[:9_000] + [f"cold-{k}" for k in range(1_000)]
def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current resident memory
before = status_kb("VmRSS:")
t = time.perf_counter(); frame = algo.recommend_many(many, n=10); many_s = time.perf_counter() - t
after = status_kb("VmHWM:")  # the peak during the call
print(json.dumps({"topn10_ms_median": 1e3 * float(np.median(top)), "foldin20_ms_median": 1e3 * float(np.median(fold)),
                  "foldin20_ms_p90": 1e3 * float(np.percentile(fold, 90)), "recommend_many_users": len(many),
                  "recommend_many_s": many_s, "recommend_many_extra_peak_mb": (after - before) / 1024.0,
                  "rows": len(frame)}))
"""


def _metrics(y, mean, std) -> dict:
    return {"rmse": float(np.sqrt(np.mean((y - mean) ** 2))), "std": float(np.mean(std)) if std is not None else None,
            "cov90": float(interval_coverage(y, mean, std, levels=(0.9,))[0.9]) if std is not None else None}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-1m", choices=sorted(DATASETS), help="data set (default ml-1m)")
    p.add_argument("--held-out", type=float, default=0.10, help="share of users held out (default 0.10)")
    p.add_argument("--algos", nargs="*", default=["svd", "myfm"], choices=sorted(ALGORITHMS),
                   help="refitted baselines (default: svd myfm)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny synthetic data (smoke test)")
    p.add_argument("--speed-only", action="store_true", help="fit once and measure only speed and memory")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    data = synthetic(8000) if a.quick else load_or_synthesize(a.dataset)
    params = {"n_epochs": 2, "early_stopping": False} if a.quick else {}  # quick: a smoke test, no search
    algos = [] if a.quick else a.algos
    df = data.ratings
    rng = np.random.default_rng(a.seed)
    held, is_held = hold_out_users(df, a.held_out, rng)
    train = df[~is_held]
    known_items = set(train["item"])
    fold, test = {}, []  # user -> their first 20 ratings (seeded order); test rows after the 20th
    for uid, g in df[is_held & df["item"].isin(known_items).to_numpy()].groupby("user", sort=True):
        if len(g) < 25:
            continue
        g = g.iloc[rng.permutation(len(g))]
        fold[uid] = list(g[["item", "rating"]].itertuples(index=False, name=None))[:20]
        test += list(g[["user", "item", "rating"]].iloc[20:].itertuples(index=False, name=None))
    y = np.array([r for _, _, r in test])
    print(f"{data.describe()}: {len(held)} held-out users, {len(fold)} with >= 25 ratings; {len(train):,} training "
          f"ratings; {len(test):,} test ratings")

    def trainset_with(k: int):
        extra = [(u, i, r) for u, pairs in fold.items() for i, r in pairs[:k]]
        frame = train[["user", "item", "rating"]]
        if extra:
            import pandas as pd
            frame = pd.concat([frame, pd.DataFrame(extra, columns=["user", "item", "rating"])], ignore_index=True)
        return to_surprise_dataset(frame, rating_scale=data.rating_scale).build_full_trainset()

    started = time.perf_counter()
    base = MWGP(random_state=a.seed, **params).fit(trainset_with(0))
    fit_s = time.perf_counter() - started
    if a.speed_only:
        speed = _speed(base, fold)
        print(json.dumps(speed, indent=1))
        print("wrote", write_json("foldin_speed" + ("_quick" if a.quick else f"_{data.name}"),
                                  {"source": data.source, "speed": speed}, a.out))
        return {"speed": speed}
    rows = []
    for k in KS:
        row = {"k": k}
        folded = _copy(base)  # fold-in changes the model it is called on
        for uid, pairs in fold.items():
            folded.fold_in(uid, pairs[:k])
        mean, var = folded.predict_dist(test)
        for name, value in _metrics(y, mean, np.sqrt(var)).items():
            row[f"foldin_{name}"] = value
        if k == 0:
            refit = base
        else:
            refit = MWGP(random_state=a.seed, **params).fit(trainset_with(k))
        mean, var = refit.predict_dist(test)
        for name, value in _metrics(y, mean, np.sqrt(var)).items():
            row[f"refit_{name}"] = value
        for key in algos:
            try:
                other = ALGORITHMS[key].make(a.seed, {}).fit(trainset_with(k))
            except ImportError as exc:
                print(f"skipping {key}: {exc}")
                continue
            yy, m, s = arrays_from_predictions(other.test(test))
            row[f"{key}_rmse"] = float(np.sqrt(np.mean((yy - m) ** 2)))
            if ALGORITHMS[key].uncertainty == "predictive":
                row[f"{key}_std"] = float(np.mean(s))
                row[f"{key}_cov90"] = float(interval_coverage(yy, m, s, levels=(0.9,))[0.9])
        rows.append(row)
        print(table([row]), flush=True)
    cold, last = rows[0], rows[-1]
    gap = (cold["foldin_rmse"] - last["foldin_rmse"]) / max(cold["foldin_rmse"] - last["refit_rmse"], 1e-12)
    stds = [r["foldin_std"] for r in rows]
    speed = _speed(base, fold)
    summary = {"gap_recovered_k20": gap, "std_strictly_decreasing": bool(all(b < a_ for a_, b in zip(stds, stds[1:]))),
               "coverage_range": [min(r["foldin_cov90"] for r in rows), max(r["foldin_cov90"] for r in rows)],
               "fit_s": fit_s, **speed}
    print(table(rows))
    print(json.dumps(summary, indent=1))
    path = write_json("foldin" + ("_quick" if a.quick else f"_{data.name}"),
                      {"source": data.source, "n_users_evaluated": len(fold), "n_test": len(test), "rows": rows,
                       "summary": summary}, a.out)
    print("wrote", path)
    return {"rows": rows, "summary": summary}


def _copy(algo: MWGP) -> MWGP:
    """An independent copy of a fitted model (fold-in changes the model it is called on)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.pt"
        algo.save(path)
        return MWGP.load(path)


def _speed(algo: MWGP, fold: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.pt"
        algo.save(path)
        users = [[f"new-{n}", [[i, r] for i, r in pairs]] for n, pairs in enumerate(list(fold.values())[:200])]
        proc = subprocess.run([sys.executable, "-c", _SPEED, str(path), json.dumps(users, default=str)],
                              capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"speed probe failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
