"""Epoch time and peak memory for 1M / 3M / 10M synthetic ratings (each size in its own process).

    python benchmarks/scaling.py                    # 1M, 3M, 10M
    python benchmarks/scaling.py --quick            # 100K, 300K
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, table, write_json  # noqa: E402


def one(n_ratings: int) -> dict:
    """Runs in a child process: generate, fit three epochs, report the epoch time and peak RSS."""
    from mogp_surprise.core import MWGPConfig, fit_mwgp
    from mogp_surprise.datasets import make_synthetic_ratings

    df = make_synthetic_ratings(n_users=max(1000, n_ratings // 100), n_items=max(500, n_ratings // 300),
                                n_ratings=n_ratings, random_state=0)
    users = df["user"].astype("category").cat.codes.to_numpy()
    items = df["item"].astype("category").cat.codes.to_numpy()
    import numpy as np
    index = np.stack([users, items], 1).astype(np.int64)
    y = df["rating"].to_numpy(float)
    del df
    rss_data = peak_rss_mb()
    # warm-up: the first fit of a process pays one-time imports (Adam pulls in torch._dynamo, ~2 s)
    fit_mwgp(index[:5000], y[:5000], (users.max() + 1, items.max() + 1), MWGPConfig(n_epochs=1, random_state=0, early_stopping=False))
    res = fit_mwgp(index, y, (users.max() + 1, items.max() + 1), MWGPConfig(n_epochs=3, random_state=0, early_stopping=False))
    # median of epochs 2 and 3 (the first epoch pays first-touch allocations)
    return {"n_ratings": n_ratings, "n_users": int(users.max() + 1), "n_items": int(items.max() + 1),
            "epoch_s": float(np.median(res.epoch_times[1:])), "fit_3_epochs_s": res.fit_time,
            "peak_rss_mb": peak_rss_mb(), "rss_after_data_mb": rss_data, "loss": res.loss_history[-1]}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.child is not None:
        print(json.dumps(one(a.child)))
        return {}
    if a.quick:
        a.sizes = [100_000, 300_000]
    rows = []
    for n in a.sizes:
        proc = subprocess.run([sys.executable, __file__, "--child", str(n)], capture_output=True, text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base = rows[0]
    for r in rows:
        r["epoch_s_per_M"] = r["epoch_s"] / (r["n_ratings"] / 1e6)
        r["vs_linear"] = r["epoch_s"] / (base["epoch_s"] * r["n_ratings"] / base["n_ratings"])
    print("one epoch (m=128, r=8, batch 8192, float32); peak RSS includes data generation")
    print(table([{k: r[k] for k in ("n_ratings", "epoch_s", "epoch_s_per_M", "vs_linear", "peak_rss_mb")}
                 for r in rows]))
    path = write_json("scaling" + ("_quick" if a.quick else ""), {"rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
