"""Command line: ``mogp-surprise demo`` (and more subcommands). The only module that prints."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence


def _demo(args: argparse.Namespace) -> int:
    from .experiments import load_or_synthesize, run_demo

    data = load_or_synthesize("ml-100k", data_dir=args.data_dir, download=not args.no_download)
    if data.synthetic:
        print(f"NOTE: {data.reason}\nRunning the demo on seeded SYNTHETIC ratings instead.\n")
    params = json.loads(args.params) if args.params else {}
    if args.quick:
        params.setdefault("n_epochs", 3)
    print(f"Data: {data.source}")
    print("Fitting Surprise SVD and MW-GP on the same 80/20 split ...\n")
    result = run_demo(data, mwgp_params=params, random_state=args.seed)
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="-"))
    print("\n(rmse_q90 / rmse_q80: RMSE over the 90 % / 80 % of test ratings MW-GP is most sure about)\n")
    print("A few test ratings with MW-GP's predictive standard deviation:")
    print(result.examples.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    c = result.cold_start
    print(f"\nCold start: a user never seen in training, item {c['item']}: mean {c['mean']:.2f}, "
          f"std {c['std']:.2f} (average std over known test pairs: {c['mean_std_known']:.2f})")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from .compare import compare, write_results
    from .experiments import load_or_synthesize

    data = load_or_synthesize(args.dataset, data_dir=args.data_dir, download=not args.no_download)
    if data.synthetic:
        if not args.allow_synthetic:
            print(f"error: {data.reason}\n(--allow-synthetic runs the comparison on synthetic ratings instead)",
                  file=sys.stderr)
            return 2
        print(f"NOTE: {data.reason}\nComparing on seeded SYNTHETIC ratings instead (--allow-synthetic).")
    params = json.loads(args.params) if args.params else {}
    print(f"Data: {data.source}; {args.folds}-fold CV (seed {args.seed}); algorithms: {', '.join(args.algos)}")
    result = compare(data.surprise_dataset(), algos=args.algos, n_folds=args.folds, random_state=args.seed,
                     mwgp_params=params, progress=not args.no_progress)
    if args.reuse:
        from .compare import reuse_results
        result = reuse_results(result, args.reuse_from or args.out, args.reuse)
    title = args.title or f"{data.name}, {args.folds}-fold CV"
    paths = write_results(result, args.out, title=title, plots=False)
    print()
    print(result.markdown())
    paths.update(_plots(args.out, title))
    print("Wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _plots(out: str, title: str) -> dict:
    """The QP and calibration PNGs, or one line saying why they were skipped (no matplotlib)."""
    from .compare import plot_results

    try:
        return plot_results(out, title=title)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("matplotlib"):
            raise
        print(f"Plots skipped: {MATPLOTLIB_MISSING}")
        return {}


MATPLOTLIB_MISSING = ("matplotlib is not installed (from a checkout: pip install -e '.[plot]'; otherwise "
                      "pip install matplotlib). `mogp-surprise qp-plot DIR` draws them later from the saved results.")


def _qp_plot(args: argparse.Namespace) -> int:
    from .compare import plot_results

    try:
        paths = plot_results(args.results, title=args.title or "")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("matplotlib"):
            raise
        print(f"error: {MATPLOTLIB_MISSING}", file=sys.stderr)
        return 2
    print("Wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mogp-surprise", description="Uncertainty-aware recommenders (MW-GP).",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = {"formatter_class": argparse.ArgumentDefaultsHelpFormatter}  # every --help states the defaults
    demo = sub.add_parser("demo", help="MW-GP next to Surprise SVD on MovieLens 100K", **fmt)
    demo.add_argument("--data-dir", default=None,
                      help="folder holding ml-100k/ (None: $MOGP_DATA, then Surprise's cache/downloader)")
    demo.add_argument("--no-download", action="store_true", help="never try Surprise's downloader")
    demo.add_argument("--quick", action="store_true", help="a 3-epoch fit (smoke test)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the split and of both models")
    demo.add_argument("--params", default=None,
                      help='MW-GP hyper-parameters as JSON, e.g. \'{"n_inducing": 64}\' (None: the defaults)')
    demo.set_defaults(func=_demo)

    from .compare import ALGORITHMS  # light: algorithms are imported when they run

    cmp_ = sub.add_parser("compare", help="the paper's experiment: algorithms side by side on identical CV folds",
                          **fmt)
    cmp_.add_argument("--dataset", default="ml-100k", choices=["ml-100k", "ml-1m", "ml-10m", "jester"],
                      help="rating data set")
    cmp_.add_argument("--folds", type=int, default=5, help="number of cross-validation folds")
    cmp_.add_argument("--algos", nargs="+", default=["mwgp", "svd", "svdpp"], choices=sorted(ALGORITHMS),
                      help="mwgp, mwgp_paper (the paper's model), svd (BiasedMF), svd8 (n_factors=8), svdpp, "
                           "myfm (needs the myfm extra)")
    cmp_.add_argument("--out", default="results", help="output folder (tables, curves, PNG plots)")
    cmp_.add_argument("--seed", type=int, default=0, help="seed of the folds and of every algorithm")
    cmp_.add_argument("--params", default=None, help="MW-GP hyper-parameters as JSON (None: the defaults)")
    cmp_.add_argument("--data-dir", default=None, help="data folder (None: $MOGP_DATA, then Surprise's cache)")
    cmp_.add_argument("--no-download", action="store_true", help="never try Surprise's downloader")
    cmp_.add_argument("--allow-synthetic", action="store_true", help="fall back to synthetic data if none found")
    cmp_.add_argument("--reuse", nargs="+", default=None, metavar="ALGO",
                      help="take these algorithms' per-fold results from an earlier run on the same folds "
                           "instead of fitting them again")
    cmp_.add_argument("--reuse-from", default=None, metavar="DIR",
                      help="folder of that earlier run (None: --out)")
    cmp_.add_argument("--title", default=None, help="title of the table and plots (None: data set and folds)")
    cmp_.add_argument("--no-progress", action="store_true", help="no progress bars")
    cmp_.set_defaults(func=_compare)

    plot = sub.add_parser("qp-plot", help="re-draw the QP and calibration plots from saved compare results", **fmt)
    plot.add_argument("results", help="folder written by `mogp-surprise compare --out`")
    plot.add_argument("--title", default=None, help="plot title (None: the one saved with the results)")
    plot.set_defaults(func=_qp_plot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
