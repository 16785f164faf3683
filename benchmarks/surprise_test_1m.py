"""``MWGP.test`` on a 1M-rating testset: time and peak memory (Surprise's Prediction objects included).

    MOGP_DATA=../shared/data python benchmarks/surprise_test_1m.py     # ML-1M: fit 2 epochs, test all 1M
    python benchmarks/surprise_test_1m.py --quick
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, table, write_json  # noqa: E402

from mogp_surprise import MWGP  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    data = synthetic(5000) if a.quick else load_or_synthesize("ml-1m")
    trainset = data.surprise_dataset().build_full_trainset()
    algo = MWGP(n_epochs=2, random_state=0).fit(trainset)
    testset = trainset.build_testset()
    rss_before = peak_rss_mb()
    start = time.perf_counter()
    predictions = algo.test(testset)
    seconds = time.perf_counter() - start
    rows = [{"ratings": len(predictions), "test_s": seconds, "per_s": len(predictions) / seconds,
             "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss_before}]
    print(f"{data.source}: MWGP.test on every training rating")
    print(table(rows))
    path = write_json("surprise_test_1m" + ("_quick" if a.quick else ""), {"rows": rows}, a.out)
    print("wrote", path)
    return {"rows": rows}


if __name__ == "__main__":
    main()
