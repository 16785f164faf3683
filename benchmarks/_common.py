"""Helpers shared by the benchmark scripts (timing, peak memory, data, output)."""
from __future__ import annotations

import json
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(),
            "platform": platform.platform()}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Minimum wall time of ``repeat`` calls (seconds)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def synthetic_index(n_ratings: int, n_users: int | None = None, n_items: int | None = None, seed: int = 0):
    """Random (user, item) index pairs and ratings of a given size (for timing only)."""
    rng = np.random.default_rng(seed)
    n_users = n_users or max(100, n_ratings // 150)
    n_items = n_items or max(50, n_ratings // 250)
    index = np.stack([rng.integers(0, n_users, n_ratings), rng.integers(0, n_items, n_ratings)], 1)
    ratings = rng.integers(1, 6, n_ratings).astype(np.float64)
    return index.astype(np.int64), ratings, (n_users, n_items)


def ratings_index(name: str):
    """A MovieLens data set (``MOGP_DATA``, no download) as (index (n, 2) int64 of inner user and item codes,
    ratings, (n_users, n_items)); raises as ``load_ratings`` does when it is absent."""
    from mogp_surprise.datasets import load_ratings

    df = load_ratings(name, download=False)
    users = df["user"].astype("category").cat.codes.to_numpy()
    items = df["item"].astype("category").cat.codes.to_numpy()
    return (np.stack([users, items], 1).astype(np.int64), df["rating"].to_numpy(float),
            (int(users.max()) + 1, int(items.max()) + 1))


def write_json(name: str, payload: dict[str, Any], out: str | None) -> Path:
    """Write the results to ``out`` (a file, or a folder to hold ``name``.json; None: ``results/name.json``)."""
    path = Path(out) if out else Path(__file__).parent / "results" / f"{name}.json"
    if path.is_dir():  # a folder given as --out failed after every fit (IsADirectoryError)
        path = path / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **payload}, indent=2, default=float))
    return path


def table(rows: list[dict[str, Any]]) -> str:
    """A small fixed-width text table."""
    if not rows:
        return ""
    cols = list(rows[0])
    fmt = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(fmt[c]) for c in cols)]
    lines += ["  ".join(_fmt(r[c]).ljust(fmt[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def hold_out_users(df, share: float, rng: np.random.Generator, column: str = "user") -> tuple[set, np.ndarray]:
    """A seeded ``share`` of the users (or of the levels of another ``column``) of a ratings frame (at
    least one) and the mask of their ratings."""
    levels = df[column].unique()
    held = set(rng.choice(levels, size=max(1, int(share * len(levels))), replace=False).tolist())
    return held, df[column].isin(held).to_numpy()
