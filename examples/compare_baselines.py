"""The paper's experiment: MW-GP next to BiasedMF (SVD) and SVD++ on identical CV folds.

    python examples/compare_baselines.py --dataset ml-1m --folds 5 --out results/ml-1m
    python examples/compare_baselines.py --smoke          # seconds, synthetic data

Writes a paper-style table (RMSE/MAE at q = 100/90/80 %, NLL, CRPS, coverage, times) and QP
plots. The same is available as `mogp-surprise compare`.
"""
from __future__ import annotations

import argparse

from mogp_surprise.comparison import compare, write_results
from mogp_surprise.comparison.data import load_or_synthesize, synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--algos", nargs="+", default=["mwgp", "svd", "svdpp"])
    parser.add_argument("--out", default="results/compare")
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic run for CI")
    args = parser.parse_args()

    if args.smoke:
        data = synthetic(3000)
        result = compare(data.surprise_dataset(), algos=["mwgp", "svd"], n_folds=2,
                         mwgp_params={"n_epochs": 2, "n_inducing": 16})
    else:
        data = load_or_synthesize(args.dataset)
        result = compare(data.surprise_dataset(), algos=args.algos, n_folds=args.folds, progress=True)
    print("data:", data.describe())
    paths = write_results(result, args.out, title=f"{data.name}, {result.settings['n_folds']}-fold CV")
    print(result.markdown())
    print("written:", *paths.values(), sep="\n  ")


if __name__ == "__main__":
    main()
