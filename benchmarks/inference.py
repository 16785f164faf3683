"""Prediction speed and memory: mean + variance for 200K pairs, and 10M pairs in bounded memory.

    python benchmarks/inference.py            # fits on 800K synthetic ratings (2 epochs), then times
    python benchmarks/inference.py --quick
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, peak_rss_mb, synthetic_index, table, write_json  # noqa: E402

from mogp_surprise.core import MWGPConfig, fit_mwgp  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-train", type=int, default=800_000)
    p.add_argument("--n-pairs", type=int, default=200_000)
    p.add_argument("--n-large", type=int, default=10_000_000, help="pairs for the bounded-memory run")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.n_train, a.n_pairs, a.n_large = 20_000, 20_000, 200_000
    index, y, n_levels = synthetic_index(a.n_train, 6040, 3706)
    post = fit_mwgp(index, y, n_levels, MWGPConfig(n_epochs=2, random_state=0, early_stopping=False)).posterior
    rng = np.random.default_rng(1)
    pairs = np.stack([rng.integers(0, n_levels[0], a.n_pairs), rng.integers(0, n_levels[1], a.n_pairs)], 1)
    t_pairs = best_of(lambda: post.predict(pairs), repeat=5)
    rss_before = peak_rss_mb()
    large = np.stack([rng.integers(0, n_levels[0], a.n_large), rng.integers(0, n_levels[1], a.n_large)], 1)
    start = time.perf_counter()
    mean, var = post.predict(large)
    t_large = time.perf_counter() - start
    arrays_mb = (large.nbytes + mean.nbytes + var.nbytes) / 2 ** 20
    rss_after = peak_rss_mb()
    rows = [{"pairs": a.n_pairs, "seconds": t_pairs, "pairs_per_s": a.n_pairs / t_pairs},
            {"pairs": a.n_large, "seconds": t_large, "pairs_per_s": a.n_large / t_large}]
    print(f"mean + variance, m={post.n_inducing}, float32, {torch.get_num_threads()} threads, chunk {post.chunk_size}")
    print(table(rows))
    print(f"{a.n_large:,} pairs: peak RSS {rss_after:.0f} MB (before: {rss_before:.0f} MB; input/output arrays "
          f"alone {arrays_mb:.0f} MB): working memory is bounded by the chunk size")
    path = write_json("inference" + ("_quick" if a.quick else ""), {
        "settings": vars(a), "rows": rows, "peak_rss_mb_before_large": rss_before,
        "peak_rss_mb_after_large": rss_after, "large_arrays_mb": arrays_mb}, a.out)
    print("wrote", path)
    return {"t_pairs": t_pairs, "peak_rss_mb": rss_after}


if __name__ == "__main__":
    main()
