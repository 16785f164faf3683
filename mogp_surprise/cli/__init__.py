"""Command line: ``mogp-surprise demo | compare | qp-plot | fit | recommend | ask | predict``. The only part of the
package that prints: :mod:`.experiments` (demo, compare, qp-plot), :mod:`.serving` (fit, recommend, ask, predict),
:mod:`._args` (reading the options)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

from ._args import Extend
from .experiments import compare_command, demo_command, qp_plot_command
from .serving import ask_command, fit_command, predict_command, recommend_command


def _data_options(parser: argparse.ArgumentParser, what: str = "folder holding the data set") -> None:
    """The options every command that loads data and fits MW-GP shares."""
    parser.add_argument("--data-dir", default=None, help=f"{what} (None: $MOGP_DATA, then Surprise's cache)")
    parser.add_argument("--no-download", action="store_true", help="never try Surprise's downloader")
    parser.add_argument("--params", default=None, help="MW-GP hyper-parameters as JSON, e.g. '{\"n_inducing\": 64}' "
                                                       "(None: the defaults)")


def _serving_options(parser: argparse.ArgumentParser, user: str | None = None, rate: str | None = None) -> None:
    """--model and --user (``user``: its help), or --rate (``rate``: its help) of the commands that read a model."""
    if user is not None:
        parser.add_argument("--model", required=True, help="a model file written by `mogp-surprise fit` or MWGP.save")
        parser.add_argument("--user", required=True, help=user)
    if rate is not None:
        parser.add_argument("--rate", nargs="+", action=Extend, default=None, metavar="ITEM=RATING", help=rate)


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
    demo.set_defaults(func=demo_command)

    from ..comparison.algorithms import ALGORITHMS  # light: each algorithm is imported when it is built

    cmp_ = sub.add_parser("compare", help="the paper's experiment: algorithms side by side on identical CV folds",
                          **fmt)
    cmp_.add_argument("--dataset", default="ml-100k", choices=["ml-100k", "ml-1m", "ml-10m", "jester"],
                      help="rating data set")
    cmp_.add_argument("--folds", type=int, default=5, help="number of cross-validation folds")
    cmp_.add_argument("--algos", nargs="+", action=Extend, default=["mwgp", "svd", "svdpp"],
                      choices=sorted(ALGORITHMS),
                      help="mwgp, mwgp_paper (the paper's model), svd (BiasedMF), svd8 (n_factors=8), svdpp, "
                           "myfm (needs the myfm extra), myfm_flipped (myFM with implicit features on both sides; "
                           "myfm extra), bgplvm (the Bayesian GPLVM; needs the bgplvm extra)")
    cmp_.add_argument("--out", default="results", help="output folder (tables, curves, PNG plots)")
    cmp_.add_argument("--overwrite", action="store_true",
                      help="replace results in --out of algorithms this run neither fits nor reuses (else refused)")
    cmp_.add_argument("--seed", type=int, default=0, help="seed of the folds and of every algorithm")
    cmp_.add_argument("--rank-k", type=int, default=10, metavar="K",
                      help="top-K of the ranking metrics (precision@K, recall@K, top-K precision, NDCG@K)")
    cmp_.add_argument("--rank-threshold", type=float, default=None, metavar="R",
                      help="a test rating >= R is relevant (None: 3/4 of the way up the rating scale, 4 on 1-5)")
    _data_options(cmp_)
    cmp_.add_argument("--allow-synthetic", action="store_true", help="fall back to synthetic data if none found")
    cmp_.add_argument("--reuse", nargs="+", action=Extend, default=None, metavar="ALGO",
                      help="take these algorithms' per-fold results from an earlier run on the same folds "
                           "instead of fitting them again")
    cmp_.add_argument("--reuse-from", default=None, metavar="DIR",
                      help="folder of that earlier run (None: --out)")
    cmp_.add_argument("--title", default=None, help="title of the table and plots (None: data set and folds)")
    cmp_.add_argument("--no-progress", action="store_true", help="no progress bars")
    cmp_.set_defaults(func=compare_command)

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
    fit.set_defaults(func=fit_command)

    rec = sub.add_parser("recommend", help="top-N items for a user from a saved model, with uncertainty", **fmt)
    _serving_options(rec, "raw user id (unknown: cold start, or folded in with --rate)")
    rec.add_argument("-n", type=int, default=10, help="number of items")
    rec.add_argument("--strategy", default="auto", choices=["auto", "mean", "lcb", "ucb", "thompson"],
                     help="rank by mean, mean - kappa*std (risk-averse), mean + kappa*std (exploratory) or one draw "
                          "from the posterior (thompson); auto: lcb for users with fewer than 20 ratings, else mean")
    rec.add_argument("--seed", type=int, default=None, help="seed of the thompson draw (None: a fresh one)")
    rec.add_argument("--kappa", type=float, default=None, help="lcb/ucb: mean -/+ kappa std (default 1); "
                     "thompson: the draw's spread times kappa (default 0.5)")
    _serving_options(rec, rate="the user's ratings to fold in for this ranking (no refit)")
    rec.set_defaults(func=recommend_command)

    ask = sub.add_parser("ask", help="which items to ask a (new) user to rate: the answers that teach most", **fmt)
    _serving_options(ask, "raw user id (new or known)")
    ask.add_argument("-n", type=int, default=5, help="number of questions")
    _serving_options(ask, rate="the answers so far (no refit)")
    ask.set_defaults(func=ask_command)

    pred = sub.add_parser("predict", help="predicted rating of one user and item, with its std and interval", **fmt)
    _serving_options(pred, "raw user id")
    pred.add_argument("--item", required=True, help="raw item id")
    pred.set_defaults(func=predict_command)

    plot = sub.add_parser("qp-plot", help="re-draw the QP and calibration plots from saved compare results", **fmt)
    plot.add_argument("results", help="folder written by `mogp-surprise compare --out`")
    plot.add_argument("--title", default=None, help="plot title (None: the one saved with the results)")
    plot.set_defaults(func=qp_plot_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C: say what is kept, not a stack trace through torch
        checkpoint, kept = getattr(args, "checkpoint", None), ""
        if args.func is fit_command:
            kept = (f"; {checkpoint!r} holds the epochs completed so far: run the same command with --resume to "
                    "continue" if checkpoint and os.path.exists(checkpoint) else "; no model was saved")
        sys.stderr.write(f"{_error_prefix()}: interrupted{kept}\n")
        sys.stderr.flush()
        return 130
    except Exception as exc:  # what a user can act on is one line; anything else is a defect, shown whole
        from ..core.errors import NumericalError
        if not isinstance(exc, (ValueError, TypeError, OSError, ImportError, NumericalError)):
            raise
        sys.stderr.write(f"{_error_prefix()}: {exc}\n")  # one write: the lines of torchrun's processes stay apart
        sys.stderr.flush()
        return 2


def _error_prefix() -> str:
    """``error``, and under torchrun (more than one process) the process's rank: ``error (rank 1)``."""
    world, rank = os.environ.get("WORLD_SIZE", "1"), os.environ.get("RANK")
    return f"error (rank {rank})" if world.isdecimal() and int(world) > 1 and rank is not None else "error"
