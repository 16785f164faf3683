"""Epoch time and peak memory of the paper's model as the data and the catalogue grow (each size in
its own process).

    python benchmarks/scaling.py                    # 1M, 3M, 10M ratings, users and items growing with them
    python benchmarks/scaling.py --catalogue        # 10M ratings over 10K, 100K and 1M users (items = users / 10)
    python benchmarks/scaling.py --quick            # 100K, 300K ratings

The paper's model (``PAPER_MODEL``: no implicit feedback, one noise variance) is the one whose
step can be independent of the catalogue; the default model's implicit-feedback products and
per-level noise KL touch every user and item each step.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, synthetic_index, table, write_json  # noqa: E402


def one(n_ratings: int, n_users: int | None) -> dict:
    """Runs in a child process: generate, fit three epochs, report the epoch time and peak RSS."""
    import numpy as np

    from mogp_surprise.core import MWGPConfig, fit_mwgp
    from mogp_surprise.core.config import PAPER_MODEL
    from mogp_surprise.core.optim import uses_sparse_rows

    if n_users:  # the catalogue sweep: items = users / 10
        n_items = n_users // 10
    else:  # users and items grow with the data
        n_users, n_items = max(1000, n_ratings // 100), max(500, n_ratings // 300)
    index, y, levels = synthetic_index(n_ratings, n_users, n_items)
    rss_data = peak_rss_mb()
    config = MWGPConfig(**{**PAPER_MODEL, "n_epochs": 3, "random_state": 0, "early_stopping": False,
                           "batch_size": 8192})
    # warm-up: the first fit of a process pays one-time imports (Adam pulls in torch._dynamo, ~2 s)
    fit_mwgp(index[:5000], y[:5000], levels, config.replace(n_epochs=1))
    res = fit_mwgp(index, y, levels, config)
    # median of epochs 2 and 3 (the first epoch pays first-touch allocations)
    return {"n_ratings": n_ratings, "n_users": levels[0], "n_items": levels[1],
            "row_sparse": uses_sparse_rows(config, levels, 8192),
            "epoch_s": float(np.median(res.epoch_times[1:])), "fit_3_epochs_s": res.fit_time,
            "peak_rss_mb": peak_rss_mb(), "rss_after_data_mb": rss_data, "loss": res.loss_history[-1]}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    p.add_argument("--catalogue", action="store_true", help="10M ratings over 10K, 100K and 1M users")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", type=int, nargs=2, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.child is not None:
        print(json.dumps(one(a.child[0], a.child[1] or None)))
        return {}
    runs = [(n, 0) for n in a.sizes]
    if a.catalogue:
        runs = [(10_000_000, u) for u in (10_000, 100_000, 1_000_000)]
    if a.quick:
        runs = [(100_000, 0), (300_000, 0)]
    rows = []
    for n, users in runs:
        proc = subprocess.run([sys.executable, __file__, "--child", str(n), str(users)], capture_output=True,
                              text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base = rows[0]
    for r in rows:
        r["epoch_s_per_M"] = r["epoch_s"] / (r["n_ratings"] / 1e6)
        r["vs_first"] = r["epoch_s"] / (base["epoch_s"] * r["n_ratings"] / base["n_ratings"])
    print("one epoch of the paper's model (m=128, r=8, batch 8192, float32); peak RSS includes data generation")
    print(table([{k: r[k] for k in ("n_ratings", "n_users", "n_items", "row_sparse", "epoch_s", "epoch_s_per_M",
                                    "vs_first", "peak_rss_mb")} for r in rows]))
    name = "scaling" + ("_catalogue" if a.catalogue else "") + ("_quick" if a.quick else "")
    path = write_json(name, {"rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
