"""The commands that fit and serve a model: ``fit``, ``recommend``, ``ask`` and ``predict``."""
from __future__ import annotations

import argparse
import functools
import logging
import sys

import numpy as np

from ._args import file_scale, hyper_params

Z90 = 1.6448536269514722  # the 90 % central interval is mean +- Z90 * std


def fit_command(args: argparse.Namespace) -> int:
    import os
    import time

    from ..adapters.surprise_algo import MWGP
    from ..core.checkpoint import check_file_path
    from ..core.config import MWGPConfig
    from ..core.distributed import DistributedError, init_from_env, launched_by_torchrun, shutdown
    from ..datasets import DATASETS, load_item_titles, load_ratings, read_ratings_file, to_surprise_dataset

    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint FILE (the checkpoint to continue from)")
    check_file_path(args.out, "the model")  # before the fit, not after it
    params = {"random_state": args.seed, **hyper_params(args)}
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
            scale = tuple(args.rating_scale) if args.rating_scale else file_scale(df, args.ratings)
            titles, source = None, f"{args.ratings} ({len(df):,} ratings)"
            if df.attrs.get("header"):
                say(f"(the first row is a header, skipped: {', '.join(df.attrs['header'])})")
        else:
            df = load_ratings(args.dataset, data_dir=args.data_dir, download=not args.no_download)
            scale = tuple(args.rating_scale) if args.rating_scale else DATASETS[args.dataset].rating_scale
            titles, source = load_item_titles(args.dataset, args.data_dir), f"{args.dataset} ({len(df):,} ratings)"
        trainset = to_surprise_dataset(df[["user", "item", "rating"]], rating_scale=scale).build_full_trainset()
        say(f"Fitting MW-GP on {source}: {trainset.n_users:,} users, {trainset.n_items:,} items, rating scale "
            f"{scale[0]:g}..{scale[1]:g}" + (f"; data-parallel on {world} processes" if distributed else ""))
        started = time.perf_counter()
        algo = MWGP(**{"verbose": main_rank and not args.no_progress, **params}).fit(
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
    same id as an int, else without surrounding spaces (as ``fit --ratings`` reads them)."""
    from ..adapters._common import known_twin

    if not raw.strip():  # a ratings file has no empty ids (fit refuses them): an empty one is a missing argument
        raise ValueError(f"an id must not be empty or blank, got {raw!r}")
    for candidate in dict.fromkeys((raw, raw.strip())):
        if candidate in known:
            return candidate
        twin = known_twin(candidate, known.__contains__)
        if twin is not None:
            return twin
    return raw


def _parse_rates(algo, rates: list[str]) -> dict:
    out: dict = {}
    for entry in rates:
        item, sep, value = entry.rpartition("=")
        if not sep or not item:
            raise ValueError(f"--rate takes ITEM=RATING, got {entry!r}")
        key = _resolve(algo._encoders()[1], item)
        if key in out:
            raise ValueError(f"--rate gives the item {item!r} more than once")
        try:
            out[key] = float(value)
        except ValueError:
            raise ValueError(f"--rate {entry!r}: the rating {value!r} is not a number") from None
    return out


def _one_request(command):
    """A command that loads a model and answers one request: served without numba's kernels, whose start-up (about a
    second) would cost more than they save here (:func:`~..core.optim.compiled_serving`)."""
    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        from ..core.optim import compiled_serving
        with compiled_serving(False):
            return command(args)
    return run


def _model_and_user(args: argparse.Namespace):
    """The saved model, the user id as the model knows it, whether it is known, and the --rate ratings."""
    from ..adapters.surprise_algo import MWGP

    algo = MWGP.load(args.model)
    users = algo._encoders()[0]
    user = _resolve(users, args.user)
    return algo, user, user in users, _parse_rates(algo, args.rate) if args.rate else None


@_one_request
def recommend_command(args: argparse.Namespace) -> int:
    from ..core.recommend import THOMPSON_SCALE
    algo, user, known, ratings = _model_and_user(args)
    frame = algo.recommend(user, n=args.n, strategy=args.strategy, kappa=args.kappa, ratings=ratings,
                           random_state=args.seed)
    if ratings:
        print(f"User {user}: {len(ratings)} rating(s) folded in" + (" on top of their training ratings" if known
                                                                   else " (not in the training data)"))
    elif not known:
        print(f"User {user} is not in the model and no --rate was given: cold-start ranking (the population's)")
    k, t = (1.0, THOMPSON_SCALE) if args.kappa is None else (args.kappa, args.kappa)
    score = {"mean": "mean", "lcb": f"mean - {k:g} std", "ucb": f"mean + {k:g} std",
             "thompson": f"one posterior draw, spread x {t:g} (Thompson sampling)",
             "auto": f"mean - {k:g} std below 20 ratings, else mean"}[args.strategy]
    if args.strategy == "auto" and len(frame):  # which of the two this user got
        by_mean = bool(np.array_equal(frame["score"].to_numpy(), frame["mean"].to_numpy()))
        score = ("mean (this user has 20 ratings or more" if by_mean else
                 f"mean - {k:g} std (this user has fewer than 20 ratings") + "; strategy auto)"
    print(f"Top {len(frame)} by {score}; est: the mean within the rating scale; 90 % interval: mean +- {Z90:.3f} std")
    _print_rows(algo, frame)
    return 0


@_one_request
def ask_command(args: argparse.Namespace) -> int:
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
            [titles.get(r["item"], titles.get(str(r["item"]), ""))[:45]] if titles else []) + [fmt.format(r[col]) for col, fmt in extra]
        lo, hi = (min(max(r["mean"] + z * Z90 * r["std"], low), high) for z in (-1, 1))  # both ends within
        row += [f"{min(max(r['mean'], low), high):.2f}", f"{r['std']:.2f}", f"[{lo:.2f}, {hi:.2f}]"]
        rows.append(row)
    head = ((["rank"] if ranked else []) + ["item"] + (["title"] if titles else [])
            + [{"answer_prob": "chance"}.get(col, col) for col, _ in extra] + ["est", "std", "90 % interval"])
    widths = [max(len(h), *(len(row[k]) for row in rows)) if rows else len(h) for k, h in enumerate(head)]
    for line in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())


@_one_request
def predict_command(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..adapters.surprise_algo import MWGP

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
