"""Data-parallel training: epoch time and memory on 1 vs 2 processes (gloo, this machine), one model.

Each configuration runs as W processes started the way ``torchrun`` starts them (``env://`` on
127.0.0.1) with T threads each: 1 process x 2 threads (all of a 2-core machine, no data
parallelism), 1 x 1 and 2 x 1 (a second process on its own core: the speed-up data parallelism
gives per added core).
Every process reads the same ratings and trains on its half of every minibatch; the figures are
rank 0's (median of epochs 2-3; epoch 2 with --quick) and every rank's peak RSS.

    MOGP_DATA=../shared/data python benchmarks/distributed.py            # ML-1M (synthetic 1M without data)
    python benchmarks/distributed.py --quick                             # 10K synthetic ratings
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, ratings_index, synthetic_index, table, write_json  # noqa: E402

MODELS = ("paper", "default")


def load(quick: bool):
    """ML-1M as index arrays if it is there, else seeded synthetic ratings."""
    if not quick:
        try:
            return (*ratings_index("ml-1m"), "ml-1m")
        except (FileNotFoundError, OSError, ValueError):
            pass
    n = 10_000 if quick else 1_000_000
    index, y, levels = synthetic_index(n)
    return index, y, levels, f"synthetic {n:,}"


def child(model: str, quick: bool) -> dict:
    import numpy as np
    import torch

    from mogp_surprise.core import MWGPConfig, fit_mwgp
    from mogp_surprise.core.config import PAPER_MODEL
    from mogp_surprise.core.distributed import init_from_env, shutdown

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    parallel = init_from_env() if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    index, y, levels, source = load(quick)
    params = {**(PAPER_MODEL if model == "paper" else {}), "early_stopping": False, "n_epochs": 2 if quick else 3,
              "random_state": 0}
    fit_mwgp(index[:5000], y[:5000], levels, MWGPConfig(**{**params, "n_epochs": 1}), parallel=parallel)  # warm-up
    res = fit_mwgp(index, y, levels, MWGPConfig(**params), parallel=parallel)
    shutdown()
    return {"source": source, "epoch_s": float(np.median(res.epoch_times[1:])), "loss": res.loss_history[-1],
            "peak_rss_mb": peak_rss_mb(), "rank": parallel.rank if parallel else 0}


def launch(world: int, threads: int, model: str, quick: bool) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
               "RANK": str(rank), "LOCAL_RANK": str(rank), "OMP_NUM_THREADS": str(threads)}
        cmd = [sys.executable, __file__, "--child", model] + (["--quick"] if quick else [])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=3600)
        if p.returncode:
            raise RuntimeError(f"a rank failed (exit {p.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--layouts", nargs="+", default=None,
                   help="PROCESSESxTHREADS configurations to time (default 1x2 1x1 2x1; --quick: 1x1 2x1)")
    p.add_argument("--child", choices=MODELS, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.quick)))
        return {}
    layouts = a.layouts or (["1x1", "2x1"] if a.quick else ["1x2", "1x1", "2x1"])
    rows = []
    for model in MODELS[:1] if a.quick else MODELS:
        for layout in layouts:
            world, threads = (int(v) for v in layout.split("x"))
            ranks = launch(world, threads, model, a.quick)
            rows.append({"model": model, "processes": world, "threads_each": threads, "data": ranks[0]["source"],
                         "epoch_s": ranks[0]["epoch_s"], "final_loss": ranks[0]["loss"],
                         "peak_rss_mb_per_rank": max(r["peak_rss_mb"] for r in ranks)})
    print(f"one epoch on processes x threads ({os.cpu_count()} cores here)")
    print(table(rows))
    path = write_json("distributed" + ("_quick" if a.quick else ""), {"rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
