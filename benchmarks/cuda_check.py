"""The CUDA and NCCL paths, checked and timed on a machine with an NVIDIA GPU.

What it does, each part on its own (a failure is recorded and the next part runs):

- ``agree``: MovieLens 100K (80/20, seed 0), the default model and the paper's model fitted on the CPU
  and on the GPU from the same seed: RMSE, 90 % coverage and fit time of each, and how far the two
  devices' predictions are apart.
- ``serve``: on the GPU-fitted default model, every user-facing call (``predict`` of one pair, which
  reads the tables on the host, ``predict_dist``, ``test``, ``recommend`` by each strategy, ``ask``,
  ``fold_in``), then ``save`` and ``load`` onto the CPU with identical predictions.
- ``nccl``: data-parallel training through ``torch.distributed`` with the NCCL backend (one rank per
  GPU; with one GPU, one rank), against the same fit without a process group.
- ``ml1m`` (not with ``--quick``): ML-1M fitted on the GPU by both models, and by the default model on
  this machine's CPU, timed per epoch.
- ``scale`` (not with ``--quick``): one epoch of 10M synthetic ratings (100K users x 33K items) for
  both models on the GPU.

    MOGP_DATA=../shared/data python benchmarks/cuda_check.py [--quick] [--parts agree serve nccl ml1m scale]

Without CUDA it says so and exits with status 2. Results: ``benchmarks/results/cuda_check.json``
(or ``--out``), rewritten after every part.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, ratings_index, synthetic_index, write_json  # noqa: E402

PARTS = ("agree", "serve", "nccl", "ml1m", "scale")


def _split(name: str, seed: int = 0):
    index, y, levels = ratings_index(name)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    tr, te = order[:cut], order[cut:]
    return index[tr], y[tr], index[te], y[te], levels


def _fit(index, y, levels, device, **params):
    import torch

    from mogp_surprise.core import MWGPConfig, fit_mwgp

    if device == "cuda":
        torch.cuda.synchronize()
    res = fit_mwgp(index, y, levels, MWGPConfig(**{"random_state": 0, "device": device, **params}))
    return res


def _scores(post, index, y) -> dict:
    from mogp_surprise.evaluation.metrics import interval_coverage, rmse

    mean, var = post.predict(index)
    mean = np.clip(mean, 1, 5)
    return {"rmse": rmse(y, mean), "coverage90": interval_coverage(y, mean, np.sqrt(var), [0.9])[0.9]}


def part_agree(quick: bool) -> dict:
    from mogp_surprise.core.config import PAPER_MODEL

    tr_i, tr_y, te_i, te_y, levels = _split("ml-100k")
    out = {}
    for label, params in (("default", {}), ("paper", dict(PAPER_MODEL))):
        if quick:
            params = {**params, "n_epochs": 3, "early_stopping": False}
        row, preds = {}, {}
        for device in ("cpu", "cuda"):
            res = _fit(tr_i, tr_y, levels, device, **params)
            row[device] = {**_scores(res.posterior, te_i, te_y), "fit_s": res.fit_time, "epochs": len(res.epoch_times),
                           "posterior_device": str(res.posterior.device)}
            preds[device] = res.posterior.predict(te_i)
        row["max_abs_mean_diff"] = float(np.max(np.abs(preds["cpu"][0] - preds["cuda"][0])))
        row["max_rel_var_diff"] = float(np.max(np.abs(preds["cpu"][1] / preds["cuda"][1] - 1)))
        out[label] = row
    return out


def part_serve(quick: bool) -> dict:
    import pandas as pd
    import torch

    from mogp_surprise import MWGPRegressor
    from mogp_surprise.datasets import load_ratings

    df = load_ratings("ml-100k", download=False)
    X, y = df[["user", "item"]], df["rating"].to_numpy(float)
    est = MWGPRegressor(random_state=0, device="cuda", **({"n_epochs": 2, "early_stopping": False} if quick else {}))
    est.fit(X, y)
    out = {"posterior_device": str(est.posterior_.device)}
    mean, var = est.predict_dist(X.head(2000))
    out["predict_dist_finite"] = bool(np.isfinite(mean).all() and (var > 0).all())
    u, i = X.iloc[0]["user"], X.iloc[0]["item"]
    one = pd.DataFrame({"user": [u], "item": [i]})
    m1, v1 = est.predict_dist(one)
    start = time.perf_counter()
    for _ in range(200):
        est.predict_dist(one)
    out["predict_dist_one_us"] = (time.perf_counter() - start) / 200 * 1e6
    out["one_vs_batch_mean_diff"] = float(abs(m1[0] - mean[0]))
    for strategy in ("mean", "lcb", "auto", "thompson"):
        rec = est.recommend(u, n=10, strategy=strategy, random_state=0)
        out[f"recommend_{strategy}"] = len(rec)
    start = time.perf_counter()
    for _ in range(20):
        est.recommend(u, n=10, strategy="mean")
    out["recommend_ms"] = (time.perf_counter() - start) / 20 * 1e3
    asked = est.ask("new-user", n=5)
    out["ask_new_user"] = len(asked)
    answers = {it: 4.0 for it in asked["item"].tolist()}
    out["ask_with_answers"] = len(est.ask("new-user", n=5, ratings=answers))
    start = time.perf_counter()
    rec = est.recommend("new-user", n=10, ratings=answers)
    out["foldin_recommend_ms"] = (time.perf_counter() - start) * 1e3
    est.fold_in("new-user", answers)
    m_new, _ = est.predict_dist(pd.DataFrame({"user": ["new-user"], "item": [i]}))
    out["folded_user_mean"] = float(m_new[0])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.pt"
        est.save(path)
        cpu = MWGPRegressor.load(path)
        m2, v2 = cpu.predict_dist(X.head(2000))
        out["loaded_device"] = str(cpu.posterior_.device)
        out["loaded_max_abs_mean_diff"] = float(np.max(np.abs(m2 - mean)))
        out["loaded_max_rel_var_diff"] = float(np.max(np.abs(v2 / var - 1)))
        back = MWGPRegressor.load(path, device="cuda")
        out["loaded_cuda_device"] = str(back.posterior_.device)
    out["surprise"] = _serve_surprise(quick)
    out["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def _serve_surprise(quick: bool) -> dict:
    """The Surprise adapter on the GPU: ``predict`` of one pair (served from host copies of the tables)
    against the batched ``test``."""
    from mogp_surprise import MWGP
    from mogp_surprise.datasets import load_dataset

    trainset = load_dataset("ml-100k").build_full_trainset()
    algo = MWGP(random_state=0, device="cuda", **({"n_epochs": 2, "early_stopping": False} if quick else {}))
    algo.fit(trainset)
    pairs = [(u, i, r) for u, i, r in trainset.build_testset()[:500]]
    batched = algo.test(pairs)
    algo.predict(*pairs[0][:2])  # the first call builds the serving tables (and compiles their kernel)
    start = time.perf_counter()
    single = [algo.predict(u, i, r) for u, i, r in pairs]
    per_call = (time.perf_counter() - start) / len(pairs) * 1e6
    return {"predict_one_us": per_call,
            "max_abs_est_diff": max(abs(a.est - b.est) for a, b in zip(batched, single)),
            "max_rel_var_diff": max(abs(a.details["var"] / b.details["var"] - 1) for a, b in zip(batched, single))}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_nccl() -> dict:
    """One rank: ML-100K, the default model, 3 epochs on the GPU of its LOCAL_RANK (nccl)."""
    from mogp_surprise.core import MWGPConfig, fit_mwgp
    from mogp_surprise.core.distributed import init_from_env, shutdown

    parallel = init_from_env(device="cuda")
    tr_i, tr_y, te_i, te_y, levels = _split("ml-100k")
    cfg = MWGPConfig(random_state=0, device="cuda", n_epochs=3, early_stopping=False)
    res = fit_mwgp(tr_i, tr_y, levels, cfg, parallel=parallel)
    info = {"rank": parallel.rank, "world": parallel.world_size, "collective_device": parallel.device,
            "loss": res.loss_history, "epoch_s": res.epoch_times, **_scores(res.posterior, te_i, te_y)}
    shutdown()
    return info


def part_nccl(quick: bool) -> dict:
    import torch

    from mogp_surprise.core import MWGPConfig, fit_mwgp

    tr_i, tr_y, te_i, te_y, levels = _split("ml-100k")
    alone = fit_mwgp(tr_i, tr_y, levels, MWGPConfig(random_state=0, device="cuda", n_epochs=3, early_stopping=False))
    out = {"alone": {"loss": alone.loss_history, **_scores(alone.posterior, te_i, te_y)}}
    gpus = torch.cuda.device_count()
    for world in sorted({1, gpus}):
        port = _free_port()
        procs = []
        for rank in range(world):
            env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
                   "RANK": str(rank), "LOCAL_RANK": str(rank)}
            procs.append(subprocess.Popen([sys.executable, __file__, "--child-nccl"], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        ranks = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=600)
            if p.returncode:
                ranks.append({"exit": p.returncode, "stderr_tail": stderr[-2000:]})
            else:
                ranks.append(json.loads(stdout.strip().splitlines()[-1]))
        out[f"world{world}"] = ranks
        if "loss" in ranks[0]:
            out[f"world{world}_max_rel_loss_diff_vs_alone"] = float(np.max(np.abs(
                np.asarray(ranks[0]["loss"]) / np.asarray(alone.loss_history) - 1)))
    return out


def part_ml1m(quick: bool) -> dict:
    from mogp_surprise.core.config import PAPER_MODEL

    tr_i, tr_y, te_i, te_y, levels = _split("ml-1m")
    out = {}
    for label, device, params in (("default_cuda", "cuda", {}), ("paper_cuda", "cuda", dict(PAPER_MODEL)),
                                  ("default_cpu", "cpu", {})):
        res = _fit(tr_i, tr_y, levels, device, **params)
        out[label] = {**_scores(res.posterior, te_i, te_y), "fit_s": res.fit_time, "epochs": len(res.epoch_times),
                      "epoch_median_s": float(np.median(res.epoch_times))}
    return out


def part_scale(quick: bool) -> dict:
    import torch

    from mogp_surprise.core.config import PAPER_MODEL

    n = 10_000_000
    index, y, levels = synthetic_index(n, n // 100, n // 300)
    out = {}
    for label, params in (("paper", dict(PAPER_MODEL)), ("default", {})):
        torch.cuda.reset_peak_memory_stats()
        res = _fit(index, y, levels, "cuda", **{**params, "n_epochs": 2, "early_stopping": False})
        out[label] = {"epoch_s": res.epoch_times, "fit_s": res.fit_time,
                      "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20, "peak_rss_mb": peak_rss_mb()}
        print(json.dumps({label: out[label]}), flush=True)
    return out


def _nccl_version() -> str | None:
    import torch
    import torch.distributed as dist

    try:
        return ".".join(map(str, torch.cuda.nccl.version())) if dist.is_nccl_available() else None
    except (AttributeError, RuntimeError):
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="few epochs, no ML-1M and no 10M-rating part")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--child-nccl", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    import torch

    if a.child_nccl:
        print(json.dumps(child_nccl()))
        return 0
    if not torch.cuda.is_available():
        print("CUDA is not available here: nothing to check", file=sys.stderr)
        return 2
    parts = a.parts or (PARTS[:3] if a.quick else PARTS)
    results = {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
               "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": _nccl_version()}
    for name in parts:
        start = time.perf_counter()
        try:
            results[name] = globals()[f"part_{name}"](a.quick)
        except Exception:  # a broken part is a finding: record it and go on
            results[name] = {"error": traceback.format_exc()[-3000:]}
        results[name]["wall_s"] = time.perf_counter() - start
        print(json.dumps({name: results[name]}, default=float), flush=True)
        write_json("cuda_check", results, a.out)
    failed = [n for n in parts if "error" in results[n]]
    print("parts failed:", failed or "none")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
