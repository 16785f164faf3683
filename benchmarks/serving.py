"""Serving one request at a time: predict, predict_dist, recommend and fold-in + recommend, per call.

    MOGP_DATA=../shared/data python benchmarks/serving.py --dataset ml-1m
    python benchmarks/serving.py --quick

Protocol: MW-GP with defaults fitted on the whole data set (or loaded from ``--model``, written
there after the first fit), then each call is timed on its own (``time.perf_counter`` around one
call, 2,000 calls for a pair, 200 for a list, seeded random known users and items) and we report
the median and the 99th percentile. Surprise ``SVD``'s ``predict`` on the same pairs is the
reference. ``recommend(uid, n=10)`` ranks the whole catalogue for a known user (mean strategy, and
LCB); "fold-in 10 + recommend" is ``recommend(new_uid, n=10, ratings={10 items})``: the new user's
posterior inferred from 10 ratings, then the list; "known user, 3 new ratings" updates a known user's posterior
by 3 ratings of items they have not rated (:mod:`mogp_surprise.core.update`), then the list. The last two rows
store each new user in the model
(``fold_in``), alone and followed by the requests after it (``--model`` of a model with many users shows what
grows with them). The command line's rows time a whole process (``mogp-surprise recommend --model M --user U``,
with and without ``--rate`` of 10 ratings: Python, PyTorch's import, loading the model, one request; median of 5
runs). Finally one-pair predictions are checked against
the batched ``test`` of the same pairs (relative difference; the batched path is float32 by default,
the one-pair path float64).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table, write_json  # noqa: E402

from mogp_surprise.datasets import DATASETS  # noqa: E402
from mogp_surprise import MWGP  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402


def per_call(fn, calls: int) -> tuple[float, float]:
    """Median and 99th percentile of one call's time, in seconds (call j gets argument j)."""
    times = np.empty(calls)
    for j in range(calls):
        start = time.perf_counter()
        fn(j)
        times[j] = time.perf_counter() - start
    return float(np.median(times)), float(np.quantile(times, 0.99))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-1m", choices=sorted(DATASETS))
    p.add_argument("--model", default=None, help="load the fitted model from here (fit and save it if absent)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    from surprise import SVD

    data = synthetic(5000) if a.quick else load_or_synthesize(a.dataset)
    trainset = data.surprise_dataset().build_full_trainset()
    if a.model and Path(a.model).exists():
        algo = MWGP.load(a.model)
        trainset = algo.trainset
    else:
        algo = MWGP(random_state=0, n_epochs=2 if a.quick else 20).fit(trainset)
        if a.model:
            algo.save(a.model)
    rng = np.random.default_rng(0)
    n_pairs, n_lists = (200, 20) if a.quick else (2000, 200)
    users = [trainset.to_raw_uid(int(u)) for u in rng.integers(0, trainset.n_users, n_pairs)]
    items = [trainset.to_raw_iid(int(i)) for i in rng.integers(0, trainset.n_items, n_pairs)]
    low, high = trainset.rating_scale
    folds = [{items[(j * 10 + k) % n_pairs]: float(rng.uniform(low, high)) for k in range(10)}
             for j in range(n_lists)]
    known = []  # 3 new ratings of items each known user has not rated: an update of their posterior
    for j in range(n_lists):
        rated = {i for i, _ in trainset.ur[trainset.to_inner_uid(users[j])]}
        fresh = [int(i) for i in rng.permutation(trainset.n_items)[:50] if int(i) not in rated][:3]
        known.append({trainset.to_raw_iid(i): float(rng.uniform(low, high)) for i in fresh})
    svd = SVD(random_state=0).fit(trainset)
    calls = {
        "predict": (lambda j: algo.predict(users[j], items[j]), n_pairs),
        "predict_dist": (lambda j: algo.predict_dist(users[j], items[j]), n_pairs),
        "SVD predict (reference)": (lambda j: svd.predict(users[j], items[j]), n_pairs),
        "recommend n=10": (lambda j: algo.recommend(users[j], n=10), n_lists),
        "recommend n=10, lcb": (lambda j: algo.recommend(users[j], n=10, strategy="lcb"), n_lists),
        "fold-in 10 + recommend n=10": (lambda j: algo.recommend(f"new-{j}", n=10, ratings=folds[j]), n_lists),
        "known user, 3 new ratings + recommend n=10": (
            lambda j: algo.recommend(users[j], n=10, ratings=known[j]), n_lists),
        # last: each call stores a user in the model (what grows with the users: the id maps, who rated what,
        # the user tables and their float64 copy behind predict are carried over, not rebuilt)
        "fold_in 10 (stored)": (lambda j: algo.fold_in(f"stored-{j}", folds[j]), n_lists),
        "fold_in 10, then recommend, predict, ask n=5": (lambda j: (
            algo.fold_in(f"asked-{j}", folds[j]), algo.recommend(f"asked-{j}", n=10),
            algo.predict(f"asked-{j}", items[j]), algo.ask(f"asked-{j}", n=5)), n_lists),
    }
    rows = []
    for name, (fn, k) in calls.items():
        fn(0)  # first call: caches and compiled kernels
        median, p99 = per_call(fn, k)
        scale, unit = (1e6, "us") if name.split()[0] in ("predict", "predict_dist", "SVD") else (1e3, "ms")
        rows.append({"call": name, "median": median * scale, "p99": p99 * scale, "unit": unit})
    with tempfile.TemporaryDirectory() as tmp:
        path = a.model if a.model else str(Path(tmp) / "model.pt")
        if not a.model:
            algo.save(path)
        command = [sys.executable, "-m", "mogp_surprise.cli", "recommend", "--model", path, "--user", users[0]]
        rate = ["--user", "cli-new", "--rate", *(f"{i}={r:g}" for i, r in folds[0].items())]
        for name, args in (("command line: recommend n=10", command), ("command line: fold-in 10 + recommend n=10",
                                                                      command[:-2] + rate)):
            median, p99 = per_call(lambda j: subprocess.run(args, check=True, capture_output=True), 1 if a.quick else 5)
            rows.append({"call": name, "median": median, "p99": p99, "unit": "s"})
    pairs = [(users[j], items[j], 0.0) for j in range(min(500, n_pairs))]
    batched = algo.test(pairs)
    one = [algo.predict(u, i) for u, i, _ in pairs]
    agreement = {
        "max_rel_diff_mean": max(abs(a_.est - b.est) / abs(b.est) for a_, b in zip(one, batched)),
        "max_rel_diff_var": max(abs(a_.details["var"] - b.details["var"]) / b.details["var"]
                                for a_, b in zip(one, batched)),
    }
    print(f"{data.describe()}: one call at a time, {a.threads} threads")
    print(table(rows))
    print("one pair vs batched test:", {k: f"{v:.2e}" for k, v in agreement.items()})
    path = write_json("serving", {"data": data.describe(), "rows": rows, **agreement}, a.out)
    print(f"wrote {path}")
    return {"path": str(path), "rows": rows, **agreement}


if __name__ == "__main__":
    main()
