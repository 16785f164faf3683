"""Epoch time and peak memory of the default model and the paper's as the data and the catalogue grow (each
size and model in its own process).

    python benchmarks/scaling.py                    # 1M, 3M, 10M ratings, users and items growing with them
    python benchmarks/scaling.py --catalogue        # 10M ratings over 10K, 100K and 1M users (items = users / 10)
    python benchmarks/scaling.py --quick            # 30K, 100K ratings (a smoke run)
    python benchmarks/scaling.py --catalogue --rounds 3   # every size three times, alternating: medians
    python benchmarks/scaling.py --models default   # one model only (default: default and paper)

Both models train row-sparsely at these sizes (core/optim.py): the step of the paper's model (``PAPER_MODEL``:
no implicit feedback, one noise variance) and of the default model (``MWGP()``: implicit feedback, a noise
level per user and item, a bilinear term; without the neighbourhood term, which its "auto" setting switches off
at these sizes) costs what its minibatch reads, plus, for the default model, a
fixed number of updates of the implicit-feedback tables per epoch (core/implicit.py).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, synthetic_index, table, write_json  # noqa: E402


def one(n_ratings: int, n_users: int | None, model: str) -> dict:
    """Runs in a child process: generate, fit three epochs, report the epoch time and peak RSS."""
    from mogp_surprise.core import MWGPConfig, fit_mwgp
    from mogp_surprise.core.config import PAPER_MODEL
    from mogp_surprise.core.optim import uses_sparse_rows

    if n_users:  # the catalogue sweep: items = users / 10
        n_items = n_users // 10
    else:  # users and items grow with the data
        n_users, n_items = max(1000, n_ratings // 100), max(500, n_ratings // 300)
    index, y, levels = synthetic_index(n_ratings, n_users, n_items)
    rss_data = peak_rss_mb()
    # the default model as it trains at scale: neighbourhood="auto" switches that term off above ratings x items =
    # 2^32 (every size here but 1M ratings), so it is off at every size and the sizes compare one model
    model_params = PAPER_MODEL if model == "paper" else {"neighbourhood": False}
    config = MWGPConfig(**{**model_params, "n_epochs": 3, "random_state": 0, "early_stopping": False,
                           "batch_size": 8192})
    # warm-up: the first fit of a process pays one-time imports (Adam pulls in torch._dynamo, ~2 s)
    fit_mwgp(index[:5000], y[:5000], levels, config.replace(n_epochs=1))
    res = fit_mwgp(index, y, levels, config)
    # median of epochs 2 and 3 (the first epoch pays first-touch allocations)
    return {"model": model, "n_ratings": n_ratings, "n_users": levels[0], "n_items": levels[1],
            "row_sparse": uses_sparse_rows(config, levels, 8192, n_ratings),
            "epoch_s": float(np.median(res.epoch_times[1:])), "fit_3_epochs_s": res.fit_time,
            "peak_rss_mb": peak_rss_mb(), "rss_after_data_mb": rss_data, "loss": res.loss_history[-1]}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    p.add_argument("--catalogue", action="store_true", help="10M ratings over 10K, 100K and 1M users")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every size this many times, alternating; report medians and the median ratio")
    p.add_argument("--models", nargs="+", default=["default", "paper"], choices=["default", "paper"])
    p.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.child is not None:
        print(json.dumps(one(int(a.child[0]), int(a.child[1]) or None, a.child[2])))
        return {}
    sizes = [(n, 0) for n in a.sizes]
    if a.catalogue:
        sizes = [(10_000_000, u) for u in (10_000, 100_000, 1_000_000)]
    if a.quick:
        sizes = [(30_000, 0), (100_000, 0)]
    runs = [(n, users, model) for model in a.models for n, users in sizes]
    # every round runs each size in its own process (alternating with the other sizes, the order reversed
    # every other round): on a shared machine the per-round ratio to the first size and its median over
    # rounds are steadier than one sweep
    rounds: list[list[dict]] = []
    for k in range(a.rounds):
        done = {}
        for n, users, model in (runs if k % 2 == 0 else runs[::-1]):
            proc = subprocess.run([sys.executable, __file__, "--child", str(n), str(users), model], capture_output=True,
                                  text=True, check=True)
            done[(n, users, model)] = json.loads(proc.stdout.strip().splitlines()[-1])
        rounds.append([done[key] for key in runs])
    rows = []
    for j, (_, _, model) in enumerate(runs):
        first = next(i for i, run in enumerate(runs) if run[2] == model)  # the model's smallest size
        per_round = [r[j] for r in rounds]
        row = dict(per_round[0])
        row["epoch_s_rounds"] = [r["epoch_s"] for r in per_round]
        row["epoch_s"] = float(np.median(row["epoch_s_rounds"]))
        row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in per_round)
        row["epoch_s_per_M"] = row["epoch_s"] / (row["n_ratings"] / 1e6)
        row["vs_first_rounds"] = [r[j]["epoch_s"] / (r[first]["epoch_s"] * r[j]["n_ratings"] / r[first]["n_ratings"])
                                  for r in rounds]
        row["vs_first"] = float(np.median(row["vs_first_rounds"]))
        row["vs_paper"] = None
        rows.append(row)
    for row in rows:  # the default model's epoch against the paper model's at the same size
        paper = [r for r in rows if r["model"] == "paper" and (r["n_ratings"], r["n_users"]) ==
                 (row["n_ratings"], row["n_users"])]
        if row["model"] == "default" and paper:
            row["vs_paper"] = row["epoch_s"] / paper[0]["epoch_s"]
    print("one epoch (m=128, r=8, batch 8192, float32); peak RSS includes data generation; vs_first: epoch per "
          "rating against the model's first size; vs_paper: the default model's epoch / the paper model's")
    if a.rounds > 1:
        print(f"median of {a.rounds} alternating rounds; vs_first: median of the rounds' ratios")
    print(table([{k: r[k] for k in ("model", "n_ratings", "n_users", "n_items", "row_sparse", "epoch_s",
                                    "epoch_s_per_M", "vs_first", "vs_paper", "peak_rss_mb")} for r in rows]))
    if a.rounds > 1:
        print("per round, vs_first of the last size:", " ".join(f"{v:.3f}" for v in rows[-1]["vs_first_rounds"]))
    name = "scaling" + ("_catalogue" if a.catalogue else "") + ("_quick" if a.quick else "")
    path = write_json(name, {"rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
