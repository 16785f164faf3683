"""Command line: ``mogp-surprise demo | compare | qp-plot | fit | recommend | ask | predict``. The only module that prints."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

import numpy as np


def _demo(args: argparse.Namespace) -> int:
    from .comparison.data import load_or_synthesize
    from .comparison.demo import run_demo

    data = load_or_synthesize("ml-100k", data_dir=args.data_dir, download=not args.no_download)
    if data.synthetic:
        print(f"NOTE: {data.reason}\nRunning the demo on seeded SYNTHETIC ratings instead.\n")
    params = json.loads(args.params) if args.params else {}
    if args.quick:  # a smoke test: 3 epochs, without early stopping's search of settings and epochs
        params = {"n_epochs": 3, "early_stopping": False, **params}
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
    rec = result.recommendations
    fmt = {"est": lambda v: f"{v:.2f}", "std": lambda v: f"{v:.2f}", "gain": lambda v: f"{v:.4f}"}
    print(f"\nTop 5 for user {rec['user']} (a typical user of the training data; est: the mean within the scale):")
    print(rec["user_top"].to_string(index=False, formatters=fmt))
    print("\nTop 5 for a new user, before any rating (cold start: the population's favourites):")
    print(rec["new_top"].to_string(index=False, formatters=fmt))
    print("\nOnboarding: among the films the new user has seen, ask about these first (mogp-surprise ask; gain: how much "
          "the answer is expected to narrow their predictions):")
    print(rec["questions"].to_string(index=False, formatters=fmt))
    shown = ", ".join(f"{item}={r:g}" for item, r in rec["new_ratings"].items())
    print(f"\n... and after folding in the answers {shown} (no refit; mogp-surprise recommend --rate):")
    print(rec["new_top_folded"].to_string(index=False, formatters=fmt))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from .comparison import compare, write_results
    from .comparison.data import load_or_synthesize

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
                     mwgp_params=params, progress=not args.no_progress, rank_k=args.rank_k,
                     rank_threshold=args.rank_threshold)
    if args.reuse:
        from .comparison import reuse_results
        result = reuse_results(result, args.reuse_from or args.out, args.reuse)
    title = args.title or f"{data.name}, {args.folds}-fold CV"
    paths = write_results(result, args.out, title=title, plots=False)
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
    from .comparison import plot_results

    try:
        return plot_results(results, out, title=title)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("matplotlib"):
            raise
        return None


MATPLOTLIB_MISSING = ("matplotlib is not installed (from a checkout: pip install -e '.[plot]'; otherwise "
                      "pip install matplotlib). `mogp-surprise qp-plot DIR` draws them later from the saved results.")


def _qp_plot(args: argparse.Namespace) -> int:
    paths = _plots(args.results, args.results, args.title or "")
    if paths is None:
        print(f"error: {MATPLOTLIB_MISSING}", file=sys.stderr)
        return 2
    print("Wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


# -- serving: fit, recommend, predict --------------------------------------------------------------
Z90 = 1.6448536269514722  # the 90 % central interval is mean +- Z90 * std


def _fit(args: argparse.Namespace) -> int:
    import os
    import time

    from .adapters.surprise_algo import MWGP
    from .core.config import MWGPConfig
    from .core.distributed import DistributedError, init_from_env, launched_by_torchrun, shutdown
    from .datasets import DATASETS, load_item_titles, load_ratings, read_ratings_file, to_surprise_dataset

    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint FILE (the checkpoint to continue from)")
    params = {"random_state": args.seed, **(json.loads(args.params) if args.params else {})}
    distributed = launched_by_torchrun()
    main_rank, world = True, 1
    try:
        if distributed:  # under torchrun: one model trained by every process; rank 0 reports and saves
            config = MWGPConfig(**{k: v for k, v in params.items() if k in MWGPConfig.names()})
            parallel = init_from_env(config.torch_device())
            main_rank, world = parallel.is_main, parallel.world_size
            if not main_rank:
                logging.getLogger().setLevel(logging.ERROR)
        say = print if main_rank else (lambda *a, **k: None)
        if args.ratings:
            df = read_ratings_file(args.ratings, args.sep)
            scale = tuple(args.rating_scale) if args.rating_scale else (float(df.rating.min()), float(df.rating.max()))
            titles, source = None, f"{args.ratings} ({len(df):,} ratings)"
        else:
            df = load_ratings(args.dataset, data_dir=args.data_dir, download=not args.no_download)
            scale = tuple(args.rating_scale) if args.rating_scale else DATASETS[args.dataset].rating_scale
            titles, source = load_item_titles(args.dataset, args.data_dir), f"{args.dataset} ({len(df):,} ratings)"
        trainset = to_surprise_dataset(df[["user", "item", "rating"]], rating_scale=scale).build_full_trainset()
        say(f"Fitting MW-GP on {source}: {trainset.n_users:,} users, {trainset.n_items:,} items, rating scale "
            f"{scale[0]:g}..{scale[1]:g}" + (f"; data-parallel on {world} processes" if distributed else ""))
        started = time.perf_counter()
        algo = MWGP(**params, verbose=main_rank and not args.no_progress).fit(
            trainset, checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every, resume=args.resume,
            distributed=distributed)
        elapsed = time.perf_counter() - started
    except DistributedError as exc:  # a broken group cannot be torn down cleanly: report and leave at once
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    finally:  # (not reached after os._exit)
        if distributed:
            shutdown()
    if not main_rank:
        return 0
    if titles is not None:
        algo.item_names_ = titles
    algo.save(args.out)
    mean, _ = algo.predict_dist(trainset.build_testset())
    y = np.array([r for (_, _, r) in trainset.all_ratings()])
    est = np.clip(mean, *scale)
    print(f"Trained on {trainset.n_ratings:,} ratings in {elapsed:.1f} s ({len(algo.loss_history_)} epochs); "
          f"training RMSE {np.sqrt(np.mean((est - y) ** 2)):.4f}, MAE {np.mean(np.abs(est - y)):.4f}. "
          f"Saved to {args.out}")
    return 0


def _resolve(known, raw: str):
    """A raw id from the command line as the model knows it (``known``: its IdEncoder): the string, else the
    same id as an int."""
    from .adapters._common import id_twin

    if raw in known:
        return raw
    twin = id_twin(raw)
    return twin if twin is not None and twin in known else raw


def _parse_rates(algo, rates: list[str]) -> dict:
    out = {}
    for entry in rates:
        item, sep, value = entry.rpartition("=")
        if not sep or not item:
            raise ValueError(f"--rate takes ITEM=RATING, got {entry!r}")
        try:
            out[_resolve(algo._encoders()[1], item)] = float(value)
        except ValueError:
            raise ValueError(f"--rate {entry!r}: the rating {value!r} is not a number") from None
    if len(out) != len(rates):
        raise ValueError("--rate gives an item more than once")
    return out


def _model_and_user(args: argparse.Namespace):
    """The saved model, the user id as the model knows it, whether it is known, and the --rate ratings."""
    from .adapters.surprise_algo import MWGP

    algo = MWGP.load(args.model)
    users = algo._encoders()[0]
    user = _resolve(users, args.user)
    return algo, user, user in users, _parse_rates(algo, args.rate) if args.rate else None


def _recommend(args: argparse.Namespace) -> int:
    from .core.recommend import THOMPSON_SCALE
    algo, user, known, ratings = _model_and_user(args)
    frame = algo.recommend(user, n=args.n, strategy=args.strategy, kappa=args.kappa, ratings=ratings, random_state=args.seed)
    if ratings:
        print(f"User {user}: {len(ratings)} rating(s) folded in" + (" on top of their training ratings" if known
                                                                   else " (not in the training data)"))
    elif not known:
        print(f"User {user} is not in the model and no --rate was given: cold-start ranking (the population's)")
    k, t = (1.0, THOMPSON_SCALE) if args.kappa is None else (args.kappa, args.kappa)
    score = {"mean": "mean", "lcb": f"mean - {k:g} std", "ucb": f"mean + {k:g} std", "thompson": f"one posterior "
             f"draw, spread x {t:g} (Thompson sampling)", "auto": f"mean - {k:g} std below 20 ratings, else mean"}[args.strategy]
    print(f"Top {len(frame)} by {score}; est: the mean within the rating scale; 90 % interval: mean +- {Z90:.3f} std")
    _print_rows(algo, frame)
    return 0


def _ask(args: argparse.Namespace) -> int:
    algo, user, known, ratings = _model_and_user(args)
    frame = algo.ask(user, n=args.n, ratings=ratings)
    who = "a known user: their training ratings count too" if known else "not in the training data"
    print(f"User {user} ({who}; {f'{len(ratings)} answer(s) folded in' if ratings else 'no answers yet'}). Ask "
          f"about these {len(frame)} item(s) next, best first:\ngain: the expected drop of the variance of this "
          "user's predictions over the catalogue that the answer brings; chance: that the user has seen the item")
    _print_rows(algo, frame, extra=(("gain", "{:.4f}"), ("answer_prob", "{:.2f}")))
    return 0


def _print_rows(algo, frame, extra: tuple = ()) -> None:
    """One line per item: [rank,] item, [title,] [extra columns,] est (the mean clipped to the rating scale), std
    and the 90 % interval within the rating scale."""
    titles, (low, high), ranked = getattr(algo, "item_names_", None) or {}, algo.trainset.rating_scale, "rank" in frame
    rows = []
    for r in frame.astype({"item": object}).to_dict("records"):  # (iterrows would turn int ids into floats)
        row = ([str(r["rank"])] if ranked else []) + [str(r["item"])] + (
            [titles.get(str(r["item"]), "")[:45]] if titles else []) + [fmt.format(r[col]) for col, fmt in extra]
        lo, hi = max(low, r["mean"] - Z90 * r["std"]), min(high, r["mean"] + Z90 * r["std"])
        row += [f"{min(max(r['mean'], low), high):.2f}", f"{r['std']:.2f}", f"[{lo:.2f}, {hi:.2f}]"]
        rows.append(row)
    head = ((["rank"] if ranked else []) + ["item"] + (["title"] if titles else [])
            + [{"answer_prob": "chance"}.get(col, col) for col, _ in extra] + ["est", "std", "90 % interval"])
    widths = [max(len(h), *(len(row[k]) for row in rows)) if rows else len(h) for k, h in enumerate(head)]
    for line in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())


def _predict(args: argparse.Namespace) -> int:
    import pandas as pd

    from .adapters.surprise_algo import MWGP

    algo = MWGP.load(args.model)
    users, items = algo._encoders()
    user, item = _resolve(users, args.user), _resolve(items, args.item)
    mean, var = algo.predict_dist(user, item)
    for what, raw, known in (("user", user, users), ("item", item, items)):
        if raw not in known:
            print(f"{what} {raw} is not in the model (cold start)")
    _print_rows(algo, pd.DataFrame({"item": pd.Series([item], dtype=object), "mean": [mean],
                                    "std": [float(np.sqrt(var))]}))
    return 0


def _data_options(parser: argparse.ArgumentParser, what: str = "folder holding the data set") -> None:
    """The options every command that loads data and fits MW-GP shares."""
    parser.add_argument("--data-dir", default=None, help=f"{what} (None: $MOGP_DATA, then Surprise's cache)")
    parser.add_argument("--no-download", action="store_true", help="never try Surprise's downloader")
    parser.add_argument("--params", default=None, help="MW-GP hyper-parameters as JSON, e.g. '{\"n_inducing\": 64}' "
                                                       "(None: the defaults)")


class _Extend(argparse.Action):
    """A list option given more than once adds up (``--rate 50=5 --rate 100=4``), instead of keeping the last;
    the first use replaces the default (argparse's "extend" would add to it)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = getattr(namespace, self.dest)
        setattr(namespace, self.dest, ([] if given is self.default else list(given)) + list(values))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mogp-surprise", description="Uncertainty-aware recommenders (MW-GP).",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = {"formatter_class": argparse.ArgumentDefaultsHelpFormatter}  # every --help states the defaults
    demo = sub.add_parser("demo", help="MW-GP next to Surprise SVD on MovieLens 100K", **fmt)
    _data_options(demo, "folder holding ml-100k/")
    demo.add_argument("--quick", action="store_true", help="a 3-epoch fit without early stopping (smoke test)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the split and of both models")
    demo.set_defaults(func=_demo)

    from .comparison.algorithms import ALGORITHMS  # light: each algorithm is imported when it is built

    cmp_ = sub.add_parser("compare", help="the paper's experiment: algorithms side by side on identical CV folds",
                          **fmt)
    cmp_.add_argument("--dataset", default="ml-100k", choices=["ml-100k", "ml-1m", "ml-10m", "jester"],
                      help="rating data set")
    cmp_.add_argument("--folds", type=int, default=5, help="number of cross-validation folds")
    cmp_.add_argument("--algos", nargs="+", action=_Extend, default=["mwgp", "svd", "svdpp"],
                      choices=sorted(ALGORITHMS),
                      help="mwgp, mwgp_paper (the paper's model), svd (BiasedMF), svd8 (n_factors=8), svdpp, "
                           "myfm (needs the myfm extra), myfm_flipped (myFM with implicit features on both sides; "
                           "myfm extra), bgplvm (the Bayesian GPLVM; needs the bgplvm extra)")
    cmp_.add_argument("--out", default="results", help="output folder (tables, curves, PNG plots)")
    cmp_.add_argument("--seed", type=int, default=0, help="seed of the folds and of every algorithm")
    cmp_.add_argument("--rank-k", type=int, default=10, metavar="K",
                      help="top-K of the ranking metrics (precision@K, recall@K, top-K precision, NDCG@K)")
    cmp_.add_argument("--rank-threshold", type=float, default=None, metavar="R",
                      help="a test rating >= R is relevant (None: 3/4 of the way up the rating scale, 4 on 1-5)")
    _data_options(cmp_)
    cmp_.add_argument("--allow-synthetic", action="store_true", help="fall back to synthetic data if none found")
    cmp_.add_argument("--reuse", nargs="+", action=_Extend, default=None, metavar="ALGO",
                      help="take these algorithms' per-fold results from an earlier run on the same folds "
                           "instead of fitting them again")
    cmp_.add_argument("--reuse-from", default=None, metavar="DIR",
                      help="folder of that earlier run (None: --out)")
    cmp_.add_argument("--title", default=None, help="title of the table and plots (None: data set and folds)")
    cmp_.add_argument("--no-progress", action="store_true", help="no progress bars")
    cmp_.set_defaults(func=_compare)

    fit = sub.add_parser("fit", help="fit MW-GP on a data set or a ratings file and save the model (under "
                                     "torchrun: data-parallel on every process)", **fmt)
    src = fit.add_mutually_exclusive_group()
    src.add_argument("--dataset", default="ml-100k", choices=["ml-100k", "ml-1m", "ml-10m", "jester"],
                     help="a built-in data set (item titles are kept where the data set has them)")
    src.add_argument("--ratings", default=None, metavar="FILE",
                     help="a text file of user, item, rating[, ...] rows (ids as strings; a header row is skipped)")
    fit.add_argument("--sep", default=",", help="column separator of --ratings (e.g. '\t')")
    fit.add_argument("--rating-scale", type=float, nargs=2, default=None, metavar=("LOW", "HIGH"),
                     help="rating scale (None: the data set's, or the file's smallest and largest rating)")
    fit.add_argument("--out", default="model.pt", help="where to save the model")
    fit.add_argument("--seed", type=int, default=0, help="random_state of the fit")
    fit.add_argument("--checkpoint", default=None, metavar="FILE",
                     help="save the training state to FILE every --checkpoint-every epochs (None: no checkpoints)")
    fit.add_argument("--checkpoint-every", type=int, default=1, metavar="K", help="epochs between checkpoints")
    fit.add_argument("--resume", action="store_true",
                     help="continue from --checkpoint if it exists (same data and parameters)")
    _data_options(fit)
    fit.add_argument("--no-progress", action="store_true", help="no progress bar")
    fit.set_defaults(func=_fit)

    rec = sub.add_parser("recommend", help="top-N items for a user from a saved model, with uncertainty", **fmt)
    rec.add_argument("--model", required=True, help="a model file written by `mogp-surprise fit` or MWGP.save")
    rec.add_argument("--user", required=True, help="raw user id (unknown: cold start, or folded in with --rate)")
    rec.add_argument("-n", type=int, default=10, help="number of items")
    rec.add_argument("--strategy", default="auto", choices=["auto", "mean", "lcb", "ucb", "thompson"],
                     help="rank by mean, mean - kappa*std (risk-averse), mean + kappa*std (exploratory) or one draw "
                          "from the posterior (thompson); auto: lcb for users with fewer than 20 ratings, else mean")
    rec.add_argument("--seed", type=int, default=None, help="seed of the thompson draw (None: a fresh one)")
    rec.add_argument("--kappa", type=float, default=None, help="lcb/ucb: mean -/+ kappa std (default 1); "
                     "thompson: the draw's spread times kappa (default 0.5)")
    rec.add_argument("--rate", nargs="+", action=_Extend, default=None, metavar="ITEM=RATING",
                     help="the user's ratings to fold in for this ranking (no refit)")
    rec.set_defaults(func=_recommend)

    ask = sub.add_parser("ask", help="which items to ask a (new) user to rate: the answers that teach most", **fmt)
    ask.add_argument("--model", required=True, help="a model file written by `mogp-surprise fit` or MWGP.save")
    ask.add_argument("--user", required=True, help="raw user id (new or known)")
    ask.add_argument("-n", type=int, default=5, help="number of questions")
    ask.add_argument("--rate", nargs="+", action=_Extend, default=None, metavar="ITEM=RATING",
                     help="the answers so far (no refit)")
    ask.set_defaults(func=_ask)

    pred = sub.add_parser("predict", help="predicted rating of one user and item, with its std and interval", **fmt)
    pred.add_argument("--model", required=True, help="a model file written by `mogp-surprise fit` or MWGP.save")
    pred.add_argument("--user", required=True, help="raw user id")
    pred.add_argument("--item", required=True, help="raw item id")
    pred.set_defaults(func=_predict)

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
    except (ValueError, TypeError, FileNotFoundError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
