"""The commands that run experiments: ``demo``, ``compare`` and ``qp-plot``."""
from __future__ import annotations

import argparse
import sys

from ._args import hyper_params


def demo_command(args: argparse.Namespace) -> int:
    from ..comparison.data import load_or_synthesize
    from ..comparison.demo import run_demo

    data = load_or_synthesize("ml-100k", data_dir=args.data_dir, download=not args.no_download)
    if data.synthetic:
        print(f"NOTE: {data.reason}\nRunning the demo on seeded SYNTHETIC ratings instead.\n")
    params = hyper_params(args)
    if args.quick:  # a smoke test: 3 epochs, without early stopping's search of settings and epochs
        params = {"n_epochs": 3, "early_stopping": False, **params}
    print(f"Data: {data.source}")
    print("Fitting Surprise SVD and MW-GP on the same 80/20 split ...\n")
    result = run_demo(data, mwgp_params=params, random_state=args.seed)
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="-"))
    print("\n(rmse_q90 / rmse_q80: RMSE over the 90 % / 80 % of test ratings MW-GP is most sure about)\n")
    print("A few test ratings with MW-GP's predictive standard deviation (svd, mwgp_est: the estimates within the "
          "rating scale, as Surprise's test gives them):")
    print(result.examples.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    c = result.cold_start
    print(f"\nCold start: a user never seen in training, item {c['item']}: mean {c['mean']:.2f}, "
          f"std {c['std']:.2f} (average std over known test pairs: {c['mean_std_known']:.2f})")
    rec = result.recommendations
    fmt = {"est": lambda v: f"{v:.2f}", "std": lambda v: f"{v:.2f}", "gain": lambda v: f"{v:.4f}"}
    print(f"\nTop 5 for user {rec['user']} (a typical user of the training data; est: the mean within the scale):")
    print(rec["user_top"].to_string(index=False, formatters=fmt))
    print("\nTop 5 for a new user, before any rating (cold start: the population's favourites, ranked by mean - std, "
          "the items the model is surest the user will like):")
    print(rec["new_top"].to_string(index=False, formatters=fmt))
    print("\nOnboarding: among the films the new user has seen, ask about these first (mogp-surprise ask; gain: how "
          "much the answer is expected to narrow their predictions):")
    print(rec["questions"].to_string(index=False, formatters=fmt))
    shown = ", ".join(f"{item}={r:g}" for item, r in rec["new_ratings"].items())
    print(f"\n... and after folding in the answers {shown} (no refit; mogp-surprise recommend --rate):")
    print(rec["new_top_folded"].to_string(index=False, formatters=fmt))
    return 0


def compare_command(args: argparse.Namespace) -> int:
    from ..comparison import compare, write_results
    from ..comparison.data import load_or_synthesize

    data = load_or_synthesize(args.dataset, data_dir=args.data_dir, download=not args.no_download)
    if data.synthetic:
        if not args.allow_synthetic:
            print(f"error: {data.reason}\n(--allow-synthetic runs the comparison on synthetic ratings instead)",
                  file=sys.stderr)
            return 2
        print(f"NOTE: {data.reason}\nComparing on seeded SYNTHETIC ratings instead (--allow-synthetic).")
    from ..comparison.report import check_results_folder

    params = hyper_params(args)
    reuse = args.reuse or []
    check_results_folder(args.out, [*args.algos, *reuse], args.overwrite)  # before any fit, as compare checks
    print(f"Data: {data.source}; {args.folds}-fold CV (seed {args.seed}); algorithms: {', '.join(args.algos)}")
    result = compare(data.surprise_dataset(), algos=args.algos, n_folds=args.folds, random_state=args.seed,
                     mwgp_params=params, progress=not args.no_progress, rank_k=args.rank_k,
                     rank_threshold=args.rank_threshold, reuse=reuse, reuse_from=args.reuse_from or args.out)
    title = args.title or f"{data.name}, {args.folds}-fold CV"
    paths = write_results(result, args.out, title=title, plots=False, overwrite=args.overwrite)
    print()
    print(result.markdown())
    plotted = _plots(result, args.out, title)
    if plotted is None:
        print(f"Plots skipped: {MATPLOTLIB_MISSING}")
    paths.update(plotted or {})
    print("Wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _plots(results, out: str, title: str) -> dict | None:
    """The QP and calibration PNGs of a CompareResult or a results folder; None without matplotlib."""
    from ..comparison import plot_results

    try:
        return plot_results(results, out, title=title)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("matplotlib"):
            raise
        return None


MATPLOTLIB_MISSING = ("matplotlib is not installed (from a checkout: pip install -e '.[plot]'; otherwise "
                      "pip install matplotlib). `mogp-surprise qp-plot DIR` draws them later from the saved results.")


def qp_plot_command(args: argparse.Namespace) -> int:
    paths = _plots(args.results, args.results, args.title or "")
    if paths is None:
        print(f"error: {MATPLOTLIB_MISSING}", file=sys.stderr)
        return 2
    print("Wrote " + ", ".join(str(p) for p in paths.values()))
    return 0
