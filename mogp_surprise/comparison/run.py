"""The paper's experiment as a library function: several algorithms on identical CV folds.

``compare`` fits every algorithm on the same seeded Surprise ``KFold`` splits and collects, per
fold, the QP curve (RMSE/MAE on the q most confident predictions), calibration metrics, ranking
metrics of each user's test items (precision@k, recall@k, top-k precision, NDCG@k) and timings,
from each algorithm's predictive mean and variance as arrays (``predict_dist``); the report
(:mod:`.report`) writes the table and draws the plots from the result. Point-estimate baselines are
wrapped in :class:`~.homoscedastic.HomoscedasticBaseline` so that NLL, CRPS and coverage can be
compared; their rows say so.
"""
from __future__ import annotations

import hashlib
import logging
import os
import time
import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..core.errors import check_int
from ..evaluation import arrays_from_predictions, qp_curve, uncertainty_report
from ..evaluation._validation import check_triplet, finite_real
from ..evaluation.metrics import calibration_curve
from ..evaluation.ranking import default_relevance_threshold, ranking_report
from .algorithms import ALGORITHMS, AlgoSpec, paper_model_overrides
from .report import check_reuse, distinct_names, read_earlier, reuse_list, reuse_results
from .result import CompareResult

logger = logging.getLogger(__name__)

QP_QUANTILES = 20
SUMMARY_AT = (1.0, 0.9, 0.8)


def predictive_arrays(algo: Any, testset: list, rating_scale: tuple[float, float]) -> tuple[np.ndarray, ...]:
    """(y, mean clipped to the rating scale, std) of a fitted algorithm on a testset, validated once.

    Through ``predict_dist(testset)`` (every algorithm of this package); another Surprise
    algorithm's ``test`` predictions work too when they carry ``details["std"]`` or ``["var"]``.
    The mean is clipped as Surprise's ``test`` clips its estimates, so that the accuracy columns
    are those Surprise reports.
    """
    if not hasattr(algo, "predict_dist"):  # checked as the metrics will (a std of 0 named its algorithm nowhere)
        y, mean, std = arrays_from_predictions(algo.test(testset))
        return check_triplet(y, np.clip(mean, *rating_scale), std, y_name="y_true", strict_std=True)
    mean, var = algo.predict_dist(testset)
    var = np.asarray(var, dtype=np.float64)
    bad = np.flatnonzero(~(var > 0))  # NaN too
    if bad.size:
        raise ValueError(f"predict_dist gave {bad.size} variance(s) that are not > 0 (first "
                         f"{float(var[bad[0]])!r} at position {int(bad[0])}): NLL, CRPS and coverage need a positive "
                         "variance")
    y = np.array([t[2] for t in testset], dtype=np.float64)
    return check_triplet(y, np.clip(mean, *rating_scale), np.sqrt(var), y_name="y_true")


def compare(dataset, algos: Sequence[str] = ("mwgp", "svd", "svdpp"), n_folds: int = 5, random_state: int = 0,
            mwgp_params: dict[str, Any] | None = None, progress: bool = False,
            extra_algos: dict[str, AlgoSpec] | None = None, rank_k: int = 10,
            rank_threshold: float | None = None, reuse: Sequence[str] = (),
            reuse_from: "CompareResult | str | os.PathLike | None" = None) -> CompareResult:
    """Run ``algos`` on identical seeded ``KFold`` splits of a Surprise ``dataset``.

    Parameters
    ----------
    dataset : surprise.Dataset
    algos : sequence of str
        Keys of :data:`ALGORITHMS` (``mwgp``, ``mwgp_paper``, ``svd``, ``svd8``, ``svdpp``, ``myfm``,
        ``myfm_flipped``, ``bgplvm``) or of ``extra_algos``.
    n_folds : int, default=5
    random_state : int, default=0
        Seeds the folds and every algorithm.
    mwgp_params : dict, optional
        Hyper-parameters passed to :class:`~mogp_surprise.MWGP`; ``mwgp_paper`` takes those that
        ``PAPER_MODEL`` leaves open (e.g. ``n_inducing``, ``device``) and warns about the others
        (e.g. ``n_epochs``: 30).
    progress : bool, default=False
        Show a tqdm bar over (fold, algorithm) fits.
    extra_algos : dict of str -> AlgoSpec, optional
        Further algorithms: an :class:`~.algorithms.AlgoSpec` whose ``make(seed, params)`` builds any Surprise
        algorithm whose predictions carry ``details["std"]`` or ``details["var"]``, or that has
        ``predict_dist(testset)`` (wrap point estimators in ``HomoscedasticBaseline``).
    rank_k : int, default=10
        Length of the top list of the ranking metrics: each user's test items ranked by the
        (clipped) predicted mean give ``precision_at_{k}``, ``recall_at_{k}`` (Surprise's FAQ
        definitions), ``top_precision_at_{k}`` (precision of the whole top k, whatever the predicted
        ratings) and ``ndcg_at_{k}`` (binary relevance), averaged over the fold's users
        (:func:`mogp_surprise.evaluation.ranking_report`).
    rank_threshold : float, optional
        A test rating ``>= rank_threshold`` is relevant. None: 3/4 of the way up the data set's
        rating scale (:func:`~mogp_surprise.evaluation.default_relevance_threshold`): 4 on 1-5.
    reuse : sequence of str, optional
        Algorithms whose per-fold results are taken from ``reuse_from`` (an earlier result or its folder)
        instead of fitted (:func:`~.report.reuse_results`); checked before any fit (the same folds and
        ranking metrics, every one there, none also in ``algos``).

    Every argument is checked before the first fit. ``random_state`` must be an int: the folds are
    seeded so that a later comparison can reuse them.
    """
    from surprise import Dataset
    from surprise.model_selection import KFold

    if not isinstance(dataset, Dataset):
        raise TypeError(f"compare takes a surprise Dataset (e.g. Dataset.load_from_df(...), which it splits into "
                        f"folds), got {type(dataset).__name__}")
    names = [] if isinstance(algos, str) else list(algos)
    if not names:
        raise ValueError(f"`algos` must be a non-empty list of algorithm names, got {algos!r}")
    distinct_names(names, "`algos` names")
    bad = {k: v for k, v in (extra_algos or {}).items() if not isinstance(v, AlgoSpec)}
    if bad:
        raise TypeError(f"`extra_algos` maps names to AlgoSpec(label, uncertainty, make) entries; got {bad} (wrap "
                        "a Surprise algorithm: AlgoSpec('kNN', 'homoscedastic', lambda seed, params: "
                        "HomoscedasticBaseline(KNNBasic())))")
    algos = names
    registry = {**ALGORITHMS, **(extra_algos or {})}
    unknown = [a for a in algos if a not in registry]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {unknown}; choose from {sorted(registry)}")
    absent = [hint for hint in (registry[a].missing() for a in algos if registry[a].missing) if hint]
    if absent:  # say so before any fit, not after hours of the others
        raise ImportError("; ".join(absent))
    n_folds, rank_k = check_int("n_folds", n_folds, 2), check_int("rank_k", rank_k, 1)
    if random_state is None:
        raise ValueError("`random_state` must be an int >= 0: the folds are seeded, so that the results can be "
                         "reused by a later comparison; got None")
    random_state = check_int("random_state", random_state, 0)
    n_ratings = len(dataset.raw_ratings)
    if n_folds > n_ratings:
        raise ValueError(f"`n_folds`={n_folds} is more than the data set's {n_ratings} ratings")
    _check_rating_scale(dataset)
    rank_threshold = _relevance_threshold(rank_threshold, dataset.reader.rating_scale)
    params = _checked_mwgp_params(mwgp_params, algos, random_state, registry)
    settings = {"n_folds": n_folds, "random_state": random_state, "algos": list(algos), "mwgp_params": params,
                "qp_quantiles": QP_QUANTILES, "rank_k": rank_k, "rank_threshold": rank_threshold,
                "data_digest": data_digest(dataset)}
    earlier = where = None
    if reuse:  # before any fit, not after hours of them
        reuse = reuse_list(reuse)
        if reuse_from is None:
            raise ValueError("`reuse` needs `reuse_from`: the earlier result, or the folder it was written to")
        earlier, where = read_earlier(reuse_from, None)
        sizes = {fold: n_ratings // n_folds + (fold < n_ratings % n_folds) for fold in range(n_folds)}  # KFold's
        check_reuse(earlier, reuse, settings, sizes, algos, where)
    overridden = paper_model_overrides(params) if "mwgp_paper" in algos else {}
    if overridden:
        kept = ", ".join(f"{name}={paper!r} (not {asked!r})" for name, (asked, paper) in overridden.items())
        warnings.warn(f"mwgp_paper keeps the paper's {kept}; mwgp_params apply to it only where PAPER_MODEL leaves "
                      "them open", UserWarning, stacklevel=2)
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[pd.DataFrame]] = {a: [] for a in algos}
    pooled: dict[str, list[np.ndarray]] = {a: [] for a in algos}
    splits = KFold(n_splits=n_folds, random_state=random_state, shuffle=True).split(dataset)
    bar = tqdm(total=n_folds * len(algos), desc="compare", unit="fit", disable=not progress)
    for fold, (trainset, testset) in enumerate(splits):
        for key in algos:
            spec = registry[key]
            bar.set_postfix_str(f"fold {fold + 1}/{n_folds}: {key}")
            algo = spec.make(random_state, params)
            start = time.perf_counter()
            algo.fit(trainset)
            fitted = time.perf_counter()
            try:  # the algorithm and fold named, whichever check finds its predictions wrong
                y, mean, std = predictive_arrays(algo, testset, trainset.rating_scale)
                fit_s, test_s = fitted - start, time.perf_counter() - fitted
                curve = qp_curve(y, mean, std, quantiles=QP_QUANTILES, metrics=("rmse", "mae"))
            except ValueError as exc:
                raise ValueError(f"{key}, fold {fold + 1}: {exc}") from None
            curves[key].append(curve)
            pooled[key].append(np.stack([y, mean, std]))
            at = curve.set_index(curve["quantile"].round(6))
            row = {"algo": key, "label": spec.label, "uncertainty": spec.uncertainty, "fold": fold}
            for q in SUMMARY_AT:
                row.update({f"{m}_q{round(q * 100)}": float(at.loc[round(q, 6), m]) for m in ("rmse", "mae")})
            report = uncertainty_report(y, mean, std)
            row.update({k: float(report[k]) for k in ("nll", "crps", "coverage_50", "coverage_80", "coverage_90",
                                                         "coverage_95", "sharpness")})
            ranking = ranking_report([t[0] for t in testset], y, mean, k=rank_k, threshold=rank_threshold)
            row.update({k: v for k, v in ranking.items() if k != "n_users"})
            row.update(fit_s=fit_s, test_s=test_s, n_test=len(y))
            rows.append(row)
            logger.info("fold %d %s: rmse %.4f (fit %.1f s)", fold + 1, key, row["rmse_q100"], fit_s)
            bar.update(1)
    bar.close()
    calibration = {key: calibration_curve(*np.concatenate(parts, axis=1)) for key, parts in pooled.items()}
    result = CompareResult(pd.DataFrame(rows), curves, calibration, settings)
    return result if earlier is None else reuse_results(result, earlier, reuse, where=where)


def _relevance_threshold(threshold: Any, scale: tuple[float, float]) -> float:
    """The ranking metrics' relevance threshold, checked: a finite number above the bottom of the scale and no
    higher than its top (at the bottom every test rating would be relevant and every ranking metric 1, above the
    top none and every metric 0); None: the default of the scale."""
    if threshold is None:
        return float(default_relevance_threshold(scale))
    if finite_real(threshold) is None:
        raise ValueError(f"`rank_threshold` must be a finite number, got {threshold!r}")
    if threshold > scale[1]:
        raise ValueError(f"`rank_threshold`={threshold:g} is above the top of the rating scale "
                         f"({scale[0]:g}, {scale[1]:g}): no "
                         "test rating would be relevant, and every ranking metric would be 0")
    if threshold <= scale[0]:
        raise ValueError(f"`rank_threshold`={threshold:g} is at or below the bottom of the rating scale "
                         f"({scale[0]:g}, {scale[1]:g}): every test rating would be relevant, and every ranking "
                         "metric would be 1")
    return float(threshold)


def _check_rating_scale(dataset: Any) -> None:
    """``ValueError`` for ratings outside the Reader's declared ``rating_scale`` (the estimates are clipped to it,
    and the relevance threshold placed on it: ratings twice the scale gave an RMSE of 3 without a word)."""
    low, high = dataset.reader.rating_scale
    ratings = np.fromiter((r for _, _, r, _ in dataset.raw_ratings), dtype=np.float64, count=len(dataset.raw_ratings))
    if ratings.size and (ratings.min() < low or ratings.max() > high):
        raise ValueError(f"the data set's ratings range over [{ratings.min():g}, {ratings.max():g}], outside its "
                         f"rating scale ({low:g}, {high:g}): give the Reader the scale the ratings use "
                         f"(Reader(rating_scale=(low, high)))")


def _checked_mwgp_params(params: dict[str, Any] | None, algos: Sequence[str], seed: int,
                         registry: dict[str, AlgoSpec]) -> dict[str, Any]:
    """``mwgp_params`` checked before the first fit (a bad value or unknown name failed only when MW-GP was built,
    after the algorithms before it had run); ``{}``, with a warning, where no algorithm of this run takes them."""
    params = dict(params or {})
    takers = [a for a in algos if a in ("mwgp", "mwgp_paper", "bgplvm")]
    if params and not takers:
        warnings.warn(f"mwgp_params {params} apply to no algorithm this comparison fits (mwgp, mwgp_paper, and "
                      "bgplvm's latent_dim); they are ignored", UserWarning, stacklevel=3)
        return {}
    for key in takers:
        check = getattr(registry[key].make(seed, params), "_config", None)  # MWGP's own check: names and values
        if check is not None:
            check()
    return params


def data_digest(dataset: Any) -> str:
    """A digest of the data set's ratings in their order: with the number of folds and the seed it fixes
    Surprise's folds, so a comparison reuses only results of the same folds (:func:`~.report.check_reuse`)."""
    digest = hashlib.sha256()  # ids as text and ratings as floats: the same file read with int or str ids agrees
    for uid, iid, rating, _ in dataset.raw_ratings:
        digest.update(f"{uid}\x1f{iid}\x1f{float(rating)!r}\x1e".encode())
    return digest.hexdigest()[:32]
