"""Accuracy and uncertainty metrics for Gaussian predictive distributions.

All functions take the observed ratings ``y`` and the predictive moments
``mean``/``std`` of the *observed* rating (conventions, "Names") as 1-D arrays of
the same length, and return plain Python floats (or a dict / DataFrame of them).

The :data:`METRICS` registry maps lower-case names to point-estimate metrics
``f(y, mean) -> float``; :func:`~mogp_surprise.evaluation.qp.qp_curve` looks
metric names up there, and :func:`register_metric` adds new ones.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd
from scipy import special, stats

from ._validation import check_levels, check_std, check_triplet

__all__ = ["METRICS", "register_metric", "get_metric", "rmse", "mae", "gaussian_nll", "crps_gaussian",
           "interval_coverage", "calibration_curve", "sharpness", "uncertainty_report"]

MetricFunc = Callable[[np.ndarray, np.ndarray], float]

#: Default levels of :func:`calibration_curve`: 0.05, 0.10, ..., 0.95, 0.99.
DEFAULT_CALIBRATION_LEVELS: tuple[float, ...] = tuple(
    round(0.05 * k, 2) for k in range(1, 20)
) + (0.99,)

#: Levels reported by :func:`uncertainty_report` as ``coverage_50`` ... ``coverage_95``.
REPORT_LEVELS: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95)


def rmse(y: object, mean: object) -> float:
    """Root mean squared error.

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and point estimates.

    Returns
    -------
    float
    """
    return _rmse(*check_triplet(y, mean)[:2])


def _rmse(y: np.ndarray, mean: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - mean) ** 2)))


def mae(y: object, mean: object) -> float:
    """Mean absolute error.

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and point estimates.

    Returns
    -------
    float
    """
    return _mae(*check_triplet(y, mean)[:2])


def _mae(y: np.ndarray, mean: np.ndarray) -> float:
    return float(np.mean(np.abs(y - mean)))


#: Registry of point-estimate metrics ``f(y, mean) -> float`` by lower-case name.
METRICS: dict[str, MetricFunc] = {"rmse": rmse, "mae": mae}
#: the built-in metrics without their input checks, for callers that validated the arrays once
UNCHECKED: dict[MetricFunc, MetricFunc] = {rmse: _rmse, mae: _mae}


#: Columns of a QP-curve that are not metrics (no metric may take their names).
BASE_COLUMNS: tuple[str, ...] = ("quantile", "n", "std_threshold")


def register_metric(name: str, func: MetricFunc, *, overwrite: bool = False) -> None:
    """Add a point-estimate metric to :data:`METRICS`.

    Parameters
    ----------
    name : str
        Lower-case name, used as the column name of QP curves.
    func : callable
        ``func(y, mean) -> float`` with ``y`` and ``mean`` of shape (n,).
    overwrite : bool, default=False
        Allow replacing an existing entry.
    """
    if not isinstance(name, str) or not name or name != name.lower():
        raise ValueError(f"`name` must be a non-empty lower-case string; got {name!r}")
    if not callable(func):
        raise ValueError(f"`func` must be callable f(y, mean) -> float; got {func!r}")
    if name in (*BASE_COLUMNS, "n_folds"):
        raise ValueError(f"`name` {name!r} is a column every QP curve has already; choose another name")
    if name in METRICS and not overwrite:
        raise ValueError(f"`name` {name!r} is already registered; pass overwrite=True to replace it")
    METRICS[name] = func


def get_metric(metric: str | MetricFunc) -> tuple[str, MetricFunc]:
    """Resolve a metric name (or callable) to ``(column_name, function)``.

    Parameters
    ----------
    metric : str or callable
        A key of :data:`METRICS`, or ``f(y, mean) -> float`` (its ``__name__``
        becomes the column name).

    Returns
    -------
    tuple of (str, callable)
    """
    if callable(metric):
        return getattr(metric, "__name__", "metric"), metric
    if isinstance(metric, str) and metric.lower() in METRICS:
        return metric.lower(), METRICS[metric.lower()]
    raise ValueError(f"`metrics` entries must be one of {sorted(METRICS)} or a callable "
                     f"f(y, mean) -> float; got {metric!r}")


def gaussian_nll(y: object, mean: object, std: object) -> float:
    """Mean negative log-likelihood of ``y`` under ``N(mean, std**2)``.

    ``0.5 * log(2 pi) + log(std) + 0.5 * ((y - mean) / std)**2`` averaged over
    ratings, in nats.

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and predictive means.
    std : array-like of shape (n,)
        Predictive standard deviations, all ``> 0``.

    Returns
    -------
    float
    """
    return _gaussian_nll(*check_triplet(y, mean, std, strict_std=True))


def _gaussian_nll(y: np.ndarray, mean: np.ndarray, std: np.ndarray) -> float:
    z = (y - mean) / std
    return float(np.mean(0.5 * math.log(2.0 * math.pi) + np.log(std) + 0.5 * z**2))


def crps_gaussian(y: object, mean: object, std: object) -> float:
    """Mean continuous ranked probability score of Gaussian predictions.

    Closed form (Gneiting and Raftery, 2007) with ``z = (y - mean) / std``:
    ``std * (z * (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi))``. Lower is better;
    it has the units of the ratings and reduces to the MAE as ``std -> 0``.

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and predictive means.
    std : array-like of shape (n,)
        Predictive standard deviations, all ``> 0``.

    Returns
    -------
    float

    References
    ----------
    T. Gneiting and A. E. Raftery. Strictly proper scoring rules, prediction,
    and estimation. JASA 102(477), 2007.
    """
    return _crps_gaussian(*check_triplet(y, mean, std, strict_std=True))


def _crps_gaussian(y: np.ndarray, mean: np.ndarray, std: np.ndarray) -> float:
    z = (y - mean) / std
    crps = std * (z * (2.0 * special.ndtr(z) - 1.0) + 2.0 * stats.norm.pdf(z) - 1.0 / math.sqrt(math.pi))
    return float(np.mean(crps))


def _coverage(y: np.ndarray, mean: np.ndarray, std: np.ndarray, levels: np.ndarray) -> np.ndarray:
    # half-width of the central interval; level 1 gives an infinite interval
    with np.errstate(invalid="ignore"):  # 0 * inf for std == 0 at level 1
        half = np.multiply.outer(special.ndtri((1.0 + levels) / 2.0), std)
    half = np.where(np.isnan(half), np.inf, half)
    return np.mean(np.abs(y - mean)[None, :] <= half, axis=1)


def interval_coverage(
    y: object, mean: object, std: object, levels: Iterable[float] = REPORT_LEVELS
) -> dict[float, float]:
    """Observed fraction of ratings inside the central predictive intervals.

    For a level ``p`` the central interval is
    ``mean +/- std * Phi^{-1}((1 + p) / 2)`` (bounds included). A calibrated
    model covers a fraction ``p``; an over-confident one covers less.

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and predictive means.
    std : array-like of shape (n,)
        Predictive standard deviations, ``>= 0``.
    levels : sequence of float, default=(0.5, 0.8, 0.9, 0.95)
        Nominal levels in (0, 1].

    Returns
    -------
    dict of float to float
        ``{level: observed fraction}`` in the order of ``levels``.
    """
    y_arr, mean_arr, std_arr = check_triplet(y, mean, std)
    lv = check_levels(levels)
    observed = _coverage(y_arr, mean_arr, std_arr, lv)
    return {float(p): float(o) for p, o in zip(lv, observed)}


def calibration_curve(
    y: object, mean: object, std: object, levels: Iterable[float] | None = None
) -> pd.DataFrame:
    """Expected vs observed coverage of central intervals (reliability diagram).

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and predictive means.
    std : array-like of shape (n,)
        Predictive standard deviations, ``>= 0``.
    levels : sequence of float, optional
        Nominal levels in (0, 1]; default 0.05, 0.10, ..., 0.95 and 0.99.

    Returns
    -------
    pandas.DataFrame of shape (n_levels, 2)
        Columns ``expected`` (the nominal level) and ``observed`` (the fraction
        of ratings inside the interval). Calibrated models lie on the diagonal.
    """
    y_arr, mean_arr, std_arr = check_triplet(y, mean, std)
    lv = check_levels(DEFAULT_CALIBRATION_LEVELS if levels is None else levels)
    observed = _coverage(y_arr, mean_arr, std_arr, lv)
    return pd.DataFrame({"expected": lv, "observed": observed})


def sharpness(std: object) -> float:
    """Mean predictive standard deviation (smaller is sharper).

    Parameters
    ----------
    std : array-like of shape (n,)
        Predictive standard deviations, ``>= 0``.

    Returns
    -------
    float
    """
    return float(np.mean(check_std(std)))


def uncertainty_report(y: object, mean: object, std: object) -> dict[str, float]:
    """All metrics of this module in one dict.

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and predictive means.
    std : array-like of shape (n,)
        Predictive standard deviations, all ``> 0``.

    Returns
    -------
    dict of str to float
        Keys ``rmse``, ``mae``, ``nll``, ``crps``, ``coverage_50``,
        ``coverage_80``, ``coverage_90``, ``coverage_95``, ``sharpness`` and
        ``n`` (an int).
    """
    y_arr, mean_arr, std_arr = check_triplet(y, mean, std, strict_std=True)  # once, for every metric
    report: dict[str, float] = {
        "rmse": _rmse(y_arr, mean_arr),
        "mae": _mae(y_arr, mean_arr),
        "nll": _gaussian_nll(y_arr, mean_arr, std_arr),
        "crps": _crps_gaussian(y_arr, mean_arr, std_arr),
    }
    coverage = _coverage(y_arr, mean_arr, std_arr, np.asarray(REPORT_LEVELS))
    report.update({f"coverage_{round(level * 100)}": float(o) for level, o in zip(REPORT_LEVELS, coverage)})
    report.update(sharpness=float(np.mean(std_arr)), n=int(y_arr.size))
    return report
